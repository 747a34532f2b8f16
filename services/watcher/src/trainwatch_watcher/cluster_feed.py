"""The desired cluster set: the registry's KV snapshot, then ``clusters.v1.*`` events.

Event-driven: each added / updated / removed event reaches ``apply`` at once. The subscription
is made *before* the snapshot is read, so nothing published in between is missed; revisions
decide between a snapshot entry and an event (a cluster's revision only grows). The snapshot
is re-read every ``resync_interval`` as a safety net.

``FolderClusterFeed`` is the single-replica alternative with no registry: one cluster per
kubeconfig file in a folder, rescanned periodically.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from nats.aio.client import Client as NatsClient
from nats.js.api import DeliverPolicy
from pydantic import ValidationError

from trainwatch_common.events.clusters import ClusterSpec
from trainwatch_common.events.envelope import parse_cluster_event
from trainwatch_common.events.ids import fingerprint
from trainwatch_common.streams import CLUSTERS_STREAM, ensure_clusters_bucket
from trainwatch_common.subjects import CLUSTERS_PREFIX
from trainwatch_watcher.connections import KubeconfigFolder

log = logging.getLogger(__name__)

Apply = Callable[[dict[str, ClusterSpec]], Awaitable[None]]


class ClusterFeed(Protocol):
    async def run(self, apply: Apply) -> None:
        """Call ``apply`` with the whole desired set at start and after every change; runs forever."""
        ...


class DesiredClusters:
    """Pure bookkeeping of the desired set by revision."""

    def __init__(self) -> None:
        self.desired: dict[str, ClusterSpec] = {}
        self._revisions: dict[str, int] = {}  # kept after removal, so a late "added" cannot resurrect

    def put(self, spec: ClusterSpec) -> bool:
        if spec.revision < self._revisions.get(spec.id, 0):
            return False
        changed = self.desired.get(spec.id) != spec
        self.desired[spec.id] = spec
        self._revisions[spec.id] = spec.revision
        return changed

    def remove(self, cluster_id: str, revision: int) -> bool:
        if revision < self._revisions.get(cluster_id, 0):
            return False
        self._revisions[cluster_id] = revision
        return self.desired.pop(cluster_id, None) is not None

    def replace_from_snapshot(self, snapshot: dict[str, ClusterSpec]) -> bool:
        changed = False
        for cluster_id in [c for c in self.desired if c not in snapshot]:
            changed |= self.desired.pop(cluster_id, None) is not None
        for spec in snapshot.values():
            changed |= self.put(spec)
        return changed


class NatsClusterFeed:
    def __init__(self, nc: NatsClient, *, resync_interval: float = 300.0) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self._resync_interval = resync_interval

    async def _snapshot(self) -> dict[str, ClusterSpec]:
        kv = await ensure_clusters_bucket(self._js)
        try:
            keys = await kv.keys()
        except Exception:  # nats-py raises NoKeysError on an empty bucket
            return {}
        specs: dict[str, ClusterSpec] = {}
        for key in keys:
            try:
                entry = await kv.get(key)
            except Exception:
                continue  # deleted between keys() and get()
            if entry.value:
                try:
                    spec = ClusterSpec.model_validate_json(entry.value)
                except ValidationError:
                    log.warning("malformed cluster in the KV bucket skipped", extra={"key": key})
                    continue
                specs[spec.id] = spec
        return specs

    async def run(self, apply: Apply) -> None:
        state = DesiredClusters()
        subscription = await self._js.subscribe(
            f"{CLUSTERS_PREFIX}.*.*",
            stream=CLUSTERS_STREAM.name,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.NEW,
        )
        try:
            state.replace_from_snapshot(await self._snapshot())
            await apply(dict(state.desired))
            while True:
                try:
                    message = await subscription.next_msg(timeout=self._resync_interval)
                except TimeoutError:  # nats-py raises asyncio.TimeoutError or its subclass
                    if state.replace_from_snapshot(await self._snapshot()):
                        await apply(dict(state.desired))
                    continue
                try:
                    event = parse_cluster_event(message.data)
                except (ValidationError, ValueError):
                    log.warning("malformed cluster event skipped", extra={"subject": message.subject})
                    continue
                if event.type == "removed":
                    changed = state.remove(event.cluster.id, event.cluster.revision)
                else:
                    changed = state.put(event.cluster)
                log.info(
                    "cluster event",
                    extra={
                        "type": event.type,
                        "cluster": event.cluster.id,
                        "revision": event.cluster.revision,
                        "applied": changed,
                    },
                )
                if changed:
                    await apply(dict(state.desired))
        finally:
            await subscription.unsubscribe()


class FolderClusterFeed:
    """One cluster per kubeconfig file; a changed file is a changed connection fingerprint."""

    def __init__(self, folder: KubeconfigFolder, *, rescan_interval: float = 10.0) -> None:
        self._folder = folder
        self._rescan_interval = rescan_interval

    def snapshot(self) -> dict[str, ClusterSpec]:
        specs = {}
        for cluster_id in self._folder.cluster_ids():
            path = self._folder.path_for(cluster_id)
            if path is None:
                continue
            try:
                specs[cluster_id] = ClusterSpec(
                    id=cluster_id,
                    name=cluster_id,
                    revision=1,
                    connection_fingerprint=fingerprint(path.read_bytes()),
                )
            except (ValidationError, OSError):
                log.warning("kubeconfig file skipped", extra={"file": path.name})
        return specs

    async def run(self, apply: Apply) -> None:
        import asyncio

        last: dict[str, ClusterSpec] | None = None
        while True:
            current = self.snapshot()
            if current != last:
                await apply(current)
                last = current
            await asyncio.sleep(self._rescan_interval)
