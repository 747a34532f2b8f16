"""The notifier's SQL tables (SQLAlchemy Core); Alembic migrations in ``migrations/`` create them.

- ``silences``: every silence ever created; an expired one stays (listed as expired).
- ``suppressions``: each notification a silence held back, with the event as received, one row
  per event (the silence it matched first): what a silence suppressed is never lost.
- ``digests`` and ``digest_jobs``: the jobs each digest sent, in its order, for the dashboard view
  its "open" link shows (exactly those jobs); kept 30 days.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()

# SQLite only auto-increments an INTEGER PRIMARY KEY.
_RowId = BigInteger().with_variant(Integer(), "sqlite")

silences = Table(
    "silences",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("cluster", String(63), nullable=True),
    Column("namespace", String(63), nullable=True),
    Column("kind", String(63), nullable=True),
    Column("job", String(253), nullable=True),
    Column("owner", String(253), nullable=True),
    Column("labels", JSON, nullable=False),
    Column("category", String(64), nullable=True),
    Column("author", String(200), nullable=False),
    Column("created_by", String(32), nullable=False, doc="token_id of the creating token, never the token"),
    Column("reason", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("ends_at", DateTime(timezone=True), nullable=False, doc="set to the time of an early expiry"),
    Column("expired_by", String(32), nullable=True),
    Index("ix_silences_ends_at", "ends_at"),
)

suppressions = Table(
    "suppressions",
    metadata,
    Column("id", _RowId, primary_key=True, autoincrement=True),
    Column("event_id", String(300), nullable=False, unique=True),
    Column("silence_id", String(32), nullable=False),
    Column("cluster_id", String(63), nullable=False),
    Column("namespace", String(63), nullable=False),
    Column("kind", String(63), nullable=False),
    Column("name", String(253), nullable=False),
    Column("uid", String(128), nullable=False),
    Column("phase", String(32), nullable=False),
    Column("channels", JSON, nullable=False, doc="the channels the event was routed to"),
    Column("suppressed_at", DateTime(timezone=True), nullable=False),
    Column("event", Text, nullable=False, doc="the CloudEvent as received"),
    Index("ix_suppressions_silence_id", "silence_id", "id"),
)

digests = Table(
    "digests",
    metadata,
    Column("id", String(32), primary_key=True, doc="random: the link names it, nobody can guess one"),
    Column("channel", String(200), nullable=False),
    Column("title", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_digests_created_at", "created_at"),
)

digest_jobs = Table(
    "digest_jobs",
    metadata,
    Column("digest_id", String(32), primary_key=True),
    Column("position", Integer, primary_key=True),
    Column("event_id", String(300), nullable=False),
    Column("cluster_id", String(63), nullable=False),
    Column("namespace", String(63), nullable=False),
    Column("kind", String(63), nullable=False),
    Column("name", String(253), nullable=False),
    Column("uid", String(128), nullable=False),
    Column("phase", String(32), nullable=False),
    Column("terminal", Boolean, nullable=False),
    Column("reason", Text, nullable=True),
    Column("observed_at", DateTime(timezone=True), nullable=False),
)
