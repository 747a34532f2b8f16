"""MPIJob v2beta1: the Kubeflow rows without a Restarting condition, and the launcher-failure heuristic."""

from __future__ import annotations

from typing import Any

from kinds_testkit import KUEUE, at, kubeflow_condition, mpi_v2_job, ts

from trainwatch_common.events.jobs import Phase, SubPhase
from trainwatch_watcher.kinds import mpi_v2beta1


def cond(type_: str, status: str, minutes: float = 1, reason: str = "") -> dict[str, Any]:
    return kubeflow_condition(type_, status, "MPIJob", reason=reason, minutes=minutes, name="pi")


def running_status(launcher: dict[str, int], workers: int = 2) -> dict[str, Any]:
    return {
        "conditions": [cond("Created", "True", 0), cond("Running", "True", 2)],
        "replicaStatuses": {"Launcher": launcher, "Worker": {"active": workers} if workers else {}},
        "startTime": ts(1),
    }


def test_readme_success_example() -> None:
    # mpi-operator README: Running=False is left behind next to Succeeded=True.
    status = {
        "completionTime": "2019-07-09T22:17:06Z",
        "conditions": [
            {
                "type": "Created",
                "status": "True",
                "reason": "MPIJobCreated",
                "message": "MPIJob default/tensorflow-benchmarks is created.",
                "lastTransitionTime": "2019-07-09T22:15:51Z",
            },
            {
                "type": "Running",
                "status": "False",
                "reason": "MPIJobRunning",
                "message": "MPIJob default/tensorflow-benchmarks is running.",
                "lastTransitionTime": "2019-07-09T22:17:06Z",
            },
            {
                "type": "Succeeded",
                "status": "True",
                "reason": "MPIJobSucceeded",
                "message": "MPIJob default/tensorflow-benchmarks successfully completed.",
                "lastTransitionTime": "2019-07-09T22:17:06Z",
            },
        ],
        "replicaStatuses": {"Launcher": {"succeeded": 1}, "Worker": {}},
        "startTime": "2019-07-09T22:15:51Z",
    }
    result = mpi_v2beta1.normalize(mpi_v2_job(status), None)
    assert (result.phase, result.terminal, result.reason) == (Phase.SUCCEEDED, True, "MPIJobSucceeded")
    assert result.finished_at is not None
    assert result.finished_at.isoformat() == "2019-07-09T22:17:06+00:00"


def test_launcher_failure_reason_is_copied_and_terminal() -> None:
    status = {
        "conditions": [
            cond("Created", "True", 0),
            cond("Running", "True", 2),
            cond("Failed", "True", 9, reason="BackoffLimitExceeded/Error"),
        ],
        "replicaStatuses": {"Launcher": {"failed": 7}, "Worker": {"active": 2}},
        "startTime": ts(1),
        "completionTime": ts(9),
    }
    result = mpi_v2beta1.normalize(mpi_v2_job(status), None)
    assert (result.phase, result.terminal, result.reason) == (
        Phase.FAILED,
        True,
        "BackoffLimitExceeded/Error",
    )
    assert result.finished_at == at(9)
    assert result.restart_count == 7


def test_evicted_worker_fails_the_job() -> None:
    status = {
        "conditions": [cond("Created", "True", 0), cond("Failed", "True", 5, reason="MPIJobEvicted")],
        "replicaStatuses": {"Launcher": {}, "Worker": {"failed": 1}},
    }
    result = mpi_v2beta1.normalize(mpi_v2_job(status), None)
    assert (result.phase, result.reason) == (Phase.FAILED, "MPIJobEvicted")


def test_launcher_failure_increase_is_restarting_although_running_stays_true() -> None:
    running = mpi_v2beta1.normalize(mpi_v2_job(running_status({"active": 1})), None)
    assert running.phase is Phase.RUNNING

    # The launcher pod failed; its Job re-creates it. Running=True is not withdrawn.
    failed = mpi_v2beta1.normalize(mpi_v2_job(running_status({"failed": 1})), running)
    assert failed.phase is Phase.RESTARTING
    assert failed.source == "heuristic:replicaStatuses.Launcher.failed"
    assert (failed.restart_count, failed.restart_counter) == (1, 1)

    still = mpi_v2beta1.normalize(mpi_v2_job(running_status({"failed": 1})), failed)
    assert still.phase is Phase.RESTARTING

    back = mpi_v2beta1.normalize(mpi_v2_job(running_status({"active": 1, "failed": 1})), still)
    assert (back.phase, back.restart_count) == (Phase.RUNNING, 1)


def test_first_sight_with_failed_launcher_pods_and_no_running_launcher_is_restarting() -> None:
    assert mpi_v2beta1.normalize(mpi_v2_job(running_status({"failed": 2})), None).phase is Phase.RESTARTING


def test_coalesced_failure_with_launcher_running_again_is_running() -> None:
    previous = mpi_v2beta1.normalize(mpi_v2_job(running_status({"active": 1})), None)
    result = mpi_v2beta1.normalize(mpi_v2_job(running_status({"active": 1, "failed": 1})), previous)
    assert result.phase is Phase.RUNNING


def test_suspended_and_kueue_queued() -> None:
    status = {
        "conditions": [
            cond("Created", "True", 0),
            cond("Running", "False", 3, reason="MPIJobSuspended"),
            cond("Suspended", "True", 3, reason="MPIJobSuspended"),
        ]
    }
    assert mpi_v2beta1.normalize(mpi_v2_job(status), None).phase is Phase.SUSPENDED
    queued = mpi_v2beta1.normalize(mpi_v2_job(status, labels=KUEUE, run_policy={"suspend": True}), None)
    assert (queued.phase, queued.sub_phase) == (Phase.PENDING, SubPhase.QUEUED)


def test_created_and_scheduling() -> None:
    created = mpi_v2beta1.normalize(mpi_v2_job({"conditions": [cond("Created", "True", 0)]}), None)
    assert (created.phase, created.sub_phase) == (Phase.PENDING, SubPhase.CREATED)
    # Workers counted as active only once Running; the launcher Job waits for them.
    scheduling = {"conditions": [cond("Created", "True", 0)], "replicaStatuses": {"Worker": {"active": 1}}}
    result = mpi_v2beta1.normalize(mpi_v2_job(scheduling), None)
    assert (result.phase, result.sub_phase) == (Phase.PENDING, SubPhase.SCHEDULING)
