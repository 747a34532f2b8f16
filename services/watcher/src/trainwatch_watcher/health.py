"""Cluster health on ``clusters.v1.health.<cluster_id>`` (stream CLUSTER_HEALTH), best effort.

Health is advisory: a failed publish is logged and dropped (the next report supersedes it),
and it never blocks the cluster's informers.
"""

from __future__ import annotations

import itertools
import logging

from nats.aio.client import Client as NatsClient

from trainwatch_common.events.clusters import ClusterHealth
from trainwatch_common.events.envelope import wrap_cluster_health
from trainwatch_common.subjects import cluster_health_subject
from trainwatch_watcher.publishing import reraise_cancellation

log = logging.getLogger(__name__)

_counter = itertools.count()


class HealthPublisher:
    def __init__(self, nc: NatsClient, *, timeout: float = 2.0) -> None:
        self._js = nc.jetstream()
        self._timeout = timeout
        self.last: dict[str, ClusterHealth] = {}

    async def publish(self, health: ClusterHealth) -> None:
        self.last[health.cluster_id] = health
        stamp = f"{health.observed_at.timestamp():.6f}"
        event_id = f"health.{health.cluster_id}.{health.owner or '-'}.{stamp}.{next(_counter)}"
        payload = wrap_cluster_health(health, event_id=event_id).to_json()
        try:
            await self._js.publish(cluster_health_subject(health.cluster_id), payload, timeout=self._timeout)
            reraise_cancellation(None)
        except (TimeoutError, Exception) as exc:  # advisory: the next report replaces it
            log.info("health not published", extra={"cluster": health.cluster_id, "error": repr(exc)})

    def forget(self, cluster_id: str) -> None:
        self.last.pop(cluster_id, None)
