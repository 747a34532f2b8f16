"""job_counts gets a `terminal` dimension: (cluster, phase, terminal, deleted)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

`terminal` is the event's own flag, not a function of the phase, so the list's `terminal=false`
(the dashboard's "Active") could not be answered from 0002's counters: it fell back to an exact
count over about half of the table (120+ ms at 1M jobs, issue 21). The counters are rebuilt with
the new key, the triggers of 0002 are replaced by ones that count `terminal` too (an update that
only flips it moves a job between counters), and the totals are recounted from `jobs` in the same
transaction. The triggers are dropped first, which locks `jobs` until commit (ACCESS EXCLUSIVE on
PostgreSQL, the write lock on SQLite), so no write lands between the recount and the new triggers.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_TRIGGERS = ("job_counts_insert", "job_counts_update", "job_counts_delete")


def _postgresql(dimensions: list[str], terminal: bool) -> list[str]:
    keys = ", ".join(dimensions)
    extra = "terminal, " if terminal else ""
    upsert = f"""
    INSERT INTO job_counts ({keys}, jobs)
    SELECT {keys}, sum(delta) FROM ({{rows}}) AS changes
    GROUP BY {keys} HAVING sum(delta) <> 0 ORDER BY {keys}
    ON CONFLICT ({keys}) DO UPDATE SET jobs = job_counts.jobs + excluded.jobs;
    """
    new = f"SELECT cluster_id, phase, {extra}deleted_at IS NOT NULL AS deleted, 1 AS delta FROM new_rows"
    old = f"SELECT cluster_id, phase, {extra}deleted_at IS NOT NULL AS deleted, -1 AS delta FROM old_rows"
    return [
        f"""CREATE FUNCTION trainwatch_job_counts_insert() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN {upsert.format(rows=new)} RETURN NULL; END $$""",
        f"""CREATE FUNCTION trainwatch_job_counts_update() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN {upsert.format(rows=old + " UNION ALL " + new)} RETURN NULL; END $$""",
        f"""CREATE FUNCTION trainwatch_job_counts_delete() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN {upsert.format(rows=old)} RETURN NULL; END $$""",
        """CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs REFERENCING NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION trainwatch_job_counts_insert()""",
        """CREATE TRIGGER job_counts_update AFTER UPDATE ON jobs
        REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION trainwatch_job_counts_update()""",
        """CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS old_rows
        FOR EACH STATEMENT EXECUTE FUNCTION trainwatch_job_counts_delete()""",
    ]


def _sqlite(dimensions: list[str], terminal: bool) -> list[str]:
    keys = ", ".join(dimensions)

    def add(row: str, delta: int) -> str:
        extra = f"{row}.terminal, " if terminal else ""
        return f"""INSERT INTO job_counts ({keys}, jobs)
        VALUES ({row}.cluster_id, {row}.phase, {extra}{row}.deleted_at IS NOT NULL, {delta})
        ON CONFLICT ({keys}) DO UPDATE SET jobs = jobs + {delta};"""

    moved = "OLD.cluster_id IS NOT NEW.cluster_id OR OLD.phase IS NOT NEW.phase"
    if terminal:
        moved += " OR OLD.terminal IS NOT NEW.terminal"
    return [
        f"CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs BEGIN {add('NEW', 1)} END",
        f"""CREATE TRIGGER job_counts_update AFTER UPDATE ON jobs
        WHEN {moved} OR (OLD.deleted_at IS NULL) IS NOT (NEW.deleted_at IS NULL)
        BEGIN {add('OLD', -1)} {add('NEW', 1)} END""",
        f"CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs BEGIN {add('OLD', -1)} END",
    ]


def _rebuild(*, terminal: bool) -> None:
    """Replace job_counts and its triggers with the shape with (or without) `terminal`, recounted."""
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
    dimensions = ["cluster_id", "phase", *(["terminal"] if terminal else []), "deleted"]
    op.create_table(
        "job_counts",
        sa.Column("cluster_id", sa.String(63), nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        *([sa.Column("terminal", sa.Boolean, nullable=False)] if terminal else []),
        sa.Column("deleted", sa.Boolean, nullable=False),
        sa.Column("jobs", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint(*dimensions, name="pk_job_counts"),
    )
    for statement in (_postgresql if postgresql else _sqlite)(dimensions, terminal):
        op.execute(statement)
    grouped = ", ".join(["cluster_id", "phase", *(["terminal"] if terminal else []), "deleted_at IS NOT NULL"])
    op.execute(
        f"INSERT INTO job_counts ({', '.join(dimensions)}, jobs) "
        f"SELECT {grouped}, count(*) FROM jobs GROUP BY {grouped}"
    )


def upgrade() -> None:
    _rebuild(terminal=True)


def downgrade() -> None:
    _rebuild(terminal=False)
