"""The clusters this replica watches: one ``ClusterWorker`` task per cluster.

``start_cluster`` and ``stop_cluster`` are the clean operations the lease layer calls; both
are idempotent. Stopping happens before starting (see ``taskmap``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from trainwatch_common.events.clusters import ClusterSpec
from trainwatch_watcher.cluster_worker import ClusterWorker
from trainwatch_watcher.taskmap import TaskMap

log = logging.getLogger(__name__)

WorkerFactory = Callable[[ClusterSpec, int], ClusterWorker]


class ClusterSupervisor:
    """The clusters this replica watches. Every operation is idempotent."""

    def __init__(
        self, make_worker: WorkerFactory, *, forget_state: Callable[[str], Coroutine[Any, Any, Any]]
    ) -> None:
        self._make_worker = make_worker
        self._forget_state = forget_state
        self.workers: dict[str, ClusterWorker] = {}
        self._tasks: TaskMap[str, tuple[str, int]] = TaskMap(self._run_worker, lambda cid: f"cluster {cid}")

    async def _run_worker(self, cluster_id: str, _: tuple[str, int]) -> None:
        await self.workers[cluster_id].run()

    def cluster_ids(self) -> set[str]:
        return set(self.workers)

    async def start_cluster(self, spec: ClusterSpec, *, epoch: int = 0) -> None:
        """Watch a cluster. A running cluster whose connection fingerprint (or epoch) changed is
        rebuilt with the new credentials; any other change (watch options, metadata) is applied
        to the running worker, which restarts only the informers it affects."""
        worker = self.workers.get(spec.id)
        identity = (spec.connection_fingerprint, epoch)
        if worker is not None and self._tasks.spec(spec.id) == identity:
            worker.update(spec)
            return
        if worker is not None:
            log.info("rebuilding cluster", extra={"cluster": spec.id})
            await self.stop_cluster(spec.id)
        self.workers[spec.id] = self._make_worker(spec, epoch)
        self._tasks.start(spec.id, identity)

    async def drain_cluster(self, cluster_id: str, *, timeout: float) -> bool:
        """Let a cluster's informers finish what they handed to JetStream (acknowledged and
        checkpointed) without reading more, for at most ``timeout`` seconds; ``stop_cluster``
        follows. False if it did not finish in time (the next owner then re-emits the unconfirmed
        tail with the same ids, which JetStream drops)."""
        worker = self.workers.get(cluster_id)
        if worker is None or timeout <= 0:
            return False
        try:
            async with asyncio.timeout(timeout):
                await worker.drain()
        except TimeoutError:
            log.warning("cluster not drained in time", extra={"cluster": cluster_id, "timeout": timeout})
            return False
        return True

    async def stop_cluster(self, cluster_id: str, *, forget_state: bool = False) -> None:
        """Stop watching a cluster; with ``forget_state`` (it left the registry) drop its checkpoints."""
        await self._tasks.stop(cluster_id)
        worker = self.workers.pop(cluster_id, None)
        if worker is not None:
            worker.stopped()
        if forget_state:
            await self._forget_state(cluster_id)

    async def reconcile(self, desired: Mapping[str, ClusterSpec], *, epoch: int = 0) -> None:
        """Make the watched set equal ``desired``; clusters no longer desired are forgotten."""
        for cluster_id in [c for c in self.workers if c not in desired]:
            await self.stop_cluster(cluster_id, forget_state=True)
        for spec in desired.values():
            await self.start_cluster(spec, epoch=epoch)

    async def stop_all(self) -> None:
        for cluster_id in list(self.workers):
            await self.stop_cluster(cluster_id)
