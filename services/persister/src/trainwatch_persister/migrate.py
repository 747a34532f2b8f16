"""Run the Alembic migrations programmatically (no alembic.ini needed).

Replicas may start together: on PostgreSQL an advisory lock makes them migrate one at a time,
and the ones that wait find the schema already at head.
"""

from __future__ import annotations

import logging
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy.ext.asyncio import AsyncConnection

from trainwatch_persister.database import make_engine, safe_url

log = logging.getLogger(__name__)

# An arbitrary constant naming "trainwatch persister migrations" among advisory locks.
MIGRATION_LOCK_KEY = 7_312_845_001


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    return config


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
    if conn.dialect.name == "postgresql":
        await conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    await conn.run_sync(_upgrade)


def _upgrade(connection: sa.Connection) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


async def current_revision(conn: AsyncConnection) -> str | None:
    return await conn.run_sync(lambda sync: MigrationContext.configure(sync).get_current_revision())
