"""Alembic environment: the connection comes from ``trainwatch_persister.migrate``."""

from __future__ import annotations

from alembic import context

from trainwatch_persister.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run the migrations with `python -m trainwatch_persister migrate`")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
    # Its own version table: the persister may share a database with the registry.
    version_table=context.config.attributes.get("version_table", "alembic_version"),
)
with context.begin_transaction():
    context.run_migrations()
