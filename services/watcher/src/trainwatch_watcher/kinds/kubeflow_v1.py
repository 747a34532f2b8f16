"""Kubeflow Training Operator v1 kinds: PyTorchJob, TFJob, MPIJob v1, XGBoostJob, PaddleJob, JAXJob.

Reference §2.2 and the mapping §3.3 "Kubeflow v1". The MPIJob v2beta1 normalizer reuses the reading
and the outcome rows here; only its restart rule differs.

Restarts: the operator flags them with ``Restarting=True`` but keeps no counter, so the watcher
counts them: ``restart_count`` is ``previous.restart_count + 1`` on each *entry* into Restarting
(1 on first sight of a restarting job, the lower bound), and carried over otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from trainwatch_common.events.jobs import Phase, ReplicaCounts, SubPhase
from trainwatch_watcher.kinds.common_rules import make_status, queue_name
from trainwatch_watcher.kinds.fields import count, flag, mapping_field, optional_count, parse_time
from trainwatch_watcher.kinds.model import MalformedObject, NormalizedStatus, replica_counts
from trainwatch_watcher.kinds.objects import (
    KUEUE_QUEUE_LABEL,
    Condition,
    JobObject,
    held_by_suspension,
    podgroup_phase,
    read_object,
    true_condition,
)


@dataclass(slots=True)  # not frozen, as objects.Condition: built anew for each observation
class KubeflowView:
    """What the v1 and v2beta1 rows read from a Kubeflow-style job."""

    job: JobObject
    conditions: list[Condition]
    replicas: dict[str, ReplicaCounts]
    started_at: datetime | None
    completion_time: datetime | None
    last_reconcile_time: datetime | None
    queue: str | None
    suspend_requested: bool


def read_view(job: JobObject) -> KubeflowView:
    run_policy = job.spec.get("runPolicy")
    run_policy = run_policy if isinstance(run_policy, Mapping) else {}
    scheduling = run_policy.get("schedulingPolicy")
    spec_queue = scheduling.get("queue") if isinstance(scheduling, Mapping) else None
    return KubeflowView(
        job=job,
        conditions=job.conditions(),
        replicas=_read_replicas(job),
        started_at=parse_time(job.status.get("startTime")),
        completion_time=parse_time(job.status.get("completionTime")),
        last_reconcile_time=parse_time(job.status.get("lastReconcileTime")),
        queue=queue_name(job, spec_queue),
        suspend_requested=flag(run_policy, "suspend"),
    )


def _read_replicas(job: JobObject) -> dict[str, ReplicaCounts]:
    """Counts per replica type; desired from ``spec.<x>ReplicaSpecs`` (default 1 replica).

    Zero counts are omitted (``Worker: {}``), and a type can be absent from the status until its
    first pod exists, so the spec's types are listed too.
    """
    desired: dict[str, int] = {}
    for key, specs in job.spec.items():
        if isinstance(key, str) and key.endswith("ReplicaSpecs") and isinstance(specs, Mapping):
            for role, spec in specs.items():
                if isinstance(role, str):
                    wanted = optional_count(spec, "replicas") if isinstance(spec, Mapping) else None
                    desired[role] = 1 if wanted is None else wanted
    statuses = mapping_field(job.status, "replicaStatuses", "status")
    replicas: dict[str, ReplicaCounts] = {}
    for role in [*desired, *(r for r in statuses if r not in desired)]:
        entry = statuses.get(role)
        if entry is None:
            entry = {}
        if not isinstance(entry, Mapping):
            raise MalformedObject(f"status.replicaStatuses.{role} is a {type(entry).__name__}")
        replicas[str(role)] = replica_counts(
            desired.get(role), count(entry, "active"), None, count(entry, "succeeded"), count(entry, "failed")
        )
    return replicas


def outcome_or_hold(view: KubeflowView, restart_count: int, restart_counter: int) -> NormalizedStatus | None:
    """The rows every Kubeflow-style job shares first: Failed, Succeeded, Suspended (or Queued)."""
    failed = true_condition(view.conditions, "Failed")
    succeeded = true_condition(view.conditions, "Succeeded")
    if failed is not None and succeeded is not None:
        # Both true should not happen (MPI v2 flips Failed to False on success); if a controller
        # left both, the later one is the outcome, and a tie is a failure.
        failed_at, succeeded_at = failed.last_transition_time, succeeded.last_transition_time
        if failed_at is not None and succeeded_at is not None and succeeded_at > failed_at:
            failed = None
    outcome = failed or succeeded
    if outcome is not None:
        return make_status(
            view.job,
            Phase.FAILED if outcome is failed else Phase.SUCCEEDED,
            terminal=True,
            condition=outcome,
            started_at=view.started_at,
            # completionTime is set on success and on failure; the condition time covers writers
            # that leave it out.
            finished_at=view.completion_time or outcome.last_transition_time,
            replicas=view.replicas,
            restart_count=restart_count,
            restart_counter=restart_counter,
            queue=view.queue,
        )
    held = held_by_suspension(
        view.job,
        view.conditions,
        suspend_requested=view.suspend_requested,
        spec_field="spec.runPolicy.suspend",
    )
    if held is None:
        return None
    return make_status(
        view.job,
        held.phase,
        sub_phase=held.sub_phase,
        condition=held.condition,
        source=held.source,
        started_at=view.started_at,
        replicas=view.replicas,
        restart_count=restart_count,
        restart_counter=restart_counter,
        queue=view.queue,
    )


def running_or_pending(
    view: KubeflowView, related: Mapping[str, Any] | None, restart_count: int, restart_counter: int
) -> NormalizedStatus:
    """The last rows: Running=True, then Pending (Queued / Scheduling / Created), else Unknown."""

    def result(phase: Phase, **kwargs: Any) -> NormalizedStatus:
        return make_status(
            view.job,
            phase,
            started_at=view.started_at,
            replicas=view.replicas,
            restart_count=restart_count,
            restart_counter=restart_counter,
            queue=view.queue,
            **kwargs,
        )

    if (running := true_condition(view.conditions, "Running")) is not None:
        return result(Phase.RUNNING, condition=running)
    created = true_condition(view.conditions, "Created")
    if created is None and view.conditions:
        # Conditions exist but none we know holds (an unknown type, or only False ones).
        return result(Phase.UNKNOWN, source="conditions")

    gang = podgroup_phase(related)
    any_active = any(r.active > 0 for r in view.replicas.values())
    no_pods_yet = not any(r.active or r.succeeded or r.failed for r in view.replicas.values())
    if gang == "Pending":
        sub_phase, source = SubPhase.QUEUED, "podgroup.phase:Pending"
    elif any_active:
        sub_phase, source = SubPhase.SCHEDULING, "replicaStatuses"
    elif gang is not None:
        sub_phase, source = SubPhase.SCHEDULING, f"podgroup.phase:{gang}"
    elif no_pods_yet and _delayed_by_gang_scheduling(view):
        sub_phase, source = SubPhase.QUEUED, "status.lastReconcileTime"
    else:
        sub_phase, source = SubPhase.CREATED, None
    return result(Phase.PENDING, sub_phase=sub_phase, condition=created, source=source)


def _delayed_by_gang_scheduling(view: KubeflowView) -> bool:
    """The operator writes ``lastReconcileTime`` each time it holds back pod creation because the
    job's PodGroup is not admitted yet (§2.2 "Queued"). A ``startTime`` later than it means the job
    started (or was resumed) since, so the mark is stale.
    """
    if view.last_reconcile_time is None:
        return False
    return view.started_at is None or view.last_reconcile_time >= view.started_at


def normalize(
    obj: Mapping[str, Any],
    previous: NormalizedStatus | None,
    related: Mapping[str, Any] | None = None,
) -> NormalizedStatus:
    """Normalize a Kubeflow v1 job. ``related`` may be the job's Volcano PodGroup, if known."""
    view = read_view(read_object(obj))
    carried = previous.restart_count if previous is not None else 0
    held = outcome_or_hold(view, carried, 0)
    if held is not None:
        return held
    if (restarting := true_condition(view.conditions, "Restarting")) is not None:
        entering = previous is None or previous.phase is not Phase.RESTARTING
        return make_status(
            view.job,
            Phase.RESTARTING,
            condition=restarting,
            started_at=view.started_at,
            replicas=view.replicas,
            restart_count=carried + 1 if entering else carried,
            queue=view.queue,
        )
    return running_or_pending(view, related, carried, 0)


