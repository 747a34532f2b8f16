"""batch/v1 Job (reference §2.1, mapping §3.3 "batch/v1 Job").

A Job has no Running flag and no restart flag: Running is read from ``ready`` pods and a restart
from ``status.failed`` going up while the Job is not finished (``common_rules.restart_in_progress``).
``restart_count`` is ``status.failed``: the number of pod failures the controller has seen, as the
reference proposes; for a Job that ends Failed it includes the failure that was not retried.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainwatch_common.events.jobs import Phase, SubPhase
from trainwatch_watcher.kinds.common_rules import make_status, queue_name, restart_in_progress
from trainwatch_watcher.kinds.fields import count, flag, optional_count, parse_time
from trainwatch_watcher.kinds.model import HEURISTIC_SOURCE_PREFIX, NormalizedStatus, replica_counts
from trainwatch_watcher.kinds.objects import (
    JobObject,
    held_by_suspension,
    read_object,
    true_condition,
)

ROLE = "pods"
RESTART_SOURCE = HEURISTIC_SOURCE_PREFIX + "status.failed"


def normalize(
    obj: Mapping[str, Any],
    previous: NormalizedStatus | None,
    related: Mapping[str, Any] | None = None,
) -> NormalizedStatus:
    """Normalize a batch/v1 Job. ``related`` is unused (a Job has no companion object)."""
    job = read_object(obj)
    status = job.status
    conditions = job.conditions()
    active = count(status, "active")
    # nil (not 0) when the JobReadyPods feature is off (clusters before 1.24).
    ready = optional_count(status, "ready")
    succeeded = count(status, "succeeded")
    failed = count(status, "failed")
    parallelism = optional_count(job.spec, "parallelism")
    if parallelism is None:
        parallelism = 1  # the API server default
    replicas = {ROLE: replica_counts(parallelism, active, ready, succeeded, failed)}

    def result(phase: Phase, **kwargs: Any) -> NormalizedStatus:
        return make_status(
            job,
            phase,
            started_at=parse_time(status.get("startTime")),
            replicas=replicas,
            restart_count=failed,
            restart_counter=failed,
            queue=queue_name(job),
            **kwargs,
        )

    # Failed and Complete are added only once all pods are gone (from v1.31); before that the
    # outcome shows as FailureTarget / SuccessCriteriaMet, reported as finishing (terminal=False).
    if (condition := true_condition(conditions, "Failed")) is not None:
        return result(
            Phase.FAILED, terminal=True, condition=condition, finished_at=condition.last_transition_time
        )
    if (condition := true_condition(conditions, "Complete")) is not None:
        # completionTime is set only on success; fall back to the condition for odd writers.
        finished = parse_time(status.get("completionTime")) or condition.last_transition_time
        return result(Phase.SUCCEEDED, terminal=True, condition=condition, finished_at=finished)
    if (condition := true_condition(conditions, "FailureTarget")) is not None:
        return result(Phase.FAILED, sub_phase=SubPhase.FINISHING, condition=condition)
    if (condition := true_condition(conditions, "SuccessCriteriaMet")) is not None:
        return result(Phase.SUCCEEDED, sub_phase=SubPhase.FINISHING, condition=condition)

    if (held := held_by_suspension(job, conditions, suspend_requested=flag(job.spec, "suspend"))) is not None:
        return result(held.phase, sub_phase=held.sub_phase, condition=held.condition, source=held.source)

    if restart_in_progress(failed, previous, _all_pods_up(job, active, ready, succeeded, parallelism)):
        return result(
            Phase.RESTARTING,
            source=RESTART_SOURCE,
            message=f"{failed} failed pod(s) so far; the Job controller is re-creating pods",
        )
    if active > 0 and (ready is None or ready > 0):
        # Without the ready field (old clusters) an active pod is the best sign of running.
        return result(Phase.RUNNING, source="status.ready" if ready is not None else "status.active")
    if active > 0:
        return result(Phase.PENDING, sub_phase=SubPhase.SCHEDULING, source="status.active")
    return result(Phase.PENDING, sub_phase=SubPhase.CREATED)


def _all_pods_up(job: JobObject, active: int, ready: int | None, succeeded: int, parallelism: int) -> bool:
    """Every pod the Job wants now exists and is ready: a restart, if any, is over.

    The Job wants min(parallelism, completions - succeeded) pods at a time (parallelism alone for
    work-queue Jobs without completions).
    """
    wanted = parallelism
    completions = optional_count(job.spec, "completions")
    if completions is not None:
        wanted = min(wanted, max(completions - succeeded, 0))
    if active == 0 or active < wanted:
        return False
    return ready is None or ready >= active
