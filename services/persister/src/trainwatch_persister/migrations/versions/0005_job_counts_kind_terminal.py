"""job_counts gets `kind_key` and `terminal` dimensions: (cluster, kind, phase, terminal, deleted)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

The jobs page's "Active"/"Finished" filter (`terminal`, the event's own flag, not a function of
the phase) and its kind filter could not be answered from 0002's counters: their `total` fell back
to an exact count over a large part of the table (issue 21: terminal=false p99 128 ms at 1M
jobs, a kind 0.66 s). The counters are rebuilt with the new key (at most clusters x kinds x
phases x 4 rows), the triggers of 0002 are replaced by ones that count the new dimensions too (an
update that only flips `terminal` moves a job between counters), and the totals are recounted
from `jobs` in the same transaction. The triggers are dropped first, which locks `jobs` until
commit (ACCESS EXCLUSIVE on PostgreSQL, the write lock on SQLite), so no write lands between the
recount and the new triggers.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_TRIGGERS = ("job_counts_insert", "job_counts_update", "job_counts_delete")


def _postgresql(dimensions: list[str], new: bool) -> list[str]:
    keys = ", ".join(dimensions)
    extra = "kind_key, terminal, " if new else ""
    upsert = f"""
    INSERT INTO job_counts ({keys}, jobs)
    SELECT {keys}, sum(delta) FROM ({{rows}}) AS changes
    GROUP BY {keys} HAVING sum(delta) <> 0 ORDER BY {keys}
    ON CONFLICT ({keys}) DO UPDATE SET jobs = job_counts.jobs + excluded.jobs;
    """
    added = f"SELECT cluster_id, phase, {extra}deleted_at IS NOT NULL AS deleted, 1 AS delta FROM new_rows"
    removed = f"SELECT cluster_id, phase, {extra}deleted_at IS NOT NULL AS deleted, -1 AS delta FROM old_rows"
    return [
        f"""CREATE FUNCTION trainwatch_job_counts_insert() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN {upsert.format(rows=added)} RETURN NULL; END $$""",
        f"""CREATE FUNCTION trainwatch_job_counts_update() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN {upsert.format(rows=removed + " UNION ALL " + added)} RETURN NULL; END $$""",
        f"""CREATE FUNCTION trainwatch_job_counts_delete() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN {upsert.format(rows=removed)} RETURN NULL; END $$""",
        """CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs REFERENCING NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION trainwatch_job_counts_insert()""",
        """CREATE TRIGGER job_counts_update AFTER UPDATE ON jobs
        REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION trainwatch_job_counts_update()""",
        """CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS old_rows
        FOR EACH STATEMENT EXECUTE FUNCTION trainwatch_job_counts_delete()""",
    ]


def _sqlite(dimensions: list[str], new: bool) -> list[str]:
    keys = ", ".join(dimensions)

    def add(row: str, delta: int) -> str:
        extra = f"{row}.kind_key, {row}.terminal, " if new else ""
        return f"""INSERT INTO job_counts ({keys}, jobs)
        VALUES ({row}.cluster_id, {row}.phase, {extra}{row}.deleted_at IS NOT NULL, {delta})
        ON CONFLICT ({keys}) DO UPDATE SET jobs = jobs + {delta};"""

    moved = "OLD.cluster_id IS NOT NEW.cluster_id OR OLD.phase IS NOT NEW.phase"
    if new:
        moved += " OR OLD.kind_key IS NOT NEW.kind_key OR OLD.terminal IS NOT NEW.terminal"
    return [
        f"CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs BEGIN {add('NEW', 1)} END",
        f"""CREATE TRIGGER job_counts_update AFTER UPDATE ON jobs
        WHEN {moved} OR (OLD.deleted_at IS NULL) IS NOT (NEW.deleted_at IS NULL)
        BEGIN {add('OLD', -1)} {add('NEW', 1)} END""",
        f"CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs BEGIN {add('OLD', -1)} END",
    ]


def _rebuild(*, new: bool) -> None:
    """Replace job_counts and its triggers with 0005's shape (or, ``new=False``, 0002's), recounted."""
    postgresql = op.get_bind().dialect.name == "postgresql"
    for trigger in _TRIGGERS:
        if postgresql:
            op.execute(f"DROP TRIGGER IF EXISTS {trigger} ON jobs")
            op.execute(f"DROP FUNCTION IF EXISTS trainwatch_{trigger}()")
        else:
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    # A new table rather than ALTER: SQLite cannot change a primary key in place, and the rows are
    # recounted anyway (a few per cluster and phase).
    op.drop_table("job_counts")
    added = ["kind_key", "terminal"] if new else []
    dimensions = ["cluster_id", "phase", *added, "deleted"]
    op.create_table(
        "job_counts",
        sa.Column("cluster_id", sa.String(63), nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        *([sa.Column("kind_key", sa.String(32), nullable=False)] if new else []),
        *([sa.Column("terminal", sa.Boolean, nullable=False)] if new else []),
        sa.Column("deleted", sa.Boolean, nullable=False),
        sa.Column("jobs", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint(*dimensions, name="pk_job_counts"),
    )
    for statement in (_postgresql if postgresql else _sqlite)(dimensions, new):
        op.execute(statement)
    grouped = ", ".join(["cluster_id", "phase", *added, "deleted_at IS NOT NULL"])
    op.execute(
        f"INSERT INTO job_counts ({', '.join(dimensions)}, jobs) "
        f"SELECT {grouped}, count(*) FROM jobs GROUP BY {grouped}"
    )


def upgrade() -> None:
    _rebuild(new=True)


def downgrade() -> None:
    _rebuild(new=False)
