"""The evidence watches of one cluster: pods of the watched training kinds, Warning events, and
Kueue Workloads and PodGroups where discovery shows their group (a cluster without Kueue or
Volcano pays nothing for them). Each is one cluster-wide list+watch (``kube.watching``) feeding
the cluster's ``EvidenceCache``; see the watcher README, "Diagnosis evidence".

A source the credentials may not read (403) keeps retrying with backoff and is reported in the
cluster's health ("diagnosis unavailable: forbidden to list pods"); job watching never waits on it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from trainwatch_common.kinds import JobKind
from trainwatch_watcher import errors, long_lived
from trainwatch_watcher.diagnosis import KIND_POD_SELECTORS
from trainwatch_watcher.discovery import served_kinds
from trainwatch_watcher.evidence_cache import EvidenceCache, ObjectKey
from trainwatch_watcher.kube.client import KubeClient
from trainwatch_watcher.kube.watching import Progress, Synced, Watcher, WatchHooks, WatchTarget
from trainwatch_watcher.log_tails import LogTails
from trainwatch_watcher.settings import WatchTimings
from trainwatch_watcher.taskmap import TaskMap

log = logging.getLogger(__name__)

POD = JobKind("pod", "", "v1", "Pod", "pods")
EVENT = JobKind("event", "", "v1", "Event", "events")
WORKLOAD = JobKind("workload", "kueue.x-k8s.io", "v1beta1", "Workload", "workloads")
VOLCANO_PODGROUP = JobKind("podgroup-volcano", "scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups")
COSCHEDULING_PODGROUP = JobKind(
    "podgroup-coscheduling", "scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups"
)
# The CRD-served evidence kinds, found by discovery like the job kinds.
OPTIONAL_KINDS = (WORKLOAD, VOLCANO_PODGROUP, COSCHEDULING_PODGROUP)

# Seconds before Kueue's visibility API is asked again after it did not answer.
VISIBILITY_RETRY = 60.0
# Seconds a change of Workloads waits before the pending queues' positions are asked again, so
# that a burst of admissions costs one round of visibility calls, not one per Workload.
POSITIONS_SETTLE = 0.5
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta1"

# Job kind key -> the pod selector families (KIND_POD_SELECTORS) its pods are found by.
POD_FAMILIES: dict[str, tuple[str, ...]] = {
    "job": ("job",),
    "pytorchjob": ("kubeflow",),
    "tfjob": ("kubeflow",),
    "mpijob": ("kubeflow",),
    "xgboostjob": ("kubeflow",),
    "paddlejob": ("kubeflow",),
    "jaxjob": ("kubeflow",),
    "jobset": ("jobset",),
    "trainjob": ("jobset",),
    "volcanojob": ("volcanojob",),
    "rayjob": ("raycluster", "raysubmitter"),
}


@dataclass(frozen=True, slots=True)
class Source:
    """One evidence watch."""

    # pod | event | workload | podgroup; logs (the log tail fetcher) and positions (Kueue queue
    # positions, asked again when Workloads move) are not watches.
    what: str
    kind: JobKind
    label_selector: str | None = None
    field_selector: str | None = None

    @property
    def resource(self) -> str:
        """As an RBAC rule names it, for health messages."""
        group = f".{self.kind.group}" if self.kind.group else ""
        return f"{self.kind.plural}{group}"


def evidence_sources(
    job_kinds: Iterable[str], optional: Iterable[str], *, log_tails: bool = False
) -> dict[str, Source]:
    """The watches the watched job kinds and the served evidence CRDs ask for (and the log tail
    fetcher, when enabled)."""
    sources: dict[str, Source] = {}
    for family in sorted({f for key in job_kinds for f in POD_FAMILIES.get(key, ())}):
        sources[f"pods/{family}"] = Source("pod", POD, label_selector=KIND_POD_SELECTORS[family])
    if sources:
        sources["events"] = Source("event", EVENT, field_selector="type=Warning")
        served = set(optional)
        if WORKLOAD.key in served:
            sources["workloads"] = Source("workload", WORKLOAD)
            sources["positions"] = Source("positions", WORKLOAD)
        for kind in (VOLCANO_PODGROUP, COSCHEDULING_PODGROUP):
            if kind.key in served:
                sources[kind.key] = Source("podgroup", kind)
        if log_tails:
            sources["logs"] = Source("logs", POD)
    return sources


async def served_evidence_kinds(client: KubeClient) -> set[str]:
    return set(await served_kinds(client, OPTIONAL_KINDS))


class _SourceStatus:
    """Whether a source has listed, and its last error (cleared once it is connected again)."""

    def __init__(self) -> None:
        self.synced = False
        self.error: errors.WatcherError | None = None


class EvidenceFeed:
    """The evidence watches of one cluster, reconciled like its informers."""

    def __init__(
        self,
        client: KubeClient,
        timings: WatchTimings,
        cluster_id: str,
        *,
        log_tails: bool = False,
        log_timeout: float = 5.0,
        log_concurrency: int = 4,
    ) -> None:
        self.cache = EvidenceCache()
        self.logs = (
            LogTails(client, touched=self.cache.touch_pod, timeout=log_timeout, concurrency=log_concurrency)
            if log_tails
            else None
        )
        self._client = client
        self._timings = timings
        self._cluster_id = cluster_id
        self._status: dict[str, _SourceStatus] = {}
        self._tasks: TaskMap[str, Source] = TaskMap(self._run, lambda key: f"evidence {cluster_id}/{key}")
        self._changed = asyncio.Event()
        self._visibility_off_until = 0.0
        self._workloads_moved = asyncio.Event()

    async def reconcile(self, sources: dict[str, Source]) -> None:
        for key in list(self._status):
            if key not in sources:
                del self._status[key]
        for key in sources:
            self._status.setdefault(key, _SourceStatus())
        await self._tasks.reconcile(sources)
        self._changed.set()

    async def stop(self) -> None:
        await self._tasks.stop_all()

    def ready(self) -> bool:
        """Every source has listed or failed at least once: what diagnosis can read is there."""
        return all(
            s.synced or s.error is not None
            for key, s in self._status.items()
            if key not in ("logs", "positions")  # fetch on demand: nothing to list
        )

    async def wait_ready(self, timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout):
                while not self.ready():
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            log.warning(
                "evidence not listed in time; diagnosing with what there is",
                extra={"cluster": self._cluster_id},
            )

    def problems(self) -> list[str]:
        """Why diagnosis is unavailable or partial, per source: "forbidden to list pods"."""
        out: list[str] = []
        for key, status in sorted(self._status.items()):
            error = status.error
            if error is None:
                continue
            spec = self._tasks.spec(key)
            resource = spec.resource if spec is not None else key
            if isinstance(error, errors.Unauthorized) and error.status == 403:
                problem = f"forbidden to list {resource}"
            else:
                problem = f"cannot watch {resource}: {str(error)[:120]}"
            if problem not in out:
                out.append(problem)
        if self.logs is not None and self.logs.forbidden:
            out.append("forbidden to get pods/log")
        return out

    async def _run(self, key: str, source: Source) -> None:
        if source.what == "logs":
            if self.logs is not None:
                await self.logs.run()
            return
        if source.what == "positions":
            await self._refresh_positions()
            return
        status = self._status.setdefault(key, _SourceStatus())
        hooks = _Hooks(status, self._changed)
        watcher = Watcher(
            client=self._client,
            target=WatchTarget(source.kind, None, source.label_selector, source.field_selector),
            timings=self._timings,
            hooks=hooks,
            collect_uids=False,  # the cache forgets what a relist did not list by name (``listed``)
        )
        listed: set[ObjectKey] = set()
        cache = self.cache
        async for item in watcher.run_forever():
            if isinstance(item, Progress):
                continue
            if isinstance(item, Synced):
                cache.forget_source(key, listed)
                listed = set()
                status.synced = True
                self._changed.set()
                if source.what == "pod":
                    long_lived.FREEZER.request()
                continue
            obj = item.get("object")
            event_type = item.get("type")
            if not isinstance(obj, dict) or event_type not in ("ADDED", "MODIFIED", "DELETED"):
                continue
            if watcher.listing:
                metadata = obj.get("metadata")
                if isinstance(metadata, dict):
                    listed.add((str(metadata.get("namespace")), str(metadata.get("name"))))
            pending = None
            if source.what == "workload" and event_type != "DELETED":
                pending = await self._queue_position(obj)
            cache.apply(source.what, key, str(event_type), obj, pending)
            if source.what == "workload" and not watcher.listing:
                self._workloads_moved.set()  # the others' positions may have moved with it

    async def _refresh_positions(self) -> None:
        """After Workloads changed (admitted, finished, created, deleted): ask the visibility API
        again for every LocalQueue with a pending Workload, and put the positions that moved."""
        while True:
            await self._workloads_moved.wait()
            await asyncio.sleep(POSITIONS_SETTLE)
            self._workloads_moved.clear()
            for namespace, queue in sorted(self.cache.pending_queues()):
                items = await self._pending_workloads(namespace, queue)
                if items is None:
                    break  # not answering: asked again after VISIBILITY_RETRY, on the next change
                for item in items:
                    name = (item.get("metadata") or {}).get("name")
                    if isinstance(name, str):
                        self.cache.set_queue_positions(namespace, name, item)

    async def _queue_position(self, workload: dict[str, Any]) -> dict[str, Any] | None:
        """A pending Workload's item of Kueue's visibility API (its positions), when it answers.

        Asked when the Workload changes; when others change, ``_refresh_positions`` asks again.
        A server without the API (404) or credentials without it (403) are not asked again for
        ``VISIBILITY_RETRY`` seconds."""
        if time.monotonic() < self._visibility_off_until:
            return None
        metadata, spec = workload.get("metadata") or {}, workload.get("spec") or {}
        conditions = (workload.get("status") or {}).get("conditions") or []
        if any(
            isinstance(c, dict)
            and c.get("type") in ("QuotaReserved", "Finished")
            and c.get("status") == "True"
            for c in conditions
        ):
            return None
        namespace, name, queue = metadata.get("namespace"), metadata.get("name"), spec.get("queueName")
        if not (isinstance(namespace, str) and isinstance(name, str) and isinstance(queue, str) and queue):
            return None
        items = await self._pending_workloads(namespace, queue)
        for item in items or ():
            if (item.get("metadata") or {}).get("name") == name:
                return item
        return None

    async def _pending_workloads(self, namespace: str, queue: str) -> list[dict[str, Any]] | None:
        """The visibility API's pending Workloads of one LocalQueue; None when it does not answer
        (and then it is not asked for ``VISIBILITY_RETRY`` seconds)."""
        if time.monotonic() < self._visibility_off_until:
            return None
        path = f"{VISIBILITY}/namespaces/{namespace}/localqueues/{queue}/pendingworkloads"
        try:
            async with asyncio.timeout(self._timings.connect_timeout):
                answer = await self._client.get_json(path, {"limit": "1000"})
        except (errors.WatcherError, TimeoutError) as exc:
            self._visibility_off_until = time.monotonic() + VISIBILITY_RETRY
            log.info(
                "Kueue visibility API not answering",
                extra={"cluster": self._cluster_id, "error": str(exc)[:200]},
            )
            return None
        items = answer.get("items")
        return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


class _Hooks(WatchHooks):
    def __init__(self, status: _SourceStatus, changed: asyncio.Event) -> None:
        self._status = status
        self._changed = changed

    def on_reconnect(self, error: BaseException) -> None:
        self._status.error = error if isinstance(error, errors.WatcherError) else None
        self._changed.set()

    def on_connected(self) -> None:
        self._status.error = None
