"""Silences and what they suppressed, in SQL: every replica reads the same set, a restart keeps it.

Silences are not kept in Redis: losing Redis's data (a FLUSHALL, a fresh data dir) must cost a
relist, never the silences, nor the record of what they suppressed. Each routed event reads the
active silences afresh (a handful of rows, on an index), so a silence created through any replica
holds on every replica from the next event on, with no cache to go stale.

A suppression is written before its event is acked (the consumer waits for SQL while it is away,
as it waits for Redis), one row per event id: a redelivered copy finds its row and is suppressed
again, whatever the silences say by then, so a silence expired early never re-sends what it held.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from trainwatch_common import JobStatusEvent
from trainwatch_common.observability.database import database_unavailable
from trainwatch_notifier.silences import Matchers, Silence, first_match
from trainwatch_notifier.tables import silences, suppressions

log = logging.getLogger(__name__)

SQL_RETRY_SECONDS = 1.0
State = Literal["active", "expired", "all"]
_MATCHER_COLUMNS = ("cluster", "namespace", "kind", "job", "owner", "category")


def utc_now() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime) -> datetime:
    # SQLite hands DateTime(timezone=True) back without its zone; every stored time is UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _silence(row: Any) -> Silence:
    m = row._mapping
    return Silence(
        id=m["id"],
        matchers=Matchers.model_construct(
            **{name: m[name] for name in _MATCHER_COLUMNS}, labels=dict(m["labels"] or {})
        ),
        author=m["author"],
        created_by=m["created_by"],
        reason=m["reason"],
        created_at=_aware(m["created_at"]),
        ends_at=_aware(m["ends_at"]),
        expired_by=m["expired_by"],
    )


def _suppression(row: Any) -> dict[str, Any]:
    m = dict(row._mapping)
    m["suppressed_at"] = _aware(m["suppressed_at"])
    return m


def _insert(conn: AsyncConnection, table: sa.Table) -> Any:
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    if conn.dialect.name == "sqlite":
        return sqlite.insert(table)
    raise ValueError(f"unsupported dialect {conn.dialect.name!r}")


class SilenceStore:
    def __init__(self, engine: AsyncEngine, *, clock: Callable[[], datetime] = utc_now) -> None:
        self._engine = engine
        self.clock = clock

    async def create(
        self, matchers: Matchers, *, author: str, created_by: str, reason: str, ends_at: datetime
    ) -> Silence:
        silence = Silence(
            id=secrets.token_hex(8),
            matchers=matchers,
            author=author,
            created_by=created_by,
            reason=reason,
            created_at=self.clock(),
            ends_at=ends_at,
        )
        values = {name: getattr(matchers, name) for name in _MATCHER_COLUMNS}
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.insert(silences).values(
                    id=silence.id,
                    **values,
                    labels=matchers.labels,
                    author=author,
                    created_by=created_by,
                    reason=reason,
                    created_at=silence.created_at,
                    ends_at=ends_at,
                )
            )
        return silence

    async def get(self, silence_id: str) -> Silence | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(sa.select(silences).where(silences.c.id == silence_id))).first()
        return _silence(row) if row is not None else None

    async def list_silences(self, state: State = "all", *, limit: int = 200) -> list[Silence]:
        """Newest first; expired silences stay listed (as expired)."""
        query = sa.select(silences).order_by(silences.c.created_at.desc(), silences.c.id).limit(limit)
        now = self.clock()
        if state == "active":
            query = query.where(silences.c.ends_at > now, silences.c.created_at <= now)
        elif state == "expired":
            query = query.where(silences.c.ends_at <= now)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [_silence(row) for row in rows]

    async def expire(self, silence_id: str, *, by: str) -> Silence | None:
        """End a silence now. One already over is left as it was (expiring is idempotent)."""
        now = self.clock()
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.update(silences)
                .where(silences.c.id == silence_id, silences.c.ends_at > now)
                .values(ends_at=now, expired_by=by)
            )
            row = (await conn.execute(sa.select(silences).where(silences.c.id == silence_id))).first()
        return _silence(row) if row is not None else None

    async def suppress(self, event: JobStatusEvent, payload: bytes, channels: list[str]) -> str | None:
        """The id of the silence that holds this event back (its suppression now recorded), or None."""
        now = self.clock()
        async with self._engine.begin() as conn:
            earlier = (
                await conn.execute(
                    sa.select(suppressions.c.silence_id).where(suppressions.c.event_id == event.event_id)
                )
            ).first()
            if earlier is not None:  # a redelivered copy: suppressed before, so never sent now
                return str(earlier[0])
            rows = (
                await conn.execute(
                    sa.select(silences).where(silences.c.ends_at > now, silences.c.created_at <= now)
                )
            ).all()
            silence = first_match([_silence(row) for row in rows], event, now)
            if silence is None:
                return None
            job = event.job
            insert = _insert(conn, suppressions).on_conflict_do_nothing(index_elements=["event_id"])
            await conn.execute(
                insert.values(
                    event_id=event.event_id,
                    silence_id=silence.id,
                    cluster_id=job.cluster_id,
                    namespace=job.namespace,
                    kind=job.kind_key,
                    name=job.name,
                    uid=job.uid,
                    phase=event.phase.value,
                    channels=sorted(channels),
                    suppressed_at=now,
                    event=payload.decode("utf-8", "replace"),
                )
            )
            # Another replica may have recorded the same event meanwhile: report the row that stands.
            stored = (
                await conn.execute(
                    sa.select(suppressions.c.silence_id).where(suppressions.c.event_id == event.event_id)
                )
            ).scalar_one()
        return str(stored)

    async def suppress_until_sql_answers(
        self, event: JobStatusEvent, payload: bytes, channels: list[str]
    ) -> str | None:
        """Back-pressure, not loss: without SQL nobody can say whether the event is silenced (nor
        record that it was), so the event waits, unacked, as it does for Redis."""
        while True:
            try:
                return await self.suppress(event, payload, channels)
            except Exception as exc:
                if not database_unavailable(exc):
                    raise  # a bug, not an outage: retrying would hide it
                log.warning("silences unavailable, waiting", extra={"error": repr(exc)})
                await asyncio.sleep(SQL_RETRY_SECONDS)

    async def suppressions(
        self, *, silence_id: str | None = None, limit: int = 100, before: int | None = None
    ) -> list[dict[str, Any]]:
        """Newest first; ``before`` is the ``id`` of the last row of the previous page."""
        query = sa.select(
            *(c for c in suppressions.c if c.name != "event"),
        ).order_by(suppressions.c.id.desc())
        if silence_id is not None:
            query = query.where(suppressions.c.silence_id == silence_id)
        if before is not None:
            query = query.where(suppressions.c.id < before)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query.limit(limit))).all()
        return [_suppression(row) for row in rows]

    async def suppressed_event(self, event_id: str) -> str | None:
        """The event a suppression holds, as received (for a later look or a manual resend)."""
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(sa.select(suppressions.c.event).where(suppressions.c.event_id == event_id))
            ).first()
        return str(row[0]) if row is not None else None
