"""Migrations, the command line and the committed OpenAPI document."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_persister import openapi
from trainwatch_persister.__main__ import main
from trainwatch_persister.database import async_url, make_engine, safe_url
from trainwatch_persister.migrate import MIGRATIONS, current_revision, migrate
from trainwatch_persister.tables import NAME_TRIGRAM_INDEX, metadata

REPOSITORY = Path(__file__).resolve().parents[3]


async def test_migrations_match_the_tables_and_run_twice(database_url: str) -> None:
    await migrate(database_url)
    await migrate(database_url)  # a second replica starting finds nothing to do
    engine: AsyncEngine = make_engine(database_url)
    try:
        async with engine.connect() as conn:
            assert await current_revision(conn) == "0004"
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
