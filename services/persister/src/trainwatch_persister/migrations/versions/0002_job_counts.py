"""job_counts: exact live totals per (cluster, phase, deleted), kept by triggers

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29

PostgreSQL uses statement-level triggers with transition tables, so a batch upsert of 500 jobs
updates each affected counter row once, in key order (no deadlock between replicas); an
INSERT ... ON CONFLICT DO UPDATE reports its updated rows to the UPDATE trigger. SQLite (one
writer at a time) uses row-level triggers.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_UPSERT = """
INSERT INTO job_counts (cluster_id, phase, deleted, jobs)
SELECT cluster_id, phase, deleted, sum(delta) FROM ({rows}) AS changes
GROUP BY cluster_id, phase, deleted HAVING sum(delta) <> 0 ORDER BY cluster_id, phase, deleted
ON CONFLICT (cluster_id, phase, deleted) DO UPDATE SET jobs = job_counts.jobs + excluded.jobs;
"""
_NEW = "SELECT cluster_id, phase, deleted_at IS NOT NULL AS deleted, 1 AS delta FROM new_rows"
_OLD = "SELECT cluster_id, phase, deleted_at IS NOT NULL AS deleted, -1 AS delta FROM old_rows"

_POSTGRESQL = [
    f"""CREATE FUNCTION trainwatch_job_counts_insert() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN {_UPSERT.format(rows=_NEW)} RETURN NULL; END $$""",
    f"""CREATE FUNCTION trainwatch_job_counts_update() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN {_UPSERT.format(rows=_OLD + " UNION ALL " + _NEW)} RETURN NULL; END $$""",
    f"""CREATE FUNCTION trainwatch_job_counts_delete() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN {_UPSERT.format(rows=_OLD)} RETURN NULL; END $$""",
    """CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION trainwatch_job_counts_insert()""",
    """CREATE TRIGGER job_counts_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION trainwatch_job_counts_update()""",
    """CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION trainwatch_job_counts_delete()""",
]


def _sqlite_add(row: str, delta: int) -> str:
    return f"""INSERT INTO job_counts (cluster_id, phase, deleted, jobs)
    VALUES ({row}.cluster_id, {row}.phase, {row}.deleted_at IS NOT NULL, {delta})
    ON CONFLICT (cluster_id, phase, deleted) DO UPDATE SET jobs = jobs + {delta};"""


_SQLITE = [
    f"CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs BEGIN {_sqlite_add('NEW', 1)} END",
    f"""CREATE TRIGGER job_counts_update AFTER UPDATE ON jobs
    WHEN OLD.cluster_id IS NOT NEW.cluster_id OR OLD.phase IS NOT NEW.phase
      OR (OLD.deleted_at IS NULL) IS NOT (NEW.deleted_at IS NULL)
    BEGIN {_sqlite_add('OLD', -1)} {_sqlite_add('NEW', 1)} END""",
    f"CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs BEGIN {_sqlite_add('OLD', -1)} END",
]


def upgrade() -> None:
    op.create_table(
        "job_counts",
        sa.Column("cluster_id", sa.String(63), nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("deleted", sa.Boolean, nullable=False),
        sa.Column("jobs", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("cluster_id", "phase", "deleted", name="pk_job_counts"),
    )
    bind = op.get_bind()
    for statement in _POSTGRESQL if bind.dialect.name == "postgresql" else _SQLITE:
        op.execute(statement)
    # Jobs written before this revision.
    op.execute(
        "INSERT INTO job_counts (cluster_id, phase, deleted, jobs) "
        "SELECT cluster_id, phase, deleted_at IS NOT NULL, count(*) FROM jobs "
        "GROUP BY cluster_id, phase, deleted_at IS NOT NULL"
    )


def downgrade() -> None:
    for trigger in ("job_counts_insert", "job_counts_update", "job_counts_delete"):
        if op.get_bind().dialect.name == "postgresql":
            op.execute(f"DROP TRIGGER IF EXISTS {trigger} ON jobs")
            op.execute(f"DROP FUNCTION IF EXISTS trainwatch_{trigger}()")
        else:
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    op.drop_table("job_counts")
