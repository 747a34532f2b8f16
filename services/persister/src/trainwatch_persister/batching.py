"""Pure: turns a batch of delivered messages into the rows one transaction writes.

Nothing here touches NATS or SQL, so the decoding, the poison check and the in-batch
collapsing of several events of one job are tested without servers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from trainwatch_common.events.envelope import parse_job_event
from trainwatch_common.events.jobs import JobStatusEvent
from trainwatch_persister import ordering

M = TypeVar("M")

REASON_INVALID_EVENT = "invalid-event"
REASON_DB_REJECTED = "db-rejected"


@dataclass(frozen=True, slots=True)
class Received(Generic[M]):
    """A message whose payload is a valid job-status event."""

    message: M
    event: JobStatusEvent


@dataclass(frozen=True, slots=True)
class Rejected(Generic[M]):
    """A poison message: it can never be written, so it goes to the dead-letter stream."""

    message: M
    reason: str
    error: str


@dataclass(frozen=True, slots=True)
class Decoded(Generic[M]):
    received: list[Received[M]]
    rejected: list[Rejected[M]]


def decode(items: Iterable[tuple[M, bytes]]) -> Decoded[M]:
    """Split (message, payload) pairs into valid events and poison messages."""
    received: list[Received[M]] = []
    rejected: list[Rejected[M]] = []
    for message, payload in items:
        try:
            received.append(Received(message, parse_job_event(payload)))
        except (ValidationError, ValueError) as exc:
            rejected.append(Rejected(message, REASON_INVALID_EVENT, _one_line(exc)))
    return Decoded(received, rejected)


def _one_line(exc: Exception, limit: int = 500) -> str:
    text = " ".join(str(exc).split())
    return text[:limit]


def order_key(event: JobStatusEvent) -> ordering.OrderKey:
    return ordering.OrderKey(event.sequence, event.epoch, ordering.rv_number(event.job.resource_version))


def transition_rows(events: Sequence[JobStatusEvent], *, event_as_text: bool = False) -> list[dict[str, Any]]:
    """One history row per distinct event id (the first one of the batch wins, as in SQL).

    ``event_as_text``: the whole event as its JSON text (pydantic's serializer writes it in one
    call; building the dict first cost a fifth of the persister's CPU), for a statement that
    casts it to jsonb; otherwise as the document SQLAlchemy's JSON type serializes.
    """
    rows: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.event_id in rows:
            continue
        rows[event.event_id] = {
            "event_id": event.event_id,
            "cluster_id": event.job.cluster_id,
            "uid": event.job.uid,
            "sequence": event.sequence,
            "epoch": event.epoch,
            "change": event.change,
            "phase": event.phase.value,
            "sub_phase": event.sub_phase.value if event.sub_phase else None,
            "terminal": event.terminal,
            "previous_phase": event.previous_phase.value if event.previous_phase else None,
            "reason": event.reason,
            "message": event.message,
            "resource_version": event.job.resource_version,
            "observed_at": event.observed_at,
            "source_transition_time": event.source_transition_time,
            "watcher_id": event.watcher_id,
            **diagnosis_values(event),
            "event": event.model_dump_json() if event_as_text else event.model_dump(mode="json"),
        }
    return list(rows.values())


def latest_per_job(events: Iterable[JobStatusEvent]) -> list[JobStatusEvent]:
    """The newest event of each (cluster, uid) by the ordering rule; one upsert row per job.

    PostgreSQL refuses an INSERT ... ON CONFLICT that touches one row twice, so the batch is
    folded first; the rule is a total order, so this equals applying the events one by one.
    """
    latest: dict[tuple[str, str], JobStatusEvent] = {}
    for event in events:
        key = (event.job.cluster_id, event.job.uid)
        current = latest.get(key)
        if current is None or ordering.supersedes(order_key(event), order_key(current)):
            latest[key] = event
    return list(latest.values())


def job_rows(events: Sequence[JobStatusEvent]) -> list[dict[str, Any]]:
    """One upsert row per job: its newest event's (``latest_per_job``).

    A diagnosis update repeats the phase as its ``previous_phase``; the job keeps the previous
    phase of the transition before it. That transition may be in this batch (then the row carries
    its previous_phase) or already stored (then the upsert keeps the stored one, see repository).
    """
    rows = []
    for event in latest_per_job(events):
        row = job_row(event)
        if event.change == "diagnosis":
            before = _last_phase_event(events, event)
            if before is not None and before.phase == event.phase:
                # Differs from the phase unless that was a sub-phase move: the upsert takes it.
                row["previous_phase"] = before.previous_phase.value if before.previous_phase else None
        rows.append(row)
    return rows


def _last_phase_event(events: Sequence[JobStatusEvent], update: JobStatusEvent) -> JobStatusEvent | None:
    """The newest event of the update's job in the batch, before it, that is not a diagnosis update."""
    key, found = order_key(update), None
    for event in events:
        if (event.job.cluster_id, event.job.uid) != (update.job.cluster_id, update.job.uid):
            continue
        if event.change == "diagnosis" or not ordering.supersedes(key, order_key(event)):
            continue
        if found is None or ordering.supersedes(order_key(event), order_key(found)):
            found = event
    return found


def job_row(event: JobStatusEvent) -> dict[str, Any]:
    job = event.job
    return {
        "cluster_id": job.cluster_id,
        "uid": job.uid,
        "namespace": job.namespace,
        "kind_key": job.kind_key,
        "kind": job.kind,
        "api_version": job.api_version,
        "name": job.name,
        "phase": event.phase.value,
        "sub_phase": event.sub_phase.value if event.sub_phase else None,
        "terminal": event.terminal,
        "previous_phase": event.previous_phase.value if event.previous_phase else None,
        "reason": event.reason,
        "message": event.message,
        "owner": event.owner,
        "queue": event.queue,
        "labels": dict(event.labels),
        "replicas": {role: counts.model_dump(mode="json") for role, counts in event.replicas.items()},
        "restart_count": event.restart_count,
        "created_at": event.created_at or event.observed_at,
        "started_at": event.started_at,
        "finished_at": event.finished_at,
        "updated_at": event.observed_at,
        "deleted_at": event.observed_at if event.change == "deleted" else None,
        "sequence": event.sequence,
        "epoch": event.epoch,
        "resource_version": job.resource_version,
        "rv_number": ordering.rv_number(job.resource_version),
        "event_id": event.event_id,
        "watcher_id": event.watcher_id,
        # The current diagnosis is the one on the highest-ordered event, whatever its change: a
        # "diagnosis" update (same phase) or one with none (cleared) replaces it like any event.
        **diagnosis_values(event),
        "last_change": event.change,
        **resource_values(event),
        "queue_wait_seconds": event.queue_wait_seconds,
        "run_seconds": event.run_seconds,
    }


def diagnosis_values(event: JobStatusEvent) -> dict[str, Any]:
    diagnosis = event.diagnosis
    if diagnosis is None:
        return dict.fromkeys(("diagnosis_category", "diagnosis_blame", "diagnosis_summary", "diagnosis"))
    return {
        "diagnosis_category": diagnosis.category.value,
        "diagnosis_blame": diagnosis.blame.value,
        "diagnosis_summary": diagnosis.summary,
        "diagnosis": diagnosis.model_dump(mode="json", exclude_none=True),
    }


def resource_values(event: JobStatusEvent) -> dict[str, Any]:
    resources = event.resources
    if resources is None:  # an event of a watcher that does not read them: unknown, not zero
        return dict.fromkeys(("gpus", "gpu_product", "cpu", "memory_bytes"))
    return {
        "gpus": resources.gpus,
        "gpu_product": resources.gpu_product,
        "cpu": resources.cpu,
        "memory_bytes": resources.memory_bytes,
    }
