"""The published JobStatusEvent of one emission, and its subject (pure: no I/O).

The event is built as the JSON document the pydantic model would dump, not as the model: the
watcher publishes it with ``envelope.job_event_json``, because validating a ``JobStatusEvent``,
wrapping it in a ``CloudEvent`` and dumping both cost ~20 us per published event, against ~8 us
this way (bench/watch_ingest). The tests hold the document to the models: its bytes equal the
validated path's, ``wrap_job_event(JobStatusEvent.model_validate(doc))``, across emissions.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from trainwatch_common.events.clusters import WatchOptions
from trainwatch_common.events.jobs import JobStatusEvent
from trainwatch_common.subjects import job_subject
from trainwatch_watcher import transitions
from trainwatch_watcher.informer_spec import InformerSpec


def event_document(
    spec: InformerSpec,
    emission: transitions.Emission,
    obj: Mapping[str, Any] | None,
    resource_version: str,
    uid: str,
    observed_at: datetime,
    extras: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The event of one emission as ``JobStatusEvent.model_dump(mode="json", exclude_none=True)``
    would give it (keys in the model's field order, None values left out), except that enums and
    datetimes are left for orjson to write. Identity comes from the slot, details from the status.
    ``extras``: the diagnosis fields (``job_diagnosis.event_extras``), added after the others.
    """
    slot = emission.slot
    metadata: Mapping[str, Any] = {}
    if obj is not None and isinstance(obj.get("metadata"), Mapping):
        metadata = obj["metadata"]
    labels, owner = labels_and_owner(metadata, spec.options)
    status = emission.status
    kind = spec.kind
    return _without_none(
        {
            "event_id": JobStatusEvent.expected_event_id(spec.cluster_id, uid, emission.sequence),
            "change": emission.change,
            "sequence": emission.sequence,
            "epoch": spec.epoch,
            "watcher_id": spec.owner,
            "job": {
                "cluster_id": spec.cluster_id,
                "api_version": kind.api_version,
                "kind": kind.kind,
                "kind_key": kind.key,
                "namespace": slot.namespace,
                "name": slot.name,
                "uid": uid,
                "resource_version": resource_version,
            },
            "phase": slot.phase,
            "sub_phase": slot.sub_phase,
            "terminal": slot.terminal,
            "previous_phase": emission.previous_phase,
            "reason": status.reason,
            "message": status.message,
            "source": status.source,
            # A model's __dict__ holds its fields in field order (``dict(model)`` is 5x slower).
            "replicas": {role: _without_none(vars(counts)) for role, counts in status.replicas.items()},
            "restart_count": status.restart_count,
            "created_at": status.created_at,
            "started_at": status.started_at,
            "finished_at": status.finished_at,
            "source_transition_time": status.source_transition_time,
            "observed_at": observed_at,
            "labels": labels,
            "owner": owner,
            "queue": status.queue,
            **(extras or {}),
        }
    )


def _without_none(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def subject_for(spec: InformerSpec, slot: transitions.Slot) -> str:
    return _subject(spec.cluster_id, slot.namespace, spec.kind.key, slot.name)


@functools.lru_cache(maxsize=8192)
def _subject(cluster_id: str, namespace: str, kind_key: str, name: str) -> str:
    """Escaping is per character; a job publishes several events, so its subject is kept."""
    return job_subject(cluster_id=cluster_id, namespace=namespace, kind_key=kind_key, name=name)


def labels_and_owner(metadata: Mapping[str, Any], options: WatchOptions) -> tuple[dict[str, str], str | None]:
    raw_labels = metadata.get("labels")
    labels_map = raw_labels if isinstance(raw_labels, Mapping) else {}
    selected = {k: v for k in options.selected_labels if isinstance(v := labels_map.get(k), str)}
    owner: str | None = None
    if options.owner_label:
        value = labels_map.get(options.owner_label)
        if isinstance(value, str) and value:
            owner = value
            selected[options.owner_label] = value
    if owner is None and options.owner_annotation:
        annotations = metadata.get("annotations")
        if isinstance(annotations, Mapping):
            value = annotations.get(options.owner_annotation)
            if isinstance(value, str) and value:
                owner = value
    return selected, owner
