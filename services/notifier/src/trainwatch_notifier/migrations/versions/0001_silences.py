"""silences and suppressions (issue 18)

Revision ID: 0001_silences
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_silences"
down_revision = None
branch_labels = None
depends_on = None

_RowId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "silences",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("cluster", sa.String(63), nullable=True),
        sa.Column("namespace", sa.String(63), nullable=True),
        sa.Column("kind", sa.String(63), nullable=True),
        sa.Column("job", sa.String(253), nullable=True),
        sa.Column("owner", sa.String(253), nullable=True),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("category", sa.String(64), nullable=True),
        sa.Column("author", sa.String(200), nullable=False),
        sa.Column("created_by", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expired_by", sa.String(32), nullable=True),
    )
    op.create_index("ix_silences_ends_at", "silences", ["ends_at"])
    op.create_table(
        "suppressions",
        sa.Column("id", _RowId, primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.String(300), nullable=False, unique=True),
        sa.Column("silence_id", sa.String(32), nullable=False),
        sa.Column("cluster_id", sa.String(63), nullable=False),
        sa.Column("namespace", sa.String(63), nullable=False),
        sa.Column("kind", sa.String(63), nullable=False),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("uid", sa.String(128), nullable=False),
        sa.Column("phase", sa.String(32), nullable=False),
        sa.Column("channels", sa.JSON, nullable=False),
        sa.Column("suppressed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("event", sa.Text, nullable=False),
    )
    op.create_index("ix_suppressions_silence_id", "suppressions", ["silence_id", "id"])


def downgrade() -> None:
    op.drop_table("suppressions")
    op.drop_table("silences")
