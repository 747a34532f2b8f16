"""The fleet-wide count of registered clusters that no watcher holds a lease on (issue 17).

Every replica reports the same fleet-wide value, read from Redis: the clusters the registry wants
watched (this replica's desired set, from the cluster feed) whose lease key is absent. Any replica
can answer, so the answer survives the loss of any of them; the alert takes ``max`` over the
replicas. A cluster between a handoff's release and the next owner's acquire counts for up to a
claim tick, so the alert waits minutes, not seconds. Until a replica knows the desired set it
reports nothing (the gauge is absent, not 0).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection

from prometheus_client import CollectorRegistry, Gauge
from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)


def unowned(desired: Collection[str], lease_values: list[object]) -> int:
    """How many of ``desired`` (in order) have no lease value (``lease_values`` from one MGET)."""
    return sum(1 for _, value in zip(desired, lease_values, strict=True) if value is None)


class UnownedClusters:
    """Reads every desired cluster's lease key (one MGET) each ``interval`` and sets the gauge."""

    def __init__(
        self,
        redis: Redis,
        *,
        desired: Callable[[], Collection[str] | None],
        lease_key: Callable[[str], str],
        interval: float,
        registry: CollectorRegistry,
    ) -> None:
        self._redis = redis
        self._desired = desired
        self._lease_key = lease_key
        self._interval = interval
        self._registry = registry
        self._gauge: Gauge | None = None  # created at the first answer: absent until known
        self._timeout = max(interval, 1.0)

    async def refresh(self) -> int | None:
        """One reading; None while the desired set is unknown or Redis does not answer."""
        desired = self._desired()
        if desired is None:
            return None
        ordered = sorted(desired)
        try:
            async with asyncio.timeout(self._timeout):
                values = await self._redis.mget([self._lease_key(c) for c in ordered]) if ordered else []
        except (RedisError, OSError, TimeoutError) as exc:
            log.debug("unowned clusters not read", extra={"error": repr(exc)})
            return None
        count = unowned(ordered, list(values))
        if self._gauge is None:
            self._gauge = Gauge(
                "trainwatch_watcher_clusters_unowned",
                "Fleet-wide: registered clusters no watcher replica holds a lease on (each replica "
                "reports the same value; take max)",
                registry=self._registry,
            )
        self._gauge.set(count)
        return count

    async def run(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self._interval)
