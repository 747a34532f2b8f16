"""Kubeflow Training Operator v1 kinds: every row of §3.3 "Kubeflow v1", for each of the six kinds."""

from __future__ import annotations

from typing import Any

import pytest
from kinds_testkit import KUBEFLOW_V1_KINDS, KUEUE, at, kubeflow_condition, kubeflow_job, podgroup, ts

from trainwatch_common.events.jobs import Phase, ReplicaCounts, SubPhase
from trainwatch_watcher.kinds import kubeflow_v1
from trainwatch_watcher.kinds.model import NormalizedStatus

KIND_IDS = [k[0] for k in KUBEFLOW_V1_KINDS]


def job_of(
    spec: tuple[str, str, tuple[str, ...]], status: dict[str, Any] | None, **kwargs: Any
) -> dict[str, Any]:
    kind, spec_key, roles = spec
    return kubeflow_job(kind, status, spec_key=spec_key, roles=roles, **kwargs)


def replica_statuses(roles: tuple[str, ...], **per_role: int) -> dict[str, Any]:
    """replicaStatuses with ``per_role`` counts on the last role; zero counts omitted (omitempty)."""
    statuses: dict[str, Any] = {role: {} for role in roles}
    statuses[roles[-1]] = {k: v for k, v in per_role.items() if v}
    return statuses


@pytest.fixture(params=KUBEFLOW_V1_KINDS, ids=KIND_IDS)
def kind_spec(request: pytest.FixtureRequest) -> tuple[str, str, tuple[str, ...]]:
    spec: tuple[str, str, tuple[str, ...]] = request.param
    return spec


def test_failed_is_terminal_and_running_false_is_ignored(kind_spec: tuple[str, str, tuple[str, ...]]) -> None:
    kind, _, roles = kind_spec
    status = {
        "conditions": [
            kubeflow_condition("Created", "True", kind, minutes=0),
            # Trap: Running stays in the list with status False after the job finishes.
            kubeflow_condition("Running", "False", kind, minutes=9),
            kubeflow_condition("Failed", "True", kind, minutes=9),
        ],
        "replicaStatuses": replica_statuses(roles, failed=1),
        "startTime": ts(1),
        "completionTime": ts(9),
    }
    result = kubeflow_v1.normalize(job_of(kind_spec, status), None)
    assert (result.phase, result.terminal) == (Phase.FAILED, True)
    assert result.reason == f"{kind}Failed"
    assert result.finished_at == at(9)  # completionTime is set on failure too
    assert result.started_at == at(1)


def test_succeeded_is_terminal(kind_spec: tuple[str, str, tuple[str, ...]]) -> None:
    kind, _, roles = kind_spec
    status = {
        "conditions": [
            kubeflow_condition("Created", "True", kind, minutes=0),
            kubeflow_condition("Running", "False", kind, minutes=8),
            kubeflow_condition("Succeeded", "True", kind, minutes=8),
        ],
        "replicaStatuses": replica_statuses(roles, succeeded=2),
        "startTime": ts(1),
        "completionTime": ts(8),
    }
    result = kubeflow_v1.normalize(job_of(kind_spec, status), None)
    assert (result.phase, result.terminal, result.source) == (Phase.SUCCEEDED, True, "condition:Succeeded")
    assert result.finished_at == at(8)


@pytest.mark.parametrize(
    ("failed_at", "succeeded_at", "expected"),
    [(9, 8, Phase.FAILED), (8, 9, Phase.SUCCEEDED), (8, 8, Phase.FAILED)],
)
def test_failed_and_succeeded_both_true_take_the_later(
    failed_at: int, succeeded_at: int, expected: Phase
) -> None:
    status = {
        "conditions": [
            kubeflow_condition("Failed", "True", minutes=failed_at),
            kubeflow_condition("Succeeded", "True", minutes=succeeded_at),
        ]
    }
    assert kubeflow_v1.normalize(kubeflow_job(status=status), None).phase is expected


def test_suspended_is_suspended(kind_spec: tuple[str, str, tuple[str, ...]]) -> None:
    kind, _, _ = kind_spec
    status = {
        "conditions": [
            kubeflow_condition("Created", "True", kind, minutes=0),
            kubeflow_condition("Running", "False", kind, reason=f"{kind}Suspended", minutes=5),
            kubeflow_condition("Suspended", "True", kind, minutes=5),
        ],
        "replicaStatuses": replica_statuses(kind_spec[2]),
    }
    result = kubeflow_v1.normalize(job_of(kind_spec, status, run_policy={"suspend": True}), None)
    assert (result.phase, result.reason) == (Phase.SUSPENDED, f"{kind}Suspended")


