"""clusters, outbox and cluster_health

Revision ID: 0001_initial
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_initial"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "clusters",
        sa.Column("id", sa.String(63), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("watch", sa.JSON, nullable=False),
        sa.Column("context", sa.String(253), nullable=True),
        sa.Column("server", sa.Text, nullable=True),
        sa.Column("auth_method", sa.String(64), nullable=True),
        sa.Column("kubeconfig_encrypted", sa.LargeBinary, nullable=True),
        sa.Column("connection_fingerprint", sa.String(80), nullable=True),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("source", sa.String(300), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "outbox",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("cluster_id", sa.String(63), nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("event_type", sa.String(16), nullable=False),
        sa.Column("subject", sa.String(300), nullable=False),
        sa.Column("msg_id", sa.String(120), nullable=False, unique=True),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("kv_value", sa.LargeBinary, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_outbox_unsent", "outbox", ["sent_at", "id"])
    op.create_table(
        "cluster_health",
        sa.Column("cluster_id", sa.String(63), primary_key=True),
        sa.Column("reachable", sa.Boolean, nullable=False),
        sa.Column("owner", sa.String(253), nullable=True),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("report", sa.JSON, nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("cluster_health")
    op.drop_index("ix_outbox_unsent", table_name="outbox")
    op.drop_table("outbox")
    op.drop_table("clusters")
