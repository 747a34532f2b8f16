"""The jobs-by-phase gauge (``trainwatch_persister_jobs{cluster, kind, phase}``), read from SQL.

The current-state table is the truth of what every cluster's jobs are doing, so the gauge is a
``GROUP BY`` over it on a timer rather than a count kept in memory (which a restart, a replica
or a redelivery would make wrong). A label set that no longer has jobs drops to absent.
"""

from __future__ import annotations

import asyncio
import logging

import sqlalchemy as sa
from nats.js import JetStreamContext
from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_common.streams import PERSISTER_CONSUMER
from trainwatch_persister import metrics
from trainwatch_persister.tables import jobs

log = logging.getLogger(__name__)

Labels = tuple[str, str, str]


async def count_jobs(engine: AsyncEngine) -> dict[Labels, int]:
    query = (
        sa.select(jobs.c.cluster_id, jobs.c.kind_key, jobs.c.phase, sa.func.count())
        .where(jobs.c.deleted_at.is_(None))
        .group_by(jobs.c.cluster_id, jobs.c.kind_key, jobs.c.phase)
    )
    async with engine.connect() as conn:
        return {(row[0], row[1], row[2]): int(row[3]) for row in await conn.execute(query)}


class JobGauge:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._exported: set[Labels] = set()

    async def refresh(self) -> None:
        counts = await count_jobs(self._engine)
        for labels in self._exported - counts.keys():
            metrics.JOBS_BY_PHASE.remove(*labels)
        for labels, count in counts.items():
            metrics.JOBS_BY_PHASE.labels(*labels).set(count)
        self._exported = set(counts)

    async def run(self, interval: float) -> None:
        """Refresh now and every ``interval`` seconds until cancelled; a failed read keeps the last values."""
        while True:
            try:
                await self.refresh()
            except Exception as exc:  # task boundary: the database may be away; the next run catches up
                log.warning("jobs gauge not refreshed", extra={"error": repr(exc)[:300]})
            await asyncio.sleep(interval)


async def report_consumer_pending(js: JetStreamContext, interval: float) -> None:
    """``trainwatch_persister_consumer_pending`` from the durable consumer's info, every ``interval``."""
    durable = PERSISTER_CONSUMER.config.durable_name or "persister"
    while True:
        try:
            info = await js.consumer_info(PERSISTER_CONSUMER.stream, durable)
            metrics.CONSUMER_PENDING.set(info.num_pending + info.num_ack_pending)
        except Exception as exc:  # task boundary: NATS may be away; the next run catches up
            log.debug("consumer pending not read", extra={"error": repr(exc)[:300]})
        await asyncio.sleep(interval)
