"""One cluster's diagnosis evidence, trimmed and indexed by the job it belongs to (pure: no I/O).

The evidence watches (``evidence_feed``) put trimmed pods, Warning events, Kueue Workloads and
PodGroups here; the job informers ask for one job's evidence (``JobLinks``) and are told which
jobs' evidence changed through *keys*:

- ``<ns>/<label>=<value>`` for each identity label a pod carries (the labels of reference
  diagnosis.md §1.1 that name a job: Kubeflow ``job-name``, ``jobset-name``, Volcano
  ``job-name``, ``ray.io/cluster``, a batch Job's ``controller-uid`` and ``job-name``);
- ``<ns>/obj=<name>`` for the object an event is about, ``<ns>/child=<prefix>`` for an event about
  a child batch Job (``<jobset>-<replicatedJob>-<i>``, ``<mpijob>-launcher``);
- ``uid=<uid>`` for a Workload's or PodGroup's owner, and an event's involved object.

A job's links name the same keys (``JobLinks.keys``), so an informer keeps key -> uids and
recomputes exactly the jobs whose evidence moved.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainwatch_watcher.diagnosis import (
    KueueWorkload,
    PodEvidence,
    PodGroupEvidence,
    WarningEvent,
    pod_selector,
    trim_event,
    trim_pod,
    trim_podgroup,
    trim_workload,
)
from trainwatch_watcher.diagnosis.selectors import (
    JOB_CONTROLLER_UID,
    JOB_NAME,
    JOBSET_NAME,
    KF_JOB_NAME,
    KF_OPERATOR,
    LEGACY_CONTROLLER_UID,
    RAY_CLUSTER,
    RAY_ORIGIN_CRD,
    VOLCANO_JOB_NAME,
)

# Labels that name the job a pod belongs to (one of them starts every selector of pod_selector).
IDENTITY_LABELS = (
    JOB_CONTROLLER_UID,
    LEGACY_CONTROLLER_UID,
    KF_JOB_NAME,
    JOBSET_NAME,
    VOLCANO_JOB_NAME,
    RAY_CLUSTER,
    JOB_NAME,
)
# Every label a selector of pod_selector may test, kept per pod to check the whole selector.
SELECTOR_LABELS = frozenset((*IDENTITY_LABELS, KF_OPERATOR, RAY_ORIGIN_CRD))
# Warning events kept per involved object: the engine shows the last few distinct ones.
MAX_EVENTS_PER_OBJECT = 8

Pair = tuple[str, str]
ObjectKey = tuple[str, str]  # (namespace, name)


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def parse_selector(selector: str) -> tuple[Pair, ...] | None:
    """``k=v,k2=v2`` as pairs; None for anything else (existence tests, ``in``...)."""
    pairs = []
    for part in selector.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key or "!" in key:
            return None
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


@dataclass(frozen=True, slots=True)
class JobLinks:
    """How one job finds its evidence in the cache."""

    namespace: str
    name: str
    uid: str
    selectors: tuple[tuple[Pair, ...], ...]  # any of these (RayJob: its cluster's pods, its submitter's)
    objects: tuple[str, ...]  # names of objects whose events are about the job (itself, its RayCluster)
    child_prefix: str | None = None  # events about child batch Jobs named "<prefix>-..."

    def keys(self) -> set[str]:
        ns = self.namespace
        keys = {f"uid={self.uid}"}
        keys.update(f"{ns}/obj={name}" for name in self.objects)
        if self.child_prefix:
            keys.add(f"{ns}/child={self.child_prefix}")
        for pairs in self.selectors:
            keys.update(f"{ns}/{k}={v}" for k, v in pairs if k in IDENTITY_LABELS)
        return keys


def job_links(kind_key: str, job: Mapping[str, Any]) -> JobLinks | None:
    metadata, status = _map(job.get("metadata")), _map(job.get("status"))
    namespace, name, uid = metadata.get("namespace"), metadata.get("name"), metadata.get("uid")
    if not (isinstance(namespace, str) and isinstance(name, str) and isinstance(uid, str)):
        return None
    selectors = tuple(pairs for s in pod_selector(kind_key, job) if (pairs := parse_selector(s)) is not None)
    objects = [name]
    ray_cluster = status.get("rayClusterName")
    if kind_key == "rayjob" and isinstance(ray_cluster, str) and ray_cluster:
        objects.append(ray_cluster)
    child = name if kind_key in ("jobset", "trainjob", "mpijob") else None
    return JobLinks(namespace, name, uid, selectors, tuple(objects), child)


@dataclass(slots=True)
class _Pod:
    evidence: PodEvidence
    # The selector labels, sorted, their strings interned; the tuple itself is shared by the pods
    # of one job (see _put_pod): 100k pods of 10k jobs hold 10k of these, not 100k dicts.
    labels: tuple[Pair, ...]
    source: str


@dataclass(slots=True)
class _Owned:
    owners: tuple[str, ...]
    source: str


def _owner_uids(obj: Mapping[str, Any]) -> tuple[str, ...]:
    refs = _map(obj.get("metadata")).get("ownerReferences")
    if not isinstance(refs, list):
        return ()
    return tuple(uid for ref in refs if isinstance(ref, Mapping) and isinstance(uid := ref.get("uid"), str))


def _child_prefixes(name: str) -> Iterable[str]:
    """``a-b-c`` -> ``a``, ``a-b``: every name a parent job of this child Job may have."""
    index = name.find("-")
    while index > 0:
        yield name[:index]
        index = name.find("-", index + 1)


class EvidenceCache:
    def __init__(self, *, max_events_per_object: int = MAX_EVENTS_PER_OBJECT) -> None:
        # namespace -> pod name -> pod: no (namespace, name) tuple per pod.
        self._pods: dict[str, dict[str, _Pod]] = {}
        self._pod_count = 0
        # index key ("<ns>/<label>=<value>") -> names of the pods in <ns> that carry that label: a
        # list (a job has tens of pods, and a list of them is a fifth of a set's size).
        self._pods_by_key: dict[str, list[str]] = {}
        # (ns, involved object name) -> event (ns, name) -> trimmed event
        self._events: dict[ObjectKey, dict[str, WarningEvent]] = {}
        self._event_objects: dict[ObjectKey, tuple[ObjectKey, str]] = {}  # event -> its object, source
        self._job_event_objects: dict[str, set[str]] = {}  # ns -> names of batch Jobs with events
        self._max_events = max_events_per_object
        self._workloads: dict[str, KueueWorkload] = {}  # owner uid ->
        self._podgroups: dict[str, PodGroupEvidence] = {}  # owner uid ->
        self._owned: dict[tuple[str, str, str], _Owned] = {}  # (what, ns, name) ->
        self._listeners: list[Callable[[set[str]], None]] = []
        self.malformed = 0

    # -- listeners ----------------------------------------------------------------------------
    def subscribe(self, listener: Callable[[set[str]], None]) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _notify(self, keys: set[str]) -> None:
        if keys:
            for listener in list(self._listeners):
                listener(keys)

    # -- sizes --------------------------------------------------------------------------------
    @property
    def pod_count(self) -> int:
        return self._pod_count

    @property
    def event_count(self) -> int:
        return len(self._event_objects)

    def touch_pod(self, namespace: str, name: str) -> None:
        """Something about the pod that is not in it arrived (its log tail): wake its jobs."""
        pod = self._pod(namespace, name)
        if pod is not None:
            self._notify(self._pod_keys(namespace, pod.labels))

    # -- applying watch events ----------------------------------------------------------------
    def apply(
        self,
        what: str,
        source: str,
        event_type: str,
        obj: Mapping[str, Any],
        pending: Mapping[str, Any] | None = None,
    ) -> None:
        """One watch event of an evidence source: ``what`` is pod, event, workload or podgroup;
        ``pending``: a Workload's item of Kueue's visibility API (its queue positions)."""
        metadata = _map(obj.get("metadata"))
        namespace, name = metadata.get("namespace"), metadata.get("name")
        if not (isinstance(namespace, str) and isinstance(name, str)):
            self.malformed += 1
            return
        key = (namespace, name)
        deleted = event_type == "DELETED"
        if what == "pod":
            self._notify(self._remove_pod(key) if deleted else self._put_pod(key, obj, source))
        elif what == "event":
            self._notify(self._remove_event(key) if deleted else self._put_event(key, obj, source))
        elif what in ("workload", "podgroup"):
            self._notify(self._put_owned(what, key, None if deleted else obj, source, pending))

    def forget_source(self, source: str, keep: set[ObjectKey]) -> None:
        """After a relist of ``source``: what it no longer lists is gone."""
        keys: set[str] = set()
        gone = [
            (namespace, name)
            for namespace, pods in self._pods.items()
            for name, pod in pods.items()
            if pod.source == source and (namespace, name) not in keep
        ]
        for key in gone:
            keys |= self._remove_pod(key)
        for key in [k for k, (_, s) in self._event_objects.items() if s == source and k not in keep]:
            keys |= self._remove_event(key)
        for what, ns, name in [k for k, o in self._owned.items() if o.source == source]:
            if (ns, name) not in keep:
                keys |= self._put_owned(what, (ns, name), None, source)
        self._notify(keys)

    def _pod(self, namespace: str, name: str) -> _Pod | None:
        pods = self._pods.get(namespace)
        return pods.get(name) if pods is not None else None

    def _pod_keys(self, namespace: str, labels: Iterable[Pair]) -> set[str]:
        return {f"{namespace}/{k}={v}" for k, v in labels if k in IDENTITY_LABELS}

    def _shared_labels(self, namespace: str, labels: tuple[Pair, ...]) -> tuple[Pair, ...]:
        """The same labels tuple as another pod of the same job holds, if one is cached."""
        for index_key in self._pod_keys(namespace, labels):
            members = self._pods_by_key.get(index_key)
            if members and (other := self._pod(namespace, members[0])) is not None and other.labels == labels:
                return other.labels
        return labels

    def _put_pod(self, key: ObjectKey, obj: Mapping[str, Any], source: str) -> set[str]:
        evidence = trim_pod(obj)
        if evidence is None:
            self.malformed += 1
            return set()
        raw = _map(_map(obj.get("metadata")).get("labels"))
        labels = tuple(
            sorted(
                (sys.intern(k), sys.intern(v))
                for k, v in raw.items()
                if k in SELECTOR_LABELS and isinstance(v, str)
            )
        )
        namespace, name = key
        old = self._pod(namespace, name)
        if old is not None and old.labels == labels:
            if old.evidence == evidence:
                return set()  # a change diagnosis does not see (readiness probes, IPs...)
            old.evidence = evidence
            return self._pod_keys(namespace, labels)
        changed = self._remove_pod(key) if old is not None else set()
        namespace = sys.intern(namespace)
        labels = self._shared_labels(namespace, labels)
        self._pods.setdefault(namespace, {})[name] = _Pod(evidence, labels, source)
        self._pod_count += 1
        keys = self._pod_keys(namespace, labels)
        for index_key in keys:
            self._pods_by_key.setdefault(index_key, []).append(name)
        return changed | keys

    def _remove_pod(self, key: ObjectKey) -> set[str]:
        namespace, name = key
        pods = self._pods.get(namespace)
        old = pods.pop(name, None) if pods is not None else None
        if old is None:
            return set()
        self._pod_count -= 1
        if not pods:
            del self._pods[namespace]
        keys = self._pod_keys(namespace, old.labels)
        for index_key in keys:
            members = self._pods_by_key.get(index_key)
            if members is not None and name in members:
                members.remove(name)
                if not members:
                    del self._pods_by_key[index_key]
        return keys

    def _event_keys(self, namespace: str, kind: str | None, name: str, uid: object) -> set[str]:
        keys = {f"{namespace}/obj={name}"}
        if isinstance(uid, str) and uid:
            keys.add(f"uid={uid}")
        if kind == "Pod" and (pod := self._pod(namespace, name)) is not None:
            keys |= self._pod_keys(namespace, pod.labels)
        if kind == "Job":
            keys.update(f"{namespace}/child={prefix}" for prefix in _child_prefixes(name))
        return keys

    def _put_event(self, key: ObjectKey, obj: Mapping[str, Any], source: str) -> set[str]:
        event = trim_event(obj)
        if event is None or event.object_name is None:
            self.malformed += 1
            return set()
        if event.type != "Warning":
            return self._remove_event(key)
        involved = _map(obj.get("involvedObject")) or _map(obj.get("regarding"))
        given = involved.get("namespace")
        namespace: str = given if isinstance(given, str) and given else key[0]
        target = (namespace, event.object_name)
        previous = self._event_objects.get(key)
        keys = self._remove_event(key) if previous is not None and previous[0] != target else set()
        per_object = self._events.setdefault(target, {})
        if per_object.get(key[1]) == event:
            return keys
        per_object[key[1]] = event
        self._event_objects[key] = (target, source)
        if event.object_kind == "Job":
            self._job_event_objects.setdefault(namespace, set()).add(event.object_name)
        if len(per_object) > self._max_events:
            oldest = min(
                per_object, key=lambda n: (per_object[n].last_seen is not None, per_object[n].last_seen)
            )
            del per_object[oldest]
            self._event_objects.pop((key[0], oldest), None)
        return keys | self._event_keys(namespace, event.object_kind, event.object_name, involved.get("uid"))

    def _remove_event(self, key: ObjectKey) -> set[str]:
        found = self._event_objects.pop(key, None)
        if found is None:
            return set()
        target = found[0]
        per_object = self._events.get(target, {})
        event = per_object.pop(key[1], None)
        if not per_object:
            self._events.pop(target, None)
            names = self._job_event_objects.get(target[0])
            if names is not None:
                names.discard(target[1])
        kind = event.object_kind if event is not None else None
        return self._event_keys(target[0], kind, target[1], None)

    def _put_owned(
        self,
        what: str,
        key: ObjectKey,
        obj: Mapping[str, Any] | None,
        source: str,
        pending: Mapping[str, Any] | None = None,
    ) -> set[str]:
        index = self._workloads if what == "workload" else self._podgroups
        owned_key = (what, *key)
        old = self._owned.pop(owned_key, None)
        keys: set[str] = set()
        if old is not None:
            for uid in old.owners:
                index.pop(uid, None)
                keys.add(f"uid={uid}")
        if obj is None:
            return keys
        trimmed = trim_workload(obj, pending) if what == "workload" else trim_podgroup(obj)
        owners = _owner_uids(obj)
        if trimmed is None or not owners:
            return keys
        self._owned[owned_key] = _Owned(owners, source)
        for uid in owners:
            index[uid] = trimmed  # type: ignore[assignment]
            keys.add(f"uid={uid}")
        return keys

    # -- Kueue queue positions ------------------------------------------------------------------
    def pending_queues(self) -> set[ObjectKey]:
        """(namespace, LocalQueue) of every cached Workload that has no quota reserved yet: the
        queues whose positions move when any Workload is admitted, finishes, arrives or leaves."""
        queues: set[ObjectKey] = set()
        for what, namespace, name in self._owned:
            if what != "workload":
                continue
            workload = self._workload(namespace, name)
            if workload is None or workload.queue is None:
                continue
            reserved = workload.condition("QuotaReserved")
            finished = workload.condition("Finished")
            if not (reserved is not None and reserved.status == "True") and not (
                finished is not None and finished.status == "True"
            ):
                queues.add((namespace, workload.queue))
        return queues

    def set_queue_positions(self, namespace: str, name: str, pending: Mapping[str, Any]) -> None:
        """Kueue's visibility API gave a pending Workload's positions (its ``pendingworkloads``
        item): a position that moved wakes the Workload's jobs. Positions of a Workload move
        without the Workload changing (those ahead were admitted), so its watch never says so."""
        owned = self._owned.get(("workload", namespace, name))
        workload = self._workload(namespace, name)
        if owned is None or workload is None:
            return
        local = pending.get("positionInLocalQueue")
        cluster = pending.get("positionInClusterQueue")
        moved = dataclasses.replace(
            workload,
            position_in_local_queue=local if isinstance(local, int) and local >= 0 else None,
            position_in_cluster_queue=cluster if isinstance(cluster, int) and cluster >= 0 else None,
        )
        if moved == workload:
            return
        keys: set[str] = set()
        for uid in owned.owners:
            self._workloads[uid] = moved
            keys.add(f"uid={uid}")
        self._notify(keys)

    def _workload(self, namespace: str, name: str) -> KueueWorkload | None:
        owned = self._owned.get(("workload", namespace, name))
        if owned is None or not owned.owners:
            return None
        return self._workloads.get(owned.owners[0])

    # -- reading one job's evidence -------------------------------------------------------------
    def pods_of(self, links: JobLinks) -> list[PodEvidence]:
        found: dict[str, PodEvidence] = {}
        pods = self._pods.get(links.namespace, {})
        for pairs in links.selectors:
            identity = next(((k, v) for k, v in pairs if k in IDENTITY_LABELS), None)
            if identity is None:
                continue
            wanted = set(pairs)
            for name in self._pods_by_key.get(f"{links.namespace}/{identity[0]}={identity[1]}", ()):
                pod = pods[name]
                if wanted.issubset(pod.labels):
                    found[name] = pod.evidence
        return [found[name] for name in sorted(found)]

    def events_of(self, links: JobLinks, pods: Iterable[PodEvidence]) -> list[WarningEvent]:
        ns = links.namespace
        names = set(links.objects) | {p.name for p in pods}
        if links.child_prefix:
            prefix = links.child_prefix + "-"
            names.update(n for n in self._job_event_objects.get(ns, ()) if n.startswith(prefix))
        events: list[WarningEvent] = []
        for name in names:
            events.extend(self._events.get((ns, name), {}).values())
        events.sort(key=lambda e: (e.last_seen is None, e.last_seen, e.reason))
        return events

    def workload_of(self, links: JobLinks) -> KueueWorkload | None:
        return self._workloads.get(links.uid)

    def podgroup_of(self, links: JobLinks) -> PodGroupEvidence | None:
        return self._podgroups.get(links.uid)