def test_suspended_under_kueue_is_queued() -> None:
    status = {
        "conditions": [
            kubeflow_condition("Created", "True", minutes=0),
            kubeflow_condition("Suspended", "True"),
        ]
    }
    job = kubeflow_job(status=status, labels=KUEUE, run_policy={"suspend": True})
    result = kubeflow_v1.normalize(job, None)
    assert (result.phase, result.sub_phase, result.queue) == (Phase.PENDING, SubPhase.QUEUED, "team-a-queue")


def test_kueue_run_policy_suspend_is_queued_before_the_condition_appears() -> None:
    job = kubeflow_job(
        status={"conditions": [kubeflow_condition("Created", "True", minutes=0)]},
        labels=KUEUE,
        run_policy={"suspend": True},
    )
    result = kubeflow_v1.normalize(job, None)
    assert (result.phase, result.sub_phase, result.source) == (
        Phase.PENDING,
        SubPhase.QUEUED,
        "spec.runPolicy.suspend",
    )


def test_resumed_job_with_suspended_false_is_running(kind_spec: tuple[str, str, tuple[str, ...]]) -> None:
    kind, _, roles = kind_spec
    status = {
        "conditions": [
            kubeflow_condition("Created", "True", kind, minutes=0),
            kubeflow_condition("Suspended", "False", kind, reason=f"{kind}Resumed", minutes=6),
            kubeflow_condition("Running", "True", kind, minutes=7),
        ],
        "replicaStatuses": replica_statuses(roles, active=2),
        "startTime": ts(6),
    }
    assert kubeflow_v1.normalize(job_of(kind_spec, status), None).phase is Phase.RUNNING


def test_restarting_counts_each_entry(kind_spec: tuple[str, str, tuple[str, ...]]) -> None:
    kind, _, roles = kind_spec
    created = kubeflow_condition("Created", "True", kind, minutes=0)
    # Running and Restarting replace each other in the list (one is removed, not set False).
    running = {
        "conditions": [created, kubeflow_condition("Running", "True", kind, minutes=2)],
        "replicaStatuses": replica_statuses(roles, active=2),
    }
    restarting = {
        "conditions": [created, kubeflow_condition("Restarting", "True", kind, minutes=4)],
        "replicaStatuses": replica_statuses(roles, active=1, failed=1),
    }

    first = kubeflow_v1.normalize(job_of(kind_spec, running), None)
    assert (first.phase, first.restart_count) == (Phase.RUNNING, 0)
    second = kubeflow_v1.normalize(job_of(kind_spec, restarting), first)
    assert (second.phase, second.restart_count, second.source) == (
        Phase.RESTARTING,
        1,
        "condition:Restarting",
    )
    assert second.reason == f"{kind}Restarting"
    again = kubeflow_v1.normalize(job_of(kind_spec, restarting), second)
    assert again.restart_count == 1  # still the same restart
    back = kubeflow_v1.normalize(job_of(kind_spec, running), again)
    assert (back.phase, back.restart_count) == (Phase.RUNNING, 1)
    third = kubeflow_v1.normalize(job_of(kind_spec, restarting), back)
    assert third.restart_count == 2


def test_first_sight_of_restarting_counts_one() -> None:
    status = {
        "conditions": [
            kubeflow_condition("Created", "True", minutes=0),
            kubeflow_condition("Restarting", "True"),
        ]
    }
    assert kubeflow_v1.normalize(kubeflow_job(status=status), None).restart_count == 1


def test_running(kind_spec: tuple[str, str, tuple[str, ...]]) -> None:
    kind, _, roles = kind_spec
    status = {
        "conditions": [
            kubeflow_condition("Created", "True", kind, minutes=0),
            kubeflow_condition("Running", "True", kind, minutes=2),
        ],
        "replicaStatuses": replica_statuses(roles, active=2),
        "startTime": ts(1),
    }
    result = kubeflow_v1.normalize(job_of(kind_spec, status), None)
    assert (result.phase, result.source) == (Phase.RUNNING, "condition:Running")
    assert result.replicas[roles[-1]].active == 2
    assert set(result.replicas) == set(roles)


def test_created_only_is_pending_created(kind_spec: tuple[str, str, tuple[str, ...]]) -> None:
    kind, _, _ = kind_spec
    status = {"conditions": [kubeflow_condition("Created", "True", kind, minutes=0)]}
    result = kubeflow_v1.normalize(job_of(kind_spec, status), None)
    assert (result.phase, result.sub_phase) == (Phase.PENDING, SubPhase.CREATED)


