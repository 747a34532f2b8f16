"""Indexes for the overview's aggregates

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

"Jobs running over time" starts from the unfinished, live jobs (terminal = false AND deleted_at
IS NULL): without this index that is a scan of every job ever kept. The breakdown groups by
(cluster, namespace, phase) over the live jobs: a covering index in that order answers it without
reading the table or sorting.
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_terminal_deleted_at", "jobs", ["terminal", "deleted_at"])
    op.create_index(
        "ix_jobs_cluster_id_namespace_phase_deleted_at", "jobs", ["cluster_id", "namespace", "phase", "deleted_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_cluster_id_namespace_phase_deleted_at", table_name="jobs")
    op.drop_index("ix_jobs_terminal_deleted_at", table_name="jobs")
