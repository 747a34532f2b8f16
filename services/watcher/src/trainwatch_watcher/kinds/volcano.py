"""Volcano ``batch.volcano.sh/v1alpha1`` Job (reference §2.5; mapping §3.3 "Volcano Job").

The phase is ``status.state.phase``; the controller never writes ``state.reason``/``message``, so
reasons for Terminated/Failed are made up here. ``Aborted`` is resumable (``vcctl job resume``), so
it is Suspended, not a failure. ``state.lastTransitionTime`` is rewritten on *any* status change,
so times are taken from the per-phase entries of ``status.conditions`` (``{status: <phase>,
lastTransitionTime}``), falling back to it. Restarts are explicit (phase Restarting) and counted by
``retryCount``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from trainwatch_common.events.jobs import Phase, ReplicaCounts, SubPhase
from trainwatch_watcher.kinds.common_rules import make_status, queue_name
from trainwatch_watcher.kinds.fields import (
    count,
    enum_text,
    mapping_field,
    mapping_items,
    optional_count,
    parse_time,
    text,
)
from trainwatch_watcher.kinds.model import MalformedObject, NormalizedStatus, replica_counts
from trainwatch_watcher.kinds.objects import JobObject, podgroup_phase, read_object

DEFAULT_MAX_RETRY = 3  # spec.maxRetry default

# phase -> (normalized phase, sub-phase, terminal); Pending is decided below (Queued or Scheduling).
_PHASES: dict[str, tuple[Phase, SubPhase | None, bool]] = {
    "": (Phase.PENDING, SubPhase.CREATED, False),
    "Running": (Phase.RUNNING, None, False),
    "Restarting": (Phase.RESTARTING, None, False),
    "Completing": (Phase.SUCCEEDED, SubPhase.FINISHING, False),
    "Completed": (Phase.SUCCEEDED, None, True),
    "Aborting": (Phase.SUSPENDED, SubPhase.ABORTING, False),
    "Aborted": (Phase.SUSPENDED, None, False),
    "Terminating": (Phase.FAILED, SubPhase.FINISHING, False),
    "Terminated": (Phase.FAILED, None, True),
    "Failed": (Phase.FAILED, None, True),
}
_POD_COUNTERS = ("pending", "running", "succeeded", "failed", "terminating", "unknown")


def normalize(
    obj: Mapping[str, Any],
    previous: NormalizedStatus | None,
    related: Mapping[str, Any] | None = None,
) -> NormalizedStatus:
    """Normalize a Volcano Job. ``related`` may be its PodGroup (``<job-name>-<job-uid>``)."""
    job = read_object(obj)
    state = mapping_field(job.status, "state", "status")
    phase_text = enum_text(state, "phase")
    entered_at = _phase_entry_times(job)
    state_time = parse_time(state.get("lastTransitionTime"))
    retry_count = count(job.status, "retryCount")
    replicas = _read_tasks(job)

    def result(phase: Phase, **kwargs: Any) -> NormalizedStatus:
        return make_status(
            job,
            phase,
            started_at=entered_at.get("Running"),
            replicas=replicas,
            restart_count=retry_count,
            queue=queue_name(job, job.spec.get("queue")),
            **kwargs,
        )

    if phase_text is None or (phase_text not in _PHASES and phase_text != "Pending"):
        return result(Phase.UNKNOWN, source=f"state.phase:{phase_text}")
    source = f"state.phase:{phase_text}" if phase_text else None
    transition_time = entered_at.get(phase_text) or state_time
    if phase_text == "Pending":
        return result(
            Phase.PENDING,
            sub_phase=_pending_sub_phase(job, related),
            source=source,
            source_transition_time=transition_time,
        )

    phase, sub_phase, terminal = _PHASES[phase_text]
    reason = text(state, "reason")
    if reason is None and phase_text == "Terminated":
        reason = "Terminated"
    if reason is None and phase_text == "Failed":
        max_retry = optional_count(job.spec, "maxRetry")
        exhausted = retry_count >= (DEFAULT_MAX_RETRY if max_retry is None else max_retry)
        # The other way into Failed: every pod finished without reaching minSuccess.
        reason = "MaxRetryExceeded" if exhausted else "MinSuccessNotReached"
    return result(
        phase,
        sub_phase=sub_phase,
        terminal=terminal,
        reason=reason,
        message=text(state, "message"),
        source=source,
        source_transition_time=transition_time,
        finished_at=transition_time if terminal else None,
    )


def _pending_sub_phase(job: JobObject, related: Mapping[str, Any] | None) -> SubPhase:
    """Queued while the PodGroup waits for resources, Scheduling once it is admitted (Inqueue).

    The controller creates no pods while the PodGroup is Pending, so without the PodGroup the
    existence of pods tells the two apart.
    """
    gang = podgroup_phase(related)
    if gang is not None:
        return SubPhase.QUEUED if gang == "Pending" else SubPhase.SCHEDULING
    pods = sum(count(job.status, key) for key in _POD_COUNTERS)
    return SubPhase.SCHEDULING if pods > 0 else SubPhase.QUEUED


def _phase_entry_times(job: JobObject) -> dict[str, datetime]:
    """When each phase was last entered; re-entering a phase moves its entry to the end."""
    times: dict[str, datetime] = {}
    for entry in mapping_items(job.status, "conditions", "status"):
        phase, at = entry.get("status"), parse_time(entry.get("lastTransitionTime"))
        if isinstance(phase, str) and at is not None and (phase not in times or at >= times[phase]):
            times[phase] = at
    return times


def _read_tasks(job: JobObject) -> dict[str, ReplicaCounts]:
    """Pod counts per task from ``taskStatusCount`` ({task: {phase: {PodPhase: n}}})."""
    desired: dict[str, int] = {}
    tasks = job.spec.get("tasks")
    if isinstance(tasks, list):
        for task in tasks:
            if isinstance(task, Mapping) and (name := text(task, "name")) is not None:
                wanted = optional_count(task, "replicas")
                desired[name] = 1 if wanted is None else wanted
    counts = mapping_field(job.status, "taskStatusCount", "status")
    replicas: dict[str, ReplicaCounts] = {}
    for name in [*desired, *(n for n in counts if n not in desired)]:
        entry = counts.get(name)
        if entry is None:
            entry = {}
        if not isinstance(entry, Mapping):
            raise MalformedObject(f"status.taskStatusCount.{name} is a {type(entry).__name__}")
        by_pod_phase = mapping_field(entry, "phase", f"status.taskStatusCount.{name}")
        replicas[str(name)] = replica_counts(
            desired.get(name),
            count(by_pod_phase, "Pending") + count(by_pod_phase, "Running"),
            None,
            count(by_pod_phase, "Succeeded"),
            count(by_pod_phase, "Failed"),
        )
    return replicas
