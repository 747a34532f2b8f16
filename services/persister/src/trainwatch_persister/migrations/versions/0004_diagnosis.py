"""Diagnosis, resources and times on jobs; diagnosis on job_transitions (issue 16)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

Columns only (all nullable), added in place: no table rewrite on PostgreSQL, and on SQLite a plain
ALTER TABLE ADD COLUMN, so the job_counts triggers of 0002 stay. Rows written before this revision
read as "no diagnosis" until their job's next event. One index serves the category filter in the
list's default order (updated_at, then the keyset tie-breakers).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

NullableJsonDocument = sa.JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")


def _diagnosis_columns() -> list[sa.Column[Any]]:
    return [
        sa.Column("diagnosis_category", sa.String(32)),
        sa.Column("diagnosis_blame", sa.String(16)),
        sa.Column("diagnosis_summary", sa.String(256)),
        sa.Column("diagnosis", NullableJsonDocument),
    ]


_JOB_COLUMNS: list[sa.Column[Any]] = [
    sa.Column("last_change", sa.String(16)),
    sa.Column("gpus", sa.Integer),
    sa.Column("gpu_product", sa.String(253)),
    sa.Column("cpu", sa.Float),
    sa.Column("memory_bytes", sa.BigInteger),
    sa.Column("queue_wait_seconds", sa.Float),
    sa.Column("run_seconds", sa.Float),
]


def upgrade() -> None:
    for column in [*_diagnosis_columns(), *_JOB_COLUMNS]:
        op.add_column("jobs", column)
    for column in _diagnosis_columns():
        op.add_column("job_transitions", column)
    op.create_index(
        "ix_jobs_diagnosis_category_updated_at",
        "jobs",
        ["diagnosis_category", "updated_at", "cluster_id", "uid"],
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_diagnosis_category_updated_at", table_name="jobs")
    names = [c.name for c in _diagnosis_columns()]
    for name in names:
        op.drop_column("job_transitions", name)
    for name in [*names, *(c.name for c in _JOB_COLUMNS)]:
        op.drop_column("jobs", name)
