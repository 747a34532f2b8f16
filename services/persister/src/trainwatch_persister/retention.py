"""Retention: history older than TRAINWATCH_RETENTION_DAYS is pruned on a timer.

What goes: transitions observed before the cutoff, and jobs deleted from their cluster before
it (a live job's current-state row is kept however old). Keep the retention longer than the
JOBS stream's max age (7 days): an event redelivered after its history was pruned would
otherwise come back as a lone history row.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_persister import metrics, repository

log = logging.getLogger(__name__)


def cutoff_for(retention_days: float, *, now: datetime) -> datetime | None:
    """The oldest time kept, or None when retention is off (0 days)."""
    if retention_days <= 0:
        return None
    return now - timedelta(days=retention_days)


async def prune_once(engine: AsyncEngine, *, retention_days: float, now: datetime | None = None) -> None:
    cutoff = cutoff_for(retention_days, now=now or datetime.now(UTC))
    if cutoff is None:
        return
    result = await repository.prune(engine, cutoff=cutoff)
    metrics.PRUNED.labels(table="job_transitions").inc(result.transitions)
    metrics.PRUNED.labels(table="jobs").inc(result.jobs)
    if result.transitions or result.jobs:
        log.info(
            "pruned old history",
            extra={"cutoff": cutoff.isoformat(), "transitions": result.transitions, "jobs": result.jobs},
        )


async def prune_forever(engine: AsyncEngine, *, retention_days: float, interval: float) -> None:
    """Prune now and then every ``interval`` seconds until cancelled; a failed run waits for the next."""
    while True:
        try:
            await prune_once(engine, retention_days=retention_days)
        except Exception as exc:  # task boundary: the database may be down; the next run catches up
            log.warning("pruning failed; will retry at the next interval", extra={"error": repr(exc)})
        await asyncio.sleep(interval)
