"""Alembic migrations of one service, safe beside another service's in the same database.

The registry and the persister may share one PostgreSQL database (a platform team hands us one).
With Alembic's single default ``alembic_version`` table, whichever service migrated second found
the other's revision there and failed ("Can't locate revision identified by '0001_initial'").
So each service keeps its revision in a version table of its own, ``<service>_alembic_version``,
and replicas that start together take a PostgreSQL advisory lock per service: they migrate one
at a time, and the ones that waited find the schema at head.

A database migrated before this change keeps a service's revision in ``alembic_version``; the
service that finds its own revision there moves it to its own table (and drops the old table
once it is empty), so an upgrade needs no manual step.

Each service's ``migrations/env.py`` reads the version table from
``context.config.attributes["version_table"]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy.ext.asyncio import AsyncConnection

LEGACY_VERSION_TABLE = "alembic_version"


@dataclass(frozen=True, slots=True)
class ServiceMigrations:
    service: str  # names the version table: "<service>_alembic_version"
    script_location: Path
    # Names "this service's migrations" among PostgreSQL advisory locks (any constant, one per service).
    lock_key: int

    @property
    def version_table(self) -> str:
        return f"{self.service}_alembic_version"

    def config(self, connection: sa.Connection | None = None) -> Config:
        config = Config()
        config.set_main_option("script_location", str(self.script_location))
        config.attributes["connection"] = connection
        config.attributes["version_table"] = self.version_table
        return config

    async def upgrade(self, conn: AsyncConnection) -> None:
        """Bring this service's tables to head, inside the caller's transaction."""
        if conn.dialect.name == "postgresql":
            # Held until the transaction ends: concurrent replicas of this service wait here.
            await conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": self.lock_key})
        await conn.run_sync(self._upgrade)

    async def current_revision(self, conn: AsyncConnection) -> str | None:
        return await conn.run_sync(
            lambda sync: MigrationContext.configure(
                sync, opts={"version_table": self.version_table}
            ).get_current_revision()
        )

    def _upgrade(self, connection: sa.Connection) -> None:
        self._adopt_legacy_revision(connection)
        command.upgrade(self.config(connection), "head")

    def _adopt_legacy_revision(self, connection: sa.Connection) -> None:
        tables = set(sa.inspect(connection).get_table_names())
        if self.version_table in tables or LEGACY_VERSION_TABLE not in tables:
            return
        legacy = sa.table(LEGACY_VERSION_TABLE, sa.column("version_num", sa.String))
        scripts = ScriptDirectory.from_config(self.config())
        for (revision,) in connection.execute(sa.select(legacy.c.version_num)).all():
            if not _is_known(scripts, revision):
                continue  # another service's revision: that service moves it
            command.stamp(self.config(connection), revision)
            connection.execute(sa.delete(legacy).where(legacy.c.version_num == revision))
        if not connection.execute(sa.select(sa.func.count()).select_from(legacy)).scalar():
            connection.execute(sa.text(f"DROP TABLE {LEGACY_VERSION_TABLE}"))


def _is_known(scripts: ScriptDirectory, revision: str) -> bool:
    try:
        return scripts.get_revision(revision) is not None
    except CommandError:
        return False
