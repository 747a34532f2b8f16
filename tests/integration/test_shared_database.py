"""The registry and the persister in one database (issue 17): each owns its migrations, in either
order, concurrently, and a database migrated before each had its own version table upgrades."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from trainwatch_common.sql_engine import async_url
from trainwatch_persister.migrate import MIGRATIONS as PERSISTER
from trainwatch_registry.migrations import MIGRATIONS as REGISTRY

PERSISTER_HEAD = "0005"
REGISTRY_HEAD = "0002_credentials_expire_at"


@pytest.fixture(params=["postgresql", "sqlite"])
def database_url(request: pytest.FixtureRequest) -> str:
    name = "postgres_url" if request.param == "postgresql" else "sqlite_url"
    return str(request.getfixturevalue(name))


@pytest.fixture
async def engines(database_url: str) -> AsyncIterator[Callable[[], AsyncEngine]]:
    """A new engine per caller, as each replica has its own."""
    made: list[AsyncEngine] = []

    def make() -> AsyncEngine:
        engine = create_async_engine(async_url(database_url))
        made.append(engine)
        return engine

    yield make
    for engine in made:
        await engine.dispose()


async def _migrate_registry(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await REGISTRY.upgrade(conn)


async def _migrate_persister(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await PERSISTER.upgrade(conn)


async def _revisions(engine: AsyncEngine) -> tuple[str | None, str | None]:
    async with engine.connect() as conn:
        return await REGISTRY.current_revision(conn), await PERSISTER.current_revision(conn)


async def _tables(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        return set(await conn.run_sync(lambda sync: sa.inspect(sync).get_table_names()))


async def test_registry_first_then_persister(engines: Callable[[], AsyncEngine]) -> None:
    """The shipped deploy did not start: the persister found the registry's '0001_initial'."""
    await _migrate_registry(engines())
    await _migrate_persister(engines())
    assert await _revisions(engines()) == (REGISTRY_HEAD, PERSISTER_HEAD)


async def test_persister_first_then_registry(engines: Callable[[], AsyncEngine]) -> None:
    await _migrate_persister(engines())
    await _migrate_registry(engines())
    engine = engines()
    assert await _revisions(engine) == (REGISTRY_HEAD, PERSISTER_HEAD)
    assert {"registry_alembic_version", "persister_alembic_version"} <= await _tables(engine)
    assert "alembic_version" not in await _tables(engine)


_MIGRATE_IN_A_PROCESS = """
import asyncio, sys
from sqlalchemy.ext.asyncio import create_async_engine
from trainwatch_common.sql_engine import async_url
if sys.argv[1] == "registry":
    from trainwatch_registry.migrations import MIGRATIONS
else:
    from trainwatch_persister.migrate import MIGRATIONS

async def main() -> None:
    engine = create_async_engine(async_url(sys.argv[2]))
    async with engine.begin() as conn:
        await MIGRATIONS.upgrade(conn)
    await engine.dispose()

asyncio.run(main())
"""


async def test_many_replicas_of_both_start_at_once(
    engines: Callable[[], AsyncEngine], database_url: str
) -> None:
    """Replicas are processes (Alembic's environment is a module global: one migration at a time
    per process), all started together against the one database."""
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite is the single-process embedded default: replicas share PostgreSQL")
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", _MIGRATE_IN_A_PROCESS, service, database_url, stderr=asyncio.subprocess.PIPE
        )
        for service in ("registry", "persister") * 3
    ]
    results = await asyncio.gather(*(process.communicate() for process in processes))
    failures = [
        stderr.decode()[-2000:]
        for process, (_, stderr) in zip(processes, results, strict=True)
        if process.returncode
    ]
    assert not failures, failures
    assert await _revisions(engines()) == (REGISTRY_HEAD, PERSISTER_HEAD)


async def test_a_database_migrated_into_the_shared_version_table_upgrades(
    engines: Callable[[], AsyncEngine],
) -> None:
    """Before each service had its own table, the first one to migrate wrote alembic_version."""
    engine = engines()
    async with engine.begin() as conn:

        def old_style_upgrade(sync: sa.Connection) -> None:
            config = REGISTRY.config(sync)
            config.attributes["version_table"] = "alembic_version"
            command.upgrade(config, "head")

        await conn.run_sync(old_style_upgrade)
    assert "alembic_version" in await _tables(engine)

    await _migrate_persister(engines())  # leaves the registry's revision where it is
    assert "alembic_version" in await _tables(engine)
    await _migrate_registry(engines())  # takes its revision into its own table
    assert await _revisions(engines()) == (REGISTRY_HEAD, PERSISTER_HEAD)
    assert "alembic_version" not in await _tables(engine)
