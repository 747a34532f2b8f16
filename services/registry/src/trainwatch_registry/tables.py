"""The registry's SQL tables (SQLAlchemy Core); Alembic migrations in ``migrations/`` create them.

- ``clusters``: one row per cluster id ever registered. A removed cluster keeps its row as a
  tombstone (``deleted_at`` set, secret erased) so that its revision keeps growing if the id is
  registered again: event ids are (cluster id, revision) and must never be reused.
- ``outbox``: the events to publish, written in the same transaction as the change.
- ``cluster_health``: the last health each cluster's owning watcher reported.
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
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()

# SQLite only auto-increments an INTEGER PRIMARY KEY.
_OutboxId = BigInteger().with_variant(Integer(), "sqlite")

clusters = Table(
    "clusters",
    metadata,
    Column("id", String(63), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("description", Text, nullable=False, default=""),
    Column("labels", JSON, nullable=False),
    Column("watch", JSON, nullable=False),
    Column("context", String(253), nullable=True),
    Column("server", Text, nullable=True),
    Column("auth_method", String(64), nullable=True),
    Column("kubeconfig_encrypted", LargeBinary, nullable=True, doc="Fernet token; NULL on a tombstone"),
    Column("connection_fingerprint", String(80), nullable=True),
    Column("revision", Integer, nullable=False),
    Column("source", String(300), nullable=False, doc="'api' or 'import:<file name>'"),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("deleted_at", DateTime(timezone=True), nullable=True),
    Column("credentials_expire_at", DateTime(timezone=True), nullable=True, doc="a JWT token's exp"),
)

outbox = Table(
    "outbox",
    metadata,
    Column("id", _OutboxId, primary_key=True, autoincrement=True),
    Column("cluster_id", String(63), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("event_type", String(16), nullable=False),
    Column("subject", String(300), nullable=False),
    Column("msg_id", String(120), nullable=False, unique=True),
    Column("payload", LargeBinary, nullable=False, doc="The CloudEvent JSON, as published"),
    Column("kv_value", LargeBinary, nullable=True, doc="ClusterSpec JSON for the KV bucket; NULL = delete"),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("sent_at", DateTime(timezone=True), nullable=True),
)
Index("ix_outbox_unsent", outbox.c.sent_at, outbox.c.id)

cluster_health = Table(
    "cluster_health",
    metadata,
    Column("cluster_id", String(63), primary_key=True),
    Column("reachable", Boolean, nullable=False),
    Column("owner", String(253), nullable=True),
    Column("epoch", BigInteger, nullable=False),
    Column("observed_at", DateTime(timezone=True), nullable=False),
    Column("report", JSON, nullable=False, doc="The ClusterHealth event as received"),
    Column("received_at", DateTime(timezone=True), nullable=False),
)
