"""Alembic migrations of the notifier's tables; ``upgrade_to_head(engine)`` runs them.

Its revisions live in ``notifier_alembic_version``, so it can share a database with the
registry and the persister; replicas starting together migrate one at a time
(``trainwatch_common.migrations``).
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_common.migrations import ServiceMigrations

MIGRATIONS = ServiceMigrations(
    service="notifier",
    script_location=Path(__file__).parent,
    lock_key=7_312_845_004,
)


async def upgrade_to_head(engine: AsyncEngine) -> None:
    """Bring the schema to the newest revision (idempotent, safe for concurrent replicas)."""
    async with engine.begin() as connection:
        await MIGRATIONS.upgrade(connection)
