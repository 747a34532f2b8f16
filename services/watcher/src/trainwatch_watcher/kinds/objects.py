"""Reading the parts every kind shares: identity, spec/status, conditions, Kueue and queue names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from trainwatch_common.events.jobs import Phase, SubPhase
from trainwatch_watcher.kinds.fields import mapping_field, mapping_items, parse_time, text
from trainwatch_watcher.kinds.model import MalformedObject

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# Not frozen: built anew for each observation, and a frozen dataclass's __init__ (one
# object.__setattr__ per field) costs ~7x more.
@dataclass(slots=True)
class Condition:
    type: str
    status: str
    reason: str | None
    message: str | None
    last_transition_time: datetime | None

    @property
    def is_true(self) -> bool:
        # Rule §1.1: controllers keep conditions after they stop holding, with status "False".
        return self.status == "True"


@dataclass(slots=True)  # not frozen either: see Condition
class JobObject:
    """The validated top level of a job object; spec and status are mappings (possibly empty)."""

    metadata: Mapping[str, Any]
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    labels: Mapping[str, Any]
    annotations: Mapping[str, Any]
    created_at: datetime | None

    def conditions(self, key: str = "conditions") -> list[Condition]:
        return read_conditions(self.status, key)

    @property
    def kueue_queue(self) -> str | None:
        # Older Kueue releases used an annotation with the same name.
        value = self.labels.get(KUEUE_QUEUE_LABEL) or self.annotations.get(KUEUE_QUEUE_LABEL)
        return value if isinstance(value, str) and value else None


def read_object(obj: object) -> JobObject:
    """Validate what every kind needs; raise MalformedObject with the reason otherwise."""
    if not isinstance(obj, Mapping):
        raise MalformedObject(f"object is a {type(obj).__name__}, expected a mapping")
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        raise MalformedObject("object has no metadata mapping")
    for key in ("uid", "name", "namespace"):
        value = metadata.get(key)
        if not isinstance(value, str) or not value:
            raise MalformedObject(f"metadata.{key} is missing or not a non-empty string")
    return JobObject(
        metadata=metadata,
        spec=mapping_field(obj, "spec", "object"),
        status=mapping_field(obj, "status", "object"),
        labels=mapping_field(metadata, "labels", "metadata"),
        annotations=mapping_field(metadata, "annotations", "metadata"),
        created_at=parse_time(metadata.get("creationTimestamp")),
    )


def read_conditions(status: Mapping[str, Any], key: str = "conditions") -> list[Condition]:
    """The conditions list; entries without a string type are ignored (we match on types only)."""
    conditions = []
    for entry in mapping_items(status, key, "status"):
        kind = entry.get("type")
        if not isinstance(kind, str) or not kind:
            continue
        status_value = entry.get("status")
        conditions.append(
            Condition(
                type=kind,
                status=status_value if isinstance(status_value, str) else "",
                reason=text(entry, "reason"),
                message=text(entry, "message"),
                last_transition_time=parse_time(entry.get("lastTransitionTime")),
            )
        )
    return conditions


def true_condition(conditions: Sequence[Condition], kind: str) -> Condition | None:
    """The ``kind`` condition if its status is "True".

    The list should hold a type at most once; if a controller bug or a merge left duplicates, the
    latest transition wins, so order in the list never decides (rule §1.2).
    """
    matches = [c for c in conditions if c.type == kind and c.is_true]
    if not matches:
        return None
    return max(matches, key=lambda c: c.last_transition_time or _EPOCH)


def has_condition(conditions: Sequence[Condition], kind: str) -> bool:
    """Whether the controller writes this condition type at all (with any status)."""
    return any(c.type == kind for c in conditions)


def kueue_waiting(job: JobObject, suspended: bool) -> bool:
    """A suspended job with a Kueue queue-name is waiting for admission: Pending/Queued (§2.7).

    The Workload is not visible from the job, but Kueue admits a job by unsuspending it, so a job
    that is still suspended is not admitted (or was evicted and requeued, which is queued as well).
    A Kueue job a user deactivates also looks like this; it is reported as Queued too.
    """
    return suspended and job.kueue_queue is not None


@dataclass(frozen=True, slots=True)
class Held:
    """A job held back by suspension: Pending/Queued when Kueue holds it, else Suspended."""

    phase: Phase
    sub_phase: SubPhase | None
    condition: Condition | None
    source: str | None


def held_by_suspension(
    job: JobObject,
    conditions: Sequence[Condition],
    *,
    suspend_requested: bool,
    spec_field: str = "spec.suspend",
) -> Held | None:
    """The rung every kind with a ``Suspended`` condition shares, after its terminal rows.

    The suspend request in the spec counts too, so a Kueue job is Queued before its controller
    writes the condition; ``source`` then names that field."""
    suspended = true_condition(conditions, "Suspended")
    if kueue_waiting(job, suspended is not None or suspend_requested):
        return Held(Phase.PENDING, SubPhase.QUEUED, suspended, None if suspended is not None else spec_field)
    if suspended is not None:
        return Held(Phase.SUSPENDED, None, suspended, None)
    return None


def podgroup_phase(related: object) -> str | None:
    """The phase of a gang-scheduling PodGroup handed in as ``related``; None if there is none.

    Volcano writes ``status.phase`` Pending/Inqueue/Running/Unknown/Completed; an empty phase means
    the scheduler has not looked at it yet, which for queueing purposes is Pending. Anything that is
    not a readable PodGroup is ignored: a companion object never makes the job itself unreadable.
    """
    if not isinstance(related, Mapping) or related.get("kind") != "PodGroup":
        return None
    status = related.get("status")
    if status is None:
        return "Pending"
    if not isinstance(status, Mapping):
        return None
    phase = status.get("phase") or "Pending"
    return phase if isinstance(phase, str) else None
