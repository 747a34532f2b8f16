"""The SQL engine of the services that keep their own SQL (registry, notifier): PostgreSQL (asyncpg)
in production, SQLite (aiosqlite) as the embedded default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine


def async_url(url: str) -> str:
    """Accept the plain forms operators copy around and name the async driver for them."""
    for plain, driver in (
        ("postgresql://", "postgresql+asyncpg://"),
        ("postgres://", "postgresql+asyncpg://"),
        ("sqlite:///", "sqlite+aiosqlite:///"),
    ):
        if url.startswith(plain):
            return driver + url[len(plain) :]
    return url


def create_engine(url: str) -> AsyncEngine:
    parsed = make_url(async_url(url))
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(parsed, connect_args={"timeout": 30})
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    return create_async_engine(parsed, pool_size=10, max_overflow=10, pool_pre_ping=True)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets readers proceed during a write; the busy timeout makes writers queue, not fail.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    # NORMAL in WAL mode: a commit survives a process crash (what the registry's outbox and the
    # notifier's suppression records rely on); only a
    # power loss can undo the last commits. FULL would fsync on every commit.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
