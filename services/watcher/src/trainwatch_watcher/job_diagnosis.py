"""One informer's side of diagnosis: each job's links into the cluster's evidence cache, its
diagnosis from that evidence, and which jobs to diagnose again when their evidence moved.

The informer owns emission (sequence, publish, checkpoint); this only answers "what is the
diagnosis of uid now" and "whose evidence changed" (``dirty``, with ``wake`` set).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from trainwatch_common.events.clusters import WatchOptions
from trainwatch_common.events.diagnosis import Diagnosis
from trainwatch_common.events.jobs import Phase
from trainwatch_watcher.diagnosis import (
    JobEvidence,
    PodEvidence,
    WarningEvent,
    diagnose,
    diagnosis_changed,
    job_evidence,
    job_times,
    log_request,
    summarize_resources,
)
from trainwatch_watcher.evidence_cache import EvidenceCache, JobLinks, job_links
from trainwatch_watcher.kinds.model import NormalizedStatus
from trainwatch_watcher.log_tails import LogTails
from trainwatch_watcher.records import JobRecord


@dataclass(slots=True)
class Tracked:
    """What a job's diagnosis and its diagnosis updates need, between the job's own events."""

    links: JobLinks
    job: JobEvidence
    status: NormalizedStatus  # the last full status: the details of a diagnosis update
    metadata: dict[str, Any]  # the labels and annotation events select, and the resourceVersion
    resources: dict[str, Any] | None = None  # JobResources as the event carries it (JSON)
    keys: set[str] = field(default_factory=set)
    # What links and resources were read from (see _spec_key); None: read them on every event.
    spec_key: tuple[object, ...] | None = None
    # The job's pods and Warning events as the cache last gave them; None once any of its keys
    # moved (the cache names them), so a job event that changed only the job reads no pods.
    pods: list[PodEvidence] | None = None
    events: list[WarningEvent] | None = None


def _spec_key(
    kind_key: str, obj: Mapping[str, Any], metadata: Mapping[str, Any]
) -> tuple[object, ...] | None:
    """What a job's links and resources depend on besides its uid, name and namespace: its spec,
    which the apiserver versions by ``metadata.generation`` (bumped on every spec change of a
    batch Job and of a custom resource), its apiVersion (MPIJob's selectors differ per version),
    and a RayJob's ``status.rayClusterName``. None when there is no generation to go by."""
    generation = metadata.get("generation")
    if not isinstance(generation, int) or isinstance(generation, bool):
        return None
    status = obj.get("status")
    ray_cluster = None
    if kind_key == "rayjob" and isinstance(status, Mapping):
        ray_cluster = status.get("rayClusterName")
    return (generation, obj.get("apiVersion"), ray_cluster)


def _resources_json(obj: Mapping[str, Any], kind_key: str) -> dict[str, Any] | None:
    try:
        resources = summarize_resources(obj, kind_key)
    except Exception:  # a template diagnosis cannot read: the events go without resources
        return None
    return resources.model_dump(mode="json", exclude_none=True)


def _kept_labels(options: WatchOptions) -> frozenset[str]:
    """The labels a job event carries: the selected ones and the owner label."""
    return frozenset(options.selected_labels) | ({options.owner_label} if options.owner_label else set())


def _event_metadata(
    metadata: Mapping[str, Any],
    options: WatchOptions,
    previous: dict[str, Any] | None = None,
    keep: frozenset[str] | None = None,
) -> dict[str, Any]:
    """The labels and annotation a diagnosis update's event selects, and the resourceVersion.
    ``previous`` (the job's last one, held by its Tracked only) is updated and returned when its
    labels and annotation are the same: a status change then leaves no new dicts to collect.
    ``keep``: ``_kept_labels(options)``, when the caller has it."""
    labels = metadata.get("labels") if isinstance(metadata.get("labels"), Mapping) else {}
    if keep is None:
        keep = _kept_labels(options)
    out: dict[str, Any] = {"labels": {k: v for k, v in labels.items() if k in keep}}  # type: ignore[union-attr]
    annotations = metadata.get("annotations")
    if options.owner_annotation and isinstance(annotations, Mapping):
        value = annotations.get(options.owner_annotation)
        if value is not None:
            out["annotations"] = {options.owner_annotation: value}
    if (
        previous is not None
        and previous["labels"] == out["labels"]
        and previous.get("annotations") == out.get("annotations")
    ):
        out = previous
        out.pop("resourceVersion", None)
    if isinstance(metadata.get("resourceVersion"), str):
        out["resourceVersion"] = metadata["resourceVersion"]
    return out


class JobDiagnoser:
    def __init__(
        self, kind_key: str, cache: EvidenceCache, options: WatchOptions, logs: LogTails | None = None
    ) -> None:
        self._kind_key = kind_key
        self._cache = cache
        self._logs = logs
        self._options = options
        self._kept_labels = _kept_labels(options)
        self._tracked: dict[str, Tracked] = {}
        # key -> uids of the jobs whose links name it: a tuple, as a key has one job or a few (a
        # set of one is 216 bytes, a tuple 48).
        self._by_key: dict[str, tuple[str, ...]] = {}
        self.dirty: set[str] = set()
        self.wake = asyncio.Event()
        self._unsubscribe = cache.subscribe(self._on_keys)

    def close(self) -> None:
        self._unsubscribe()

    def _on_keys(self, keys: set[str]) -> None:
        for key in keys:
            uids = self._by_key.get(key)
            if uids:
                self.dirty.update(uids)
                for uid in uids:
                    tracked = self._tracked.get(uid)
                    if tracked is not None:
                        tracked.pods = tracked.events = None
        if self.dirty:
            self.wake.set()

    def take_dirty(self) -> set[str]:
        self.wake.clear()
        dirty, self.dirty = self.dirty, set()
        return dirty

    def tracked(self, uid: str) -> Tracked | None:
        return self._tracked.get(uid)

    def track(self, uid: str, obj: Mapping[str, Any], status: NormalizedStatus) -> Tracked | None:
        """Remember a live job's side of the evidence after one of its own events.

        Links and resources are read from the spec only when it changed (``_spec_key``): a job's
        status changes far more often than its spec, and summing its templates' requests was half
        of what diagnosis added to a job event (bench/diagnosis)."""
        raw_metadata = obj.get("metadata")
        metadata: Mapping[str, Any] = raw_metadata if isinstance(raw_metadata, Mapping) else {}
        old = self._tracked.get(uid)
        spec_key = _spec_key(self._kind_key, obj, metadata)
        if old is not None and spec_key is not None and old.spec_key == spec_key:
            links, resources = old.links, old.resources
        else:
            found = job_links(self._kind_key, obj)
            if found is None:
                return None
            links, resources = found, _resources_json(obj, self._kind_key)
        job = job_evidence(
            self._kind_key,
            obj,
            phase=status.phase,
            sub_phase=status.sub_phase,
            terminal=status.terminal,
            reason=status.reason,
            message=status.message,
        )
        if old is not None and old.links == links:
            # Updated in place: a job's status churn then leaves little for the collector.
            old.job, old.status, old.resources, old.spec_key = job, status, resources, spec_key
            old.metadata = _event_metadata(metadata, self._options, old.metadata, self._kept_labels)
            return old
        tracked = Tracked(
            links,
            job,
            status,
            _event_metadata(metadata, self._options, keep=self._kept_labels),
            resources,
            spec_key=spec_key,
        )
        tracked.keys = links.keys()
        if old is not None:
            self._unindex(uid, old.keys - tracked.keys)
        self._index(uid, tracked.keys)
        self._tracked[uid] = tracked
        return tracked

    def relink(self, uid: str, obj: Mapping[str, Any]) -> None:
        """A job event that changed none of its status inputs may still move its links (a RayJob
        names its RayCluster in a status field the phase does not read)."""
        tracked = self._tracked.get(uid)
        links = job_links(self._kind_key, obj)
        if tracked is None or links is None or links == tracked.links:
            return
        keys = links.keys()
        self._unindex(uid, tracked.keys - keys)
        self._index(uid, keys)
        tracked.links, tracked.keys = links, keys
        tracked.pods = tracked.events = None
        self.dirty.add(uid)
        self.wake.set()

    def forget(self, uid: str) -> None:
        old = self._tracked.pop(uid, None)
        if old is not None:
            self._unindex(uid, old.keys)
        self.dirty.discard(uid)

    def _index(self, uid: str, keys: set[str]) -> None:
        for key in keys:
            uids = self._by_key.get(key, ())
            if uid not in uids:
                self._by_key[key] = (*uids, uid)

    def _unindex(self, uid: str, keys: set[str]) -> None:
        for key in keys:
            uids = self._by_key.get(key)
            if uids is not None and uid in uids:
                rest = tuple(u for u in uids if u != uid)
                if rest:
                    self._by_key[key] = rest
                else:
                    del self._by_key[key]

    def diagnose(self, uid: str, now: datetime) -> Diagnosis | None:
        tracked = self._tracked.get(uid)
        if tracked is None:
            return None
        cache, links = self._cache, tracked.links
        if tracked.pods is None or tracked.events is None:
            tracked.pods = cache.pods_of(links)
            tracked.events = cache.events_of(links, tracked.pods)
        pods, events = tracked.pods, tracked.events
        diagnosis = diagnose(
            tracked.job, pods, events, cache.workload_of(links), cache.podgroup_of(links), now
        )
        if self._logs is not None and (request := log_request(diagnosis, pods)) is not None:
            tail = self._logs.tail(links.namespace, request)
            if tail is not None and diagnosis is not None:
                diagnosis = diagnosis.model_copy(update={"log_tail": tail})
        return diagnosis


def is_news(old: Diagnosis | None, new: Diagnosis | None) -> bool:
    """``diagnosis_changed``, or the log tail of the same diagnosis arrived (fetched after it went
    out: it rides a diagnosis update of its own, once)."""
    if diagnosis_changed(old, new):
        return True
    return new is not None and new.log_tail is not None and (old is None or old.log_tail is None)


def first_running_at(record: JobRecord | None, status: NormalizedStatus, now: datetime) -> datetime | None:
    """When the job was first seen Running (kept in its record)."""
    if record is not None and record.first_running_at is not None:
        return record.first_running_at
    return now if status.phase is Phase.RUNNING else None


def event_extras(
    tracked: Tracked | None,
    diagnosis: Diagnosis | None,
    status: NormalizedStatus,
    first_running: datetime | None,
    terminal: bool,
    now: datetime,
) -> dict[str, Any]:
    """The diagnosis part of a job event, as ``event_document`` adds it (model field order)."""
    wait, run = job_times(status.created_at, first_running, status.finished_at, now, terminal=terminal)
    return {
        "diagnosis": diagnosis.model_dump(mode="json", exclude_none=True) if diagnosis is not None else None,
        "resources": tracked.resources if tracked is not None else None,
        "queue_wait_seconds": wait,
        "run_seconds": run,
    }
