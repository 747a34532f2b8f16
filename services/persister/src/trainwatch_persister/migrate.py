"""Run the persister's Alembic migrations programmatically (no alembic.ini needed).

Its revisions live in ``persister_alembic_version``, so it can share a database with the
registry; replicas starting together migrate one at a time (``trainwatch_common.migrations``).
"""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncConnection

from trainwatch_common.migrations import ServiceMigrations
from trainwatch_persister.database import make_engine, safe_url

log = logging.getLogger(__name__)

MIGRATIONS = ServiceMigrations(
    service="persister",
    script_location=Path(__file__).parent / "migrations",
    lock_key=7_312_845_001,
)


async def migrate(database_url: str) -> None:
    """Bring the database schema to the newest revision."""
    engine = make_engine(database_url, pool_size=1)
    try:
        async with engine.begin() as conn:
            await upgrade(conn)
    finally:
        await engine.dispose()
    log.info("database migrated", extra={"database": safe_url(database_url)})


async def upgrade(conn: AsyncConnection) -> None:
    await MIGRATIONS.upgrade(conn)


async def current_revision(conn: AsyncConnection) -> str | None:
    return await MIGRATIONS.current_revision(conn)
