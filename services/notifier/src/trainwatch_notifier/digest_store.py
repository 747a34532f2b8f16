"""The jobs each digest sent, in SQL: its "open" link shows exactly those jobs on the dashboard.

A digest says "37 job updates in 15s" and lists the first few; the link used to open the whole
dashboard, where the reader had to find the 37 among everything else. Now each digest is recorded
(a random id, its channel, title and jobs in order) just before it is sent, and its link is
``<dashboard>/digests/<id>``. Recording is best effort: with SQL away the digest goes out at once
with the dashboard's own link, never later and never lost. Digests are kept ``KEEP_DAYS``.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_common import JobStatusEvent
from trainwatch_notifier.tables import digest_jobs, digests

KEEP_DAYS = 30
RECORD_TIMEOUT_SECONDS = 2.0  # a digest waits no longer for its link


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class DigestStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def record(self, channel: str, title: str, events: Sequence[JobStatusEvent]) -> str:
        """Store a digest's jobs; returns its new id. Raises whatever SQL raises (the caller
        falls back to the dashboard's link), or TimeoutError after ``RECORD_TIMEOUT_SECONDS``."""
        digest_id = secrets.token_hex(16)
        now = datetime.now(UTC)
        rows = [
            {
                "digest_id": digest_id,
                "position": position,
                "event_id": event.event_id,
                "cluster_id": event.job.cluster_id,
                "namespace": event.job.namespace,
                "kind": event.job.kind,
                "name": event.job.name,
                "uid": event.job.uid,
                "phase": event.phase.value,
                "terminal": event.terminal,
                "reason": event.reason,
                "observed_at": event.observed_at,
            }
            for position, event in enumerate(events)
        ]
        async with asyncio.timeout(RECORD_TIMEOUT_SECONDS), self._engine.begin() as connection:
            await connection.execute(
                digests.insert().values(id=digest_id, channel=channel, title=title[:2000], created_at=now)
            )
            if rows:
                await connection.execute(digest_jobs.insert(), rows)
            await self._prune(connection, now - timedelta(days=KEEP_DAYS))
        return digest_id

    @staticmethod
    async def _prune(connection: Any, before: datetime) -> None:
        old = sa.select(digests.c.id).where(digests.c.created_at < before).limit(100)
        ids = [row[0] for row in await connection.execute(old)]
        if ids:
            await connection.execute(digest_jobs.delete().where(digest_jobs.c.digest_id.in_(ids)))
            await connection.execute(digests.delete().where(digests.c.id.in_(ids)))

    async def get(self, digest_id: str) -> dict[str, Any] | None:
        async with self._engine.connect() as connection:
            digest = (await connection.execute(digests.select().where(digests.c.id == digest_id))).first()
            if digest is None:
                return None
            jobs = await connection.execute(
                digest_jobs.select()
                .where(digest_jobs.c.digest_id == digest_id)
                .order_by(digest_jobs.c.position)
            )
            items = [
                {
                    **{k: v for k, v in row._mapping.items() if k not in ("digest_id", "observed_at")},
                    "observed_at": _aware(row._mapping["observed_at"]).isoformat(),
                }
                for row in jobs
            ]
        m = digest._mapping
        return {
            "id": m["id"],
            "channel": m["channel"],
            "title": m["title"],
            "created_at": _aware(m["created_at"]).isoformat(),
            "items": items,
        }
