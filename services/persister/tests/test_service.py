"""Migrations, the command line and the committed OpenAPI document."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from persister_factories import make_event
from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_persister import openapi, queries
from trainwatch_persister.__main__ import main
from trainwatch_persister.database import async_url, make_engine, safe_url
from trainwatch_persister.filters import JobFilters
from trainwatch_persister.migrate import MIGRATIONS, current_revision, migrate
from trainwatch_persister.tables import NAME_TRIGRAM_INDEX, metadata

REPOSITORY = Path(__file__).resolve().parents[3]


async def test_migrations_match_the_tables_and_run_twice(database_url: str) -> None:
    await migrate(database_url)
    await migrate(database_url)  # a second replica starting finds nothing to do
    engine: AsyncEngine = make_engine(database_url)
    try:
        async with engine.connect() as conn:
            assert await current_revision(conn) == "0005"
            differences = await conn.run_sync(
                lambda sync: compare_metadata(
                    MigrationContext.configure(sync, opts={"version_table": MIGRATIONS.version_table}),
                    metadata,
                )
            )
            dialect = conn.dialect.name
            if dialect == "postgresql":
                query = sa.text("SELECT indexname FROM pg_indexes WHERE tablename = 'jobs'")
                assert NAME_TRIGRAM_INDEX in set((await conn.execute(query)).scalars())
    finally:
        await engine.dispose()
    # The optional trigram index is made by the migration without being declared in tables.py, and
    # the GIN index on labels is declared for PostgreSQL only (autogenerate ignores ddl_if).
    expected_gaps = {NAME_TRIGRAM_INDEX} | ({"ix_jobs_labels"} if dialect == "sqlite" else set())
    assert [d for d in differences if _index_name(d) not in expected_gaps] == []


def _index_name(difference: object) -> str | None:
    return getattr(difference[1], "name", None) if isinstance(difference, tuple) else None


def test_urls_get_async_drivers_and_hide_passwords() -> None:
    assert async_url("postgresql://u:p@h/db").drivername == "postgresql+asyncpg"
    assert async_url("sqlite:///x.db").drivername == "sqlite+aiosqlite"
    assert "secret" not in safe_url("postgresql://u:secret@h/db")


def test_migrate_and_prune_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    database = tmp_path / "cli.db"
    env = {"TRAINWATCH_DATABASE_URL": f"sqlite:///{database}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "trainwatch_persister", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert '"message":"database migrated"' in done.stderr  # JSON logs
    monkeypatch.setenv("TRAINWATCH_DATABASE_URL", env["TRAINWATCH_DATABASE_URL"])
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        main(["prune"])  # in-process: an empty database has nothing to prune, and that is fine
    finally:
        root.handlers[:], root.level = handlers, level  # main() configured JSON logging


def test_committed_openapi_document_is_current() -> None:
    committed = (REPOSITORY / openapi.DEFAULT_PATH).read_text(encoding="utf-8")
    assert committed == openapi.render(), (
        "docs/openapi/persister.json is stale: run `uv run python -m trainwatch_persister openapi`"
    )


async def test_migration_0005_counts_the_jobs_of_an_existing_database_by_kind_and_terminal(
    database_url: str,
) -> None:
    """A database at 0004 with jobs (0002's counters) is upgraded: job_counts is recounted with the
    kind and the terminal flag, the new triggers keep it, and a downgrade gives 0002's counters back."""
    from alembic import command

    from trainwatch_common import Phase
    from trainwatch_persister import repository
    from trainwatch_persister.tables import jobs

    def to(revision: str, down: bool = False) -> Any:
        def run(sync: sa.Connection) -> None:
            (command.downgrade if down else command.upgrade)(MIGRATIONS.config(sync), revision)

        return run

    engine: AsyncEngine = make_engine(database_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(to("0004"))
            events = [
                make_event(uid="run", phase=Phase.RUNNING),
                make_event(uid="done", phase=Phase.SUCCEEDED),
                make_event(uid="flagged", phase=Phase.RUNNING, terminal=True),
                make_event(uid="gone", sequence=1, phase=Phase.FAILED, change="deleted"),
                make_event(uid="other", cluster="beta", phase=Phase.RUNNING, kind_key="mpijob"),
            ]
            await repository.write_events(conn, events)
        async with engine.begin() as conn:
            await conn.run_sync(to("head"))
            assert await current_revision(conn) == "0005"
        expected = {
            ("alpha", "Running", "pytorchjob", False, False): 1,
            ("alpha", "Succeeded", "pytorchjob", True, False): 1,
            ("alpha", "Running", "pytorchjob", True, False): 1,
            ("alpha", "Failed", "pytorchjob", True, True): 1,
            ("beta", "Running", "mpijob", False, False): 1,
        }
        assert await _counters(engine) == expected
        async with engine.begin() as conn:  # the new triggers: a move out of terminal is counted
            await repository.write_events(conn, [make_event(uid="done", sequence=1, phase=Phase.RUNNING)])
            assert await queries.count(conn, JobFilters(terminal=False)) == 3
            assert await queries.count(conn, JobFilters(terminal=True, deleted=False)) == 1
            assert await queries.count(conn, JobFilters(kinds=("mpijob",), terminal=False)) == 1
            exact = sa.select(sa.func.count()).select_from(jobs).where(jobs.c.terminal.is_(False))
            assert (await conn.execute(exact)).scalar_one() == 3
        async with engine.begin() as conn:
            await conn.run_sync(to("0004", down=True))
            rows = await conn.execute(sa.text("SELECT cluster_id, phase, deleted, jobs FROM job_counts"))
            old = {(c, p, bool(d)): n for c, p, d, n in rows if n}
        assert old == {
            ("alpha", "Running", False): 3,
            ("alpha", "Failed", True): 1,
            ("beta", "Running", False): 1,
        }
    finally:
        await engine.dispose()


async def _counters(engine: AsyncEngine) -> dict[tuple[str, str, str, bool, bool], int]:
    query = "SELECT cluster_id, phase, kind_key, terminal, deleted, jobs FROM job_counts"
    async with engine.connect() as conn:
        rows = await conn.execute(sa.text(query))
        return {(c, p, k, bool(t), bool(d)): n for c, p, k, t, d, n in rows if n}
