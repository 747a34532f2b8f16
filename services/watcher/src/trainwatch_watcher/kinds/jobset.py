"""JobSet ``jobset.x-k8s.io/v1alpha2`` (reference §2.4; mapping §3.3 "JobSet").

Also read, as a companion object, by the TrainJob normalizer: a TrainJob's restarts are visible
only on the JobSet of the same name.

Restarts: JobSet ≥ v0.12 flags them with ``RestartingJobSet=True``; older releases only count them
in ``status.restarts``. When the condition type is present at all (any status) the controller
writes it, so it is trusted; otherwise a rise of ``restarts`` is read as a restart in progress
until every replicated Job is ready (or done) again. The replica counts here are *child Jobs*
per replicatedJob, not pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainwatch_common.events.jobs import Phase, ReplicaCounts, SubPhase
from trainwatch_watcher.kinds.common_rules import make_status, queue_name, restart_in_progress
from trainwatch_watcher.kinds.fields import count, enum_text, flag, mapping_items, optional_count, text
from trainwatch_watcher.kinds.model import (
    HEURISTIC_SOURCE_PREFIX,
    MalformedObject,
    NormalizedStatus,
    replica_counts,
)
from trainwatch_watcher.kinds.objects import (
    Condition,
    JobObject,
    has_condition,
    held_by_suspension,
    read_object,
    true_condition,
)

RESTARTING = "RestartingJobSet"
RESTART_SOURCE = HEURISTIC_SOURCE_PREFIX + "status.restarts"


@dataclass(frozen=True, slots=True)
class JobSetRestarts:
    """What a JobSet says about restarts: its flag (if it has one), its counter, and recovery."""

    flag: Condition | None
    has_flag: bool
    restarts: int
    back_up: bool

    def in_progress(self, previous: NormalizedStatus | None) -> bool:
        if self.has_flag:
            return self.flag is not None
        return restart_in_progress(self.restarts, previous, self.back_up)


def read_replicated_jobs(
    job: JobObject, status_key: str = "replicatedJobsStatus"
) -> dict[str, ReplicaCounts]:
    """Child-Job counts per replicated job; desired from ``spec.replicatedJobs[].replicas``."""
    desired: dict[str, int] = {}
    spec_jobs = job.spec.get("replicatedJobs")
    if isinstance(spec_jobs, list):
        for spec in spec_jobs:
            if isinstance(spec, Mapping) and (name := text(spec, "name")) is not None:
                wanted = optional_count(spec, "replicas")
                desired[name] = 1 if wanted is None else wanted
    replicas: dict[str, ReplicaCounts] = {}
    for entry in mapping_items(job.status, status_key, "status"):
        name = text(entry, "name")
        if name is None:
            continue
        replicas[name] = replica_counts(
            desired.get(name),
            count(entry, "active"),
            count(entry, "ready"),
            count(entry, "succeeded"),
            count(entry, "failed"),
        )
    return replicas


def all_replicated_jobs_up(replicas: Mapping[str, ReplicaCounts]) -> bool:
    """Every replicated job has all its child Jobs ready or done, and none failed."""
    if not replicas:
        return False
    for counts in replicas.values():
        done = (counts.ready or 0) + counts.succeeded
        wanted = counts.desired if counts.desired is not None else 1
        if counts.failed > 0 or done < wanted:
            return False
    return True


def read_restarts(
    job: JobObject, conditions: list[Condition], replicas: Mapping[str, ReplicaCounts]
) -> JobSetRestarts:
    return JobSetRestarts(
        flag=true_condition(conditions, RESTARTING),
        has_flag=has_condition(conditions, RESTARTING),
        restarts=count(job.status, "restarts"),
        back_up=all_replicated_jobs_up(replicas),
    )


def read_companion(related: object) -> JobSetRestarts | None:
    """Restart facts of a JobSet handed in as a companion; None if it is absent or unreadable."""
    if not isinstance(related, Mapping) or related.get("kind", "JobSet") != "JobSet":
        return None
    try:
        job = read_object(related)
        return read_restarts(job, job.conditions(), read_replicated_jobs(job))
    except MalformedObject:
        return None


def normalize(
    obj: Mapping[str, Any],
    previous: NormalizedStatus | None,
    related: Mapping[str, Any] | None = None,
) -> NormalizedStatus:
    """Normalize a JobSet. ``related`` is unused."""
    job = read_object(obj)
    conditions = job.conditions()
    replicas = read_replicated_jobs(job)
    restarts = read_restarts(job, conditions, replicas)
    terminal_state = enum_text(job.status, "terminalState")

    def result(phase: Phase, **kwargs: Any) -> NormalizedStatus:
        return make_status(
            job,
            phase,
            replicas=replicas,
            restart_count=restarts.restarts,
            restart_counter=restarts.restarts,
            queue=queue_name(job),
            **kwargs,
        )

    for phase, state, condition_type in (
        (Phase.FAILED, "Failed", "Failed"),
        (Phase.SUCCEEDED, "Completed", "Completed"),
    ):
        condition = true_condition(conditions, condition_type)
        if condition is not None or terminal_state == state:
            return result(
                phase,
                terminal=True,
                condition=condition,
                source=None if condition is not None else f"terminalState:{state}",
                finished_at=condition.last_transition_time if condition is not None else None,
            )
    if terminal_state != "":
        # A terminal state this code does not know (or not a string): the outcome is unknown.
        return result(Phase.UNKNOWN, source=f"terminalState:{terminal_state}")

    if (held := held_by_suspension(job, conditions, suspend_requested=flag(job.spec, "suspend"))) is not None:
        return result(held.phase, sub_phase=held.sub_phase, condition=held.condition, source=held.source)
    if restarts.in_progress(previous):
        return result(
            Phase.RESTARTING,
            condition=restarts.flag,
            source=None if restarts.flag is not None else RESTART_SOURCE,
        )
    if any((r.ready or 0) > 0 for r in replicas.values()):
        return result(Phase.RUNNING, source="replicatedJobsStatus.ready")
    if any(r.active > 0 for r in replicas.values()):
        return result(Phase.PENDING, sub_phase=SubPhase.SCHEDULING, source="replicatedJobsStatus.active")
    return result(Phase.PENDING)
