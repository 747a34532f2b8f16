"""Alembic migrations of the registry's tables; ``upgrade_to_head(engine)`` runs them."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

MIGRATIONS_DIR = Path(__file__).parent


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    return config


async def upgrade_to_head(engine: AsyncEngine) -> None:
    """Bring the schema to the newest revision (idempotent; concurrent replicas on PostgreSQL
    serialise on Alembic's version table inside one transaction)."""

    def upgrade(connection: Connection) -> None:
        command.upgrade(alembic_config(connection), "head")

    async with engine.begin() as connection:
        await connection.run_sync(upgrade)
