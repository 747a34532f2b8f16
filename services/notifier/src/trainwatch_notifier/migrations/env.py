"""Alembic environment: always handed a live connection by ``upgrade_to_head``."""

from __future__ import annotations

from alembic import context

from trainwatch_notifier.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through trainwatch_notifier.migrations.upgrade_to_head")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=True,
    # Its own version table: the notifier may share a database with the registry and the persister.
    version_table=context.config.attributes.get("version_table", "alembic_version"),
)
with context.begin_transaction():
    context.run_migrations()
