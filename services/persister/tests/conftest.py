"""Fixtures: every database test runs against both real PostgreSQL and SQLite."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from persister_factories import migrated_engine
from sqlalchemy.ext.asyncio import AsyncEngine


@pytest.fixture(params=["postgresql", "sqlite"])
def database_url(request: pytest.FixtureRequest) -> str:
    """A fresh, empty database of each kind."""
    fixture = "postgres_url" if request.param == "postgresql" else "sqlite_url"
    return str(request.getfixturevalue(fixture))


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """A migrated database's engine."""
    engine = await migrated_engine(database_url)
    yield engine
    await engine.dispose()
