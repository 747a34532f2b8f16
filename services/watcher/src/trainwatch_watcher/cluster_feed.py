"""The desired cluster set: the registry's KV snapshot, then ``clusters.v1.*`` events.

Event-driven: each added / updated / removed event reaches ``apply`` at once. The subscription
is made *before* the snapshot is read, so nothing published in between is missed; revisions
decide between a snapshot entry and an event (a cluster's revision only grows). The snapshot
is re-read every ``resync_interval`` as a safety net.

Removing a cluster stops it and forgets its checkpoints, so only two things mean "removed": a
removed event, or a bucket that was read in full without it (an empty bucket, which nats-py
reports as ``NoKeysError``, included). A read that fails or is cut short (a timeout, a
server error, a lost connection) proves nothing: it is counted, logged and retried with
back-off, and the previous set stays in force meanwhile.

``FolderClusterFeed`` is the single-replica alternative with no registry: one cluster per
kubeconfig file in a folder, rescanned periodically.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Collection
from typing import Protocol

from nats.aio.client import Client as NatsClient
from nats.js.api import DeliverPolicy
from nats.js.errors import KeyNotFoundError, NoKeysError
from prometheus_client import Counter
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

    def replace_from_snapshot(self, snapshot: dict[str, ClusterSpec], *, keep: Collection[str] = ()) -> bool:
        """The set read in full from the bucket; ``keep``: present but unreadable, left as it was."""
        changed = False
        for cluster_id in [c for c in self.desired if c not in snapshot and c not in keep]:
            changed |= self.desired.pop(cluster_id, None) is not None
        for spec in snapshot.values():
            changed |= self.put(spec)
        return changed


class SnapshotReadFailed(Exception):
    """The bucket could not be read in full: the desired set is unknown, not empty."""


class NatsClusterFeed:
    def __init__(
        self, nc: NatsClient, *, resync_interval: float = 300.0, read_failures: Counter | None = None
    ) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self._resync_interval = resync_interval
        # Retries of a failed read: soon at first, never rarer than the safety resync itself.
        self._retry_initial = min(1.0, resync_interval)
        self._retry_max = resync_interval
        self.read_failures = 0  # snapshot reads that failed and were retried (tests, diagnostics)
        self._read_failures_metric = read_failures

    async def _snapshot(self) -> tuple[dict[str, ClusterSpec], set[str]]:
        """Every readable cluster in the bucket and the keys that held something unreadable, or
        ``SnapshotReadFailed``: never a set with clusters silently missing."""
        try:
            kv = await ensure_clusters_bucket(self._js)
            try:
                keys = await kv.keys()
            except NoKeysError:  # read in full, and empty: every cluster was removed
                return {}, set()
            specs: dict[str, ClusterSpec] = {}
            unreadable: set[str] = set()
            for key in keys:
                try:
                    entry = await kv.get(key)
                except KeyNotFoundError:
                    continue  # deleted (or purged) between keys() and get(): removed
                if not entry.value:
                    continue  # a delete marker: removed
                try:
                    spec = ClusterSpec.model_validate_json(entry.value)
                except ValidationError:
                    log.warning(
                        "malformed cluster in the KV bucket; its previous state kept", extra={"key": key}
                    )
                    unreadable.add(key)  # the registry keys the bucket by cluster id
                    continue
                specs[spec.id] = spec
            return specs, unreadable
        except Exception as exc:  # NATS errors, timeouts, a closed connection: nothing proven
            raise SnapshotReadFailed(repr(exc)) from exc

    async def _read_into(self, state: DesiredClusters, *, failures: int) -> bool | None:
        """Read the bucket into ``state``: whether that changed the set, or None if the read failed
        (counted and logged; ``state`` untouched)."""
        try:
            snapshot, unreadable = await self._snapshot()
        except SnapshotReadFailed as exc:
            self.read_failures += 1
            if self._read_failures_metric is not None:
                self._read_failures_metric.inc()
            log.warning(
                "cluster set not read; keeping the previous one and retrying",
                extra={
                    "error": str(exc),
                    "consecutive_failures": failures + 1,
                    "clusters": len(state.desired),
                },
            )
            return None
        if failures:
            log.info("cluster set read again", extra={"after_failures": failures})
        return state.replace_from_snapshot(snapshot, keep=unreadable)

    def _retry_delay(self, failures: int) -> float:
        delay = min(self._retry_max, self._retry_initial * 2.0 ** (failures - 1))
        return delay * (0.8 + 0.4 * random.random())  # jitter: replicas do not retry in lockstep

    async def run(self, apply: Apply) -> None:
        state = DesiredClusters()
        subscription = await self._js.subscribe(
            f"{CLUSTERS_PREFIX}.*.*",
            stream=CLUSTERS_STREAM.name,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.NEW,
        )
        try:
            # The first set is applied only once the bucket was read; events wait in the subscription.
            failures = 0
            while await self._read_into(state, failures=failures) is None:
                failures += 1
                await asyncio.sleep(self._retry_delay(failures))
            await apply(dict(state.desired))
            failures = 0
            loop = asyncio.get_running_loop()
            resync_at = loop.time() + self._resync_interval
            while True:
                try:
                    message = await subscription.next_msg(timeout=max(0.001, resync_at - loop.time()))
                except TimeoutError:  # nats-py raises asyncio.TimeoutError or its subclass
                    changed = await self._read_into(state, failures=failures)
                    failures = failures + 1 if changed is None else 0
                    if changed:
                        await apply(dict(state.desired))
                    wait = self._retry_delay(failures) if failures else self._resync_interval
                    resync_at = loop.time() + wait
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
