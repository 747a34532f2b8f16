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
from trainwatch_common.events.diagnosis import Diagnosis, JobResources
from trainwatch_common.events.jobs import Phase
from trainwatch_watcher.diagnosis import (
    JobEvidence,
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
    resources: JobResources | None = None
    keys: set[str] = field(default_factory=set)


def _event_metadata(metadata: Mapping[str, Any], options: WatchOptions) -> dict[str, Any]:
    labels = metadata.get("labels") if isinstance(metadata.get("labels"), Mapping) else {}
    keep = set(options.selected_labels) | ({options.owner_label} if options.owner_label else set())
    out: dict[str, Any] = {"labels": {k: v for k, v in labels.items() if k in keep}}  # type: ignore[union-attr]
    annotations = metadata.get("annotations")
    if options.owner_annotation and isinstance(annotations, Mapping):
        value = annotations.get(options.owner_annotation)
        if value is not None:
            out["annotations"] = {options.owner_annotation: value}
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
        self._tracked: dict[str, Tracked] = {}
        self._by_key: dict[str, set[str]] = {}
        self.dirty: set[str] = set()
        self.wake = asyncio.Event()
        self._unsubscribe = cache.subscribe(self._on_keys)

    def close(self) -> None:
        self._unsubscribe()

    def _on_keys(self, keys: set[str]) -> None:
        for key in keys:
            uids = self._by_key.get(key)
            if uids:
                self.dirty |= uids
        if self.dirty:
            self.wake.set()

    def take_dirty(self) -> set[str]:
        self.wake.clear()
        dirty, self.dirty = self.dirty, set()
        return dirty

    def tracked(self, uid: str) -> Tracked | None:
        return self._tracked.get(uid)

    def track(self, uid: str, obj: Mapping[str, Any], status: NormalizedStatus) -> Tracked | None:
        """Remember a live job's side of the evidence after one of its own events."""
        links = job_links(self._kind_key, obj)
        if links is None:
            return None
        metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        job = job_evidence(
            self._kind_key,
            obj,
            phase=status.phase,
            sub_phase=status.sub_phase,
            terminal=status.terminal,
            reason=status.reason,
            message=status.message,
        )
        old = self._tracked.get(uid)
        try:
            resources: JobResources | None = summarize_resources(obj, self._kind_key)
        except Exception:  # a template diagnosis cannot read: the event goes without resources
            resources = None
        tracked = Tracked(links, job, status, _event_metadata(metadata, self._options), resources)  # type: ignore[arg-type]
        tracked.keys = links.keys()
        if old is not None and old.keys != tracked.keys:
            self._unindex(uid, old.keys - tracked.keys)
        for key in tracked.keys:
            self._by_key.setdefault(key, set()).add(uid)
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
        for key in keys:
            self._by_key.setdefault(key, set()).add(uid)
        tracked.links, tracked.keys = links, keys
        self.dirty.add(uid)
        self.wake.set()

    def forget(self, uid: str) -> None:
        old = self._tracked.pop(uid, None)
        if old is not None:
            self._unindex(uid, old.keys)
        self.dirty.discard(uid)

    def _unindex(self, uid: str, keys: set[str]) -> None:
        for key in keys:
            uids = self._by_key.get(key)
            if uids is not None:
                uids.discard(uid)
                if not uids:
                    del self._by_key[key]

    def diagnose(self, uid: str, now: datetime) -> Diagnosis | None:
        tracked = self._tracked.get(uid)
        if tracked is None:
            return None
        cache, links = self._cache, tracked.links
        pods = cache.pods_of(links)
        events = cache.events_of(links, pods)
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
        "resources": (
            tracked.resources.model_dump(mode="json", exclude_none=True)
            if tracked is not None and tracked.resources is not None
            else None
        ),
        "queue_wait_seconds": wait,
        "run_seconds": run,
    }