def test_no_conditions_is_pending_created() -> None:
    statuses: list[dict[str, Any] | None] = [None, {}, {"conditions": []}]
    for status in statuses:
        result = kubeflow_v1.normalize(kubeflow_job(status=status), None)
        assert (result.phase, result.sub_phase) == (Phase.PENDING, SubPhase.CREATED)


def test_created_with_pending_pods_is_scheduling() -> None:
    status = {
        "conditions": [kubeflow_condition("Created", "True", minutes=0)],
        "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 2}},
        "startTime": ts(1),
    }
    result = kubeflow_v1.normalize(kubeflow_job(status=status), None)
    assert (result.phase, result.sub_phase) == (Phase.PENDING, SubPhase.SCHEDULING)


def test_gang_delayed_job_with_moving_last_reconcile_time_is_queued() -> None:
    # The operator creates no pods while the PodGroup is pending and stamps lastReconcileTime.
    status = {
        "conditions": [kubeflow_condition("Created", "True", minutes=0)],
        "replicaStatuses": {"Master": {}, "Worker": {}},
        "lastReconcileTime": ts(3),
    }
    job = kubeflow_job(
        status=status, run_policy={"schedulingPolicy": {"minAvailable": 3, "queue": "research"}}
    )
    result = kubeflow_v1.normalize(job, None)
    assert (result.phase, result.sub_phase, result.source) == (
        Phase.PENDING,
        SubPhase.QUEUED,
        "status.lastReconcileTime",
    )
    assert result.queue == "research"


def test_stale_last_reconcile_time_before_a_resume_is_not_queued() -> None:
    status = {
        "conditions": [kubeflow_condition("Created", "True", minutes=0)],
        "lastReconcileTime": ts(3),
        "startTime": ts(5),
    }
    assert kubeflow_v1.normalize(kubeflow_job(status=status), None).sub_phase is SubPhase.CREATED


@pytest.mark.parametrize(
    ("phase", "expected"),
    [("Pending", SubPhase.QUEUED), (None, SubPhase.QUEUED), ("Inqueue", SubPhase.SCHEDULING)],
)
def test_podgroup_decides_queued_or_scheduling(phase: str | None, expected: SubPhase) -> None:
    status = {"conditions": [kubeflow_condition("Created", "True", minutes=0)]}
    result = kubeflow_v1.normalize(kubeflow_job(status=status), None, podgroup(phase))
    assert (result.phase, result.sub_phase) == (Phase.PENDING, expected)


def test_unknown_condition_types_only_is_unknown() -> None:
    # arena's fork writes a non-upstream "Queuing" type; we do not guess what it means.
    status = {
        "conditions": [
            {"type": "Queuing", "status": "True", "reason": "Queuing", "lastTransitionTime": ts(1)}
        ]
    }
    assert kubeflow_v1.normalize(kubeflow_job(status=status), None).phase is Phase.UNKNOWN


def test_only_false_conditions_is_unknown() -> None:
    status = {
        "conditions": [
            kubeflow_condition("Created", "False", minutes=0),
            kubeflow_condition("Running", "Unknown"),
        ]
    }
    assert kubeflow_v1.normalize(kubeflow_job(status=status), None).phase is Phase.UNKNOWN


def test_mpijob_v1_doubled_reason_is_kept_as_text() -> None:
    status = {
        "conditions": [
            kubeflow_condition("Created", "True", "MPIJob", minutes=0),
            kubeflow_condition("Failed", "True", "MPIJob", reason="MPIJobMPIJobFailed", minutes=4),
        ]
    }
    job = kubeflow_job("MPIJob", status, spec_key="mpiReplicaSpecs", roles=("Launcher", "Worker"))
    result = kubeflow_v1.normalize(job, None)
    assert (result.phase, result.reason) == (Phase.FAILED, "MPIJobMPIJobFailed")


def test_replicas_take_desired_from_the_spec_and_zero_counts_from_empty_entries() -> None:
    status = {
        "conditions": [kubeflow_condition("Running", "True")],
        "replicaStatuses": {"Master": {"active": 1, "selector": "x"}, "Worker": {}},
    }
    result = kubeflow_v1.normalize(kubeflow_job(status=status), None)
    assert result.replicas == {
        "Master": ReplicaCounts(desired=1, active=1),
        "Worker": ReplicaCounts(desired=2, active=0),
    }


def test_restart_count_is_carried_through_other_phases() -> None:
    previous = NormalizedStatus(phase=Phase.RESTARTING, restart_count=3)
    status = {"conditions": [kubeflow_condition("Succeeded", "True")]}
    assert kubeflow_v1.normalize(kubeflow_job(status=status), previous).restart_count == 3
