"""Kubeflow Trainer v2 ``trainer.kubeflow.org/v1alpha1`` TrainJob (reference §2.4; §3.3 "TrainJob").

A TrainJob has only ``Complete``, ``Failed`` and ``Suspended`` conditions and no timestamps; the
rest is read from ``jobsStatus`` (child-Job counts per step, copied from its JobSet). Restarts are
visible only on the JobSet of the same name, which the watcher may pass as ``related``; without it
the restart row cannot fire and the restart counters are carried over from ``previous`` so they
never appear to drop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainwatch_common.events.jobs import Phase, ReplicaCounts, SubPhase
from trainwatch_watcher.kinds import jobset
from trainwatch_watcher.kinds.common_rules import make_status, queue_name
from trainwatch_watcher.kinds.fields import flag
from trainwatch_watcher.kinds.model import HEURISTIC_SOURCE_PREFIX, NormalizedStatus
from trainwatch_watcher.kinds.objects import held_by_suspension, read_object, true_condition

# Steps of the built-in runtimes that run the training itself (torch/jax: node; MPI: launcher too).
TRAINER_STEPS = frozenset({"node", "launcher"})
INITIALIZER_SUFFIX = "initializer"  # dataset-initializer, model-initializer
RESTART_SOURCE = HEURISTIC_SOURCE_PREFIX + "jobset.status.restarts"


def normalize(
    obj: Mapping[str, Any],
    previous: NormalizedStatus | None,
    related: Mapping[str, Any] | None = None,
) -> NormalizedStatus:
    """Normalize a TrainJob. ``related`` may be its JobSet (same name and namespace)."""
    job = read_object(obj)
    conditions = job.conditions()
    steps = jobset.read_replicated_jobs(job, status_key="jobsStatus")
    companion = jobset.read_companion(related)
    if companion is not None:
        restart_count = restart_counter = companion.restarts
    else:
        restart_count = previous.restart_count if previous is not None else 0
        restart_counter = previous.restart_counter if previous is not None else 0

    def result(phase: Phase, **kwargs: Any) -> NormalizedStatus:
        return make_status(
            job,
            phase,
            replicas=steps,
            restart_count=restart_count,
            restart_counter=restart_counter,
            queue=queue_name(job),
            **kwargs,
        )

    if (condition := true_condition(conditions, "Failed")) is not None:
        return result(
            Phase.FAILED, terminal=True, condition=condition, finished_at=condition.last_transition_time
        )
    if (condition := true_condition(conditions, "Complete")) is not None:
        return result(
            Phase.SUCCEEDED, terminal=True, condition=condition, finished_at=condition.last_transition_time
        )
    if (held := held_by_suspension(job, conditions, suspend_requested=flag(job.spec, "suspend"))) is not None:
        return result(held.phase, sub_phase=held.sub_phase, condition=held.condition, source=held.source)

    if companion is not None and companion.in_progress(previous):
        flag_condition = companion.flag
        return result(
            Phase.RESTARTING,
            condition=flag_condition,
            source="jobset.condition:RestartingJobSet" if flag_condition is not None else RESTART_SOURCE,
        )
    if _trainer_running(steps):
        return result(Phase.RUNNING, source="jobsStatus.ready")
    if any(name.endswith(INITIALIZER_SUFFIX) and s.active > 0 for name, s in steps.items()):
        return result(Phase.PENDING, sub_phase=SubPhase.INITIALIZING, source="jobsStatus.active")
    if any(s.active > 0 for s in steps.values()):
        return result(Phase.PENDING, sub_phase=SubPhase.SCHEDULING, source="jobsStatus.active")
    return result(Phase.PENDING, sub_phase=SubPhase.CREATED)


def _trainer_running(steps: Mapping[str, ReplicaCounts]) -> bool:
    """Every active trainer step has all its child Jobs ready, and at least one is active.

    "ready" counts child Jobs whose ready+completed pods reach the expected number, so one ready
    ``node`` Job means every node pod runs.
    """
    active = [s for name, s in steps.items() if name in TRAINER_STEPS and s.active > 0]
    return bool(active) and all((s.ready or 0) >= s.active for s in active)
