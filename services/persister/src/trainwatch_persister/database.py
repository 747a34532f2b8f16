"""Engines for PostgreSQL (production) and SQLite (the embedded default).

Plain URLs are given their async drivers, so TRAINWATCH_DATABASE_URL may be written the way
every other tool writes it. PostgreSQL connections are pinged before use: after the server
restarts, the pool replaces dead connections instead of failing a batch with them.

The consumer acks after COMMIT, so a commit must be durable when it returns: every PostgreSQL
session of ours sets ``synchronous_commit=on`` whatever the server's default (with it off, a
crash loses the last commits that were already acked: the outage test caught exactly that).
"""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

POSTGRESQL = "postgresql"
SQLITE = "sqlite"


def async_url(url: str) -> URL:
    """The URL with an async driver: postgresql:// → postgresql+asyncpg://, sqlite:// → sqlite+aiosqlite://."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend in (POSTGRESQL, "postgres"):
        return parsed.set(drivername="postgresql+asyncpg")
    if backend == SQLITE:
        return parsed.set(drivername="sqlite+aiosqlite")
    raise ValueError(f"unsupported database {backend!r}: use postgresql:// or sqlite:///")


def safe_url(url: str) -> str:
    """The URL for logs: the password is never shown."""
    return make_url(url).render_as_string(hide_password=True)


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def make_engine(url: str, *, pool_size: int = 5, command_timeout: float = 60) -> AsyncEngine:
    target = async_url(url)
    if target.get_backend_name() == SQLITE:
        engine = create_async_engine(target, json_serializer=_json, connect_args={"timeout": 30})
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    return create_async_engine(
        target,
        json_serializer=_json,
        pool_pre_ping=True,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_recycle=1800,
        connect_args={
            "timeout": 10,
            "command_timeout": command_timeout,
            "server_settings": {"synchronous_commit": "on"},
        },
    )


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets the API read while the consumer writes; busy_timeout waits for the writer's lock.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def dialect_name(engine: AsyncEngine) -> str:
    return engine.dialect.name
