"""jobs and job_transitions

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from trainwatch_persister.tables import UtcDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

JsonDocument = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("cluster_id", sa.String(63), nullable=False),
        sa.Column("uid", sa.String(128), nullable=False),
        sa.Column("namespace", sa.String(253), nullable=False),
        sa.Column("kind_key", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("api_version", sa.String(128), nullable=False),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("sub_phase", sa.String(16)),
        sa.Column("terminal", sa.Boolean, nullable=False),
        sa.Column("previous_phase", sa.String(16)),
        sa.Column("reason", sa.Text),
        sa.Column("message", sa.Text),
        sa.Column("owner", sa.String(253)),
        sa.Column("queue", sa.String(253)),
        sa.Column("labels", JsonDocument, nullable=False),
        sa.Column("replicas", JsonDocument, nullable=False),
        sa.Column("restart_count", sa.Integer, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("started_at", UtcDateTime),
        sa.Column("finished_at", UtcDateTime),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        sa.Column("deleted_at", UtcDateTime),
        sa.Column("sequence", sa.BigInteger, nullable=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("resource_version", sa.String(64), nullable=False),
        sa.Column("rv_number", sa.BigInteger, nullable=False),
        sa.Column("event_id", sa.String(400), nullable=False),
        sa.Column("watcher_id", sa.String(253)),
        sa.PrimaryKeyConstraint("cluster_id", "uid", name="pk_jobs"),
    )
    op.create_index("ix_jobs_updated_at_cluster_id_uid", "jobs", ["updated_at", "cluster_id", "uid"])
    op.create_index("ix_jobs_created_at_cluster_id_uid", "jobs", ["created_at", "cluster_id", "uid"])
    op.create_index("ix_jobs_name_cluster_id_uid", "jobs", ["name", "cluster_id", "uid"])
    op.create_index("ix_jobs_cluster_id_updated_at_uid", "jobs", ["cluster_id", "updated_at", "uid"])
    op.create_index("ix_jobs_phase_updated_at", "jobs", ["phase", "updated_at", "cluster_id", "uid"])
    op.create_index("ix_jobs_cluster_id_phase", "jobs", ["cluster_id", "phase"])
    op.create_index("ix_jobs_namespace_cluster_id", "jobs", ["namespace", "cluster_id"])
    op.create_index("ix_jobs_kind_key", "jobs", ["kind_key"])
    op.create_index("ix_jobs_owner", "jobs", ["owner"])
    op.create_index("ix_jobs_deleted_at", "jobs", ["deleted_at"])

    op.create_table(
        "job_transitions",
        sa.Column("event_id", sa.String(400), nullable=False),
        sa.Column("cluster_id", sa.String(63), nullable=False),
        sa.Column("uid", sa.String(128), nullable=False),
        sa.Column("sequence", sa.BigInteger, nullable=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("change", sa.String(16), nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("sub_phase", sa.String(16)),
        sa.Column("terminal", sa.Boolean, nullable=False),
        sa.Column("previous_phase", sa.String(16)),
        sa.Column("reason", sa.Text),
        sa.Column("message", sa.Text),
        sa.Column("resource_version", sa.String(64), nullable=False),
        sa.Column("observed_at", UtcDateTime, nullable=False),
        sa.Column("source_transition_time", UtcDateTime),
        sa.Column("watcher_id", sa.String(253)),
        sa.Column("event", JsonDocument, nullable=False),
        sa.PrimaryKeyConstraint("event_id", name="pk_job_transitions"),
    )
    op.create_index(
        "ix_job_transitions_cluster_id_uid_sequence", "job_transitions", ["cluster_id", "uid", "sequence"]
    )
    op.create_index("ix_job_transitions_observed_at", "job_transitions", ["observed_at"])

    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.create_index(
            "ix_jobs_labels", "jobs", ["labels"], postgresql_using="gin", postgresql_ops={"labels": "jsonb_path_ops"}
        )
        _create_name_trigram_index(bind)


def _create_name_trigram_index(bind: sa.Connection) -> None:
    """Substring search on names uses a trigram index where pg_trgm may be created; else it scans."""
    available = bind.execute(sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'")).first()
    if available is None:
        return
    try:
        with bind.begin_nested():  # a refused CREATE EXTENSION (no privilege) must not abort the migration
            bind.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pg_trgm"))
    except sa.exc.DBAPIError:
        return
    bind.execute(sa.text("CREATE INDEX ix_jobs_name_trgm ON jobs USING gin (name gin_trgm_ops)"))


def downgrade() -> None:
    op.drop_table("job_transitions")
    op.drop_table("jobs")