# Condition types whose "True" makes the rows above ignore replica counts and times.
_DECIDING_TYPES = frozenset({"Failed", "Succeeded", "Suspended", "Restarting", "Running"})


def decision_inputs(obj: Mapping[str, Any]) -> bytes | None:
    """Every raw value the phase, sub-phase, reason, source, queue and counters read (``related``
    aside), or None when the object looks odd enough that only ``normalize`` may judge it.

    Two observations of a uid with equal inputs normalize to the same trimmed status: the rows
    depend on ``previous`` only through ``restart_count`` and "was Restarting", and the result of
    one observation fed back as ``previous`` yields itself. The informer therefore skips
    ``normalize`` for an update that changed none of these (most updates move only counters,
    messages and timestamps). Replica counts and the times of the Pending rows count only while
    no deciding condition holds. Anything ``normalize`` would reject as malformed returns None.
    """
    metadata = obj.get("metadata")
    spec = obj.get("spec")
    status = obj.get("status")
    if type(metadata) is not dict or type(spec) not in (dict, type(None)):
        return None
    if type(status) not in (dict, type(None)):
        return None
    for key in ("uid", "name", "namespace"):  # as read_object demands
        value = metadata.get(key)
        if type(value) is not str or not value:
            return None
    spec = spec or {}
    status = status or {}
    conditions = status.get("conditions")
    if conditions is None:
        conditions = []
    elif type(conditions) is not list:
        return None
    deciding = False
    condition_inputs = []
    for entry in conditions:
        if type(entry) is not dict:
            return None
        kind, state = entry.get("type"), entry.get("status")
        condition_inputs.append((kind, state, entry.get("reason"), entry.get("lastTransitionTime")))
        if state == "True" and type(kind) is str and kind in _DECIDING_TYPES:
            deciding = True
    labels, annotations = metadata.get("labels"), metadata.get("annotations")
    if type(labels) not in (dict, type(None)) or type(annotations) not in (dict, type(None)):
        return None
    replica_statuses = status.get("replicaStatuses")
    if type(replica_statuses) not in (dict, type(None)):
        return None
    counts = []
    for role, entry in (replica_statuses or {}).items():
        if entry is None:
            entry = {}
        elif type(entry) is not dict:
            return None
        counts.append((role, entry.get("active"), entry.get("succeeded"), entry.get("failed")))
    pending_inputs: Any = None
    if not deciding:
        pending_inputs = (counts, status.get("startTime"), status.get("lastReconcileTime"))
    inputs = (
        condition_inputs,
        spec.get("runPolicy"),
        (labels or {}).get(KUEUE_QUEUE_LABEL),
        (annotations or {}).get(KUEUE_QUEUE_LABEL),
        pending_inputs,
    )
    # Kept per job as JSON bytes: ~250 bytes instead of the ~1 KB the tuple and the strings it
    # holds take. Equal bytes are equal JSON values. Copied, because orjson's result keeps its
    # 4 KB working buffer allocated (measured: 4.1 KB per kept result, 220 bytes per copy).
    try:
        return memoryview(orjson.dumps(inputs)).tobytes()
    except orjson.JSONEncodeError:
        return None
