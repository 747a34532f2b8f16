"""Alembic migrations of the registry's tables; ``upgrade_to_head(engine)`` runs them.

Its revisions live in ``registry_alembic_version``, so it can share a database with the
persister; replicas starting together migrate one at a time (``trainwatch_common.migrations``).
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_common.migrations import ServiceMigrations

MIGRATIONS = ServiceMigrations(
    service="registry",
    script_location=Path(__file__).parent,
    lock_key=7_312_845_002,
)


async def upgrade_to_head(engine: AsyncEngine) -> None:
    """Bring the schema to the newest revision (idempotent, safe for concurrent replicas)."""
    async with engine.begin() as connection:
        await MIGRATIONS.upgrade(connection)
