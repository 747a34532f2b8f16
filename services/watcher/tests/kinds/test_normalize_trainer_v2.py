"""TrainJob and JobSet: every row of §3.3 "TrainJob" and "JobSet"."""

from __future__ import annotations

from typing import Any

import pytest
from kinds_testkit import KUEUE, at, jobset, meta_condition, step, train_job

from trainwatch_common.events.jobs import Phase, ReplicaCounts, SubPhase
from trainwatch_watcher.kinds import jobset as jobset_kind
from trainwatch_watcher.kinds import trainjob

# --- TrainJob ---------------------------------------------------------------------------------


def test_trainjob_failed_copies_the_jobset_reason() -> None:
    status = {
        "conditions": [meta_condition("Failed", "True", "FailedJobs", "jobset failed due to job failure", 7)],
        "jobsStatus": [step("node", failed=1)],
    }
    result = trainjob.normalize(train_job(status), None)
    assert (result.phase, result.terminal, result.reason) == (Phase.FAILED, True, "FailedJobs")
    assert result.finished_at == at(7)
    assert result.started_at is None  # TrainJob has no timestamps


def test_trainjob_complete_is_succeeded() -> None:
    status = {
        "conditions": [
            meta_condition("Complete", "True", "AllJobsCompleted", "jobset completed successfully", 8)
        ],
        "jobsStatus": [step("node", succeeded=1)],
    }
    result = trainjob.normalize(train_job(status), None)
    assert (result.phase, result.terminal, result.finished_at) == (Phase.SUCCEEDED, True, at(8))


def test_trainjob_deadline_exceeded() -> None:
    status = {
        "conditions": [
            meta_condition("Failed", "True", "DeadlineExceeded", "TrainJob exceeded its active deadline", 30)
        ]
    }
    assert trainjob.normalize(train_job(status), None).reason == "DeadlineExceeded"


def test_trainjob_suspended_and_queued() -> None:
    status = {"conditions": [meta_condition("Suspended", "True", "Suspended", "TrainJob is suspended", 0)]}
    assert trainjob.normalize(train_job(status, suspend=True), None).phase is Phase.SUSPENDED
    queued = trainjob.normalize(train_job(status, labels=KUEUE, suspend=True), None)
    assert (queued.phase, queued.sub_phase, queued.queue) == (Phase.PENDING, SubPhase.QUEUED, "team-a-queue")


def test_trainjob_resumed_is_read_from_counts() -> None:
    status = {
        "conditions": [meta_condition("Suspended", "False", "Resumed", "TrainJob is resumed", 4)],
        "jobsStatus": [step("node", active=1, ready=1)],
    }
    assert trainjob.normalize(train_job(status), None).phase is Phase.RUNNING


def test_trainjob_restarting_from_its_jobset_condition() -> None:
    status = {"jobsStatus": [step("node", active=1, ready=1)]}
    companion = jobset(
        {
            "conditions": [
                meta_condition("RestartingJobSet", "True", "DefaultFailurePolicy", "restarting", 5)
            ],
            "restarts": 1,
            "replicatedJobsStatus": [step("node", failed=1)],
        }
    )
    result = trainjob.normalize(train_job(status), None, companion)
    assert (result.phase, result.source) == (Phase.RESTARTING, "jobset.condition:RestartingJobSet")
    assert result.restart_count == 1


def test_trainjob_restarting_from_old_jobset_restart_counter() -> None:
    old = jobset({"restarts": 0, "replicatedJobsStatus": [step("node", active=1, ready=1)]})
    before = trainjob.normalize(train_job({"jobsStatus": [step("node", active=1, ready=1)]}), None, old)
    assert before.phase is Phase.RUNNING
    restarted = jobset({"restarts": 1, "replicatedJobsStatus": [step("node", active=1)]})
    result = trainjob.normalize(train_job({"jobsStatus": [step("node", active=1)]}), before, restarted)
    assert (result.phase, result.source, result.restart_counter) == (
        Phase.RESTARTING,
        "heuristic:jobset.status.restarts",
        1,
    )


def test_trainjob_without_its_jobset_carries_restart_counters() -> None:
    previous = trainjob.normalize(
        train_job({"jobsStatus": [step("node", active=1, ready=1)]}),
        None,
        jobset({"restarts": 2, "replicatedJobsStatus": [step("node", active=1, ready=1)]}),
    )
    result = trainjob.normalize(train_job({"jobsStatus": [step("node", active=1, ready=1)]}), previous)
    assert (result.restart_count, result.restart_counter, result.phase) == (2, 2, Phase.RUNNING)


@pytest.mark.parametrize(
    ("steps", "phase", "sub_phase"),
    [
        ([step("node", active=1, ready=1)], Phase.RUNNING, None),
        (
            [
                step("dataset-initializer", succeeded=1),
                step("model-initializer", succeeded=1),
                step("node", active=1, ready=1),
            ],
            Phase.RUNNING,
            None,
        ),
        # MPI runtime: workers up, launcher pod not ready yet.
        ([step("node", active=1, ready=1), step("launcher", active=1)], Phase.PENDING, SubPhase.SCHEDULING),
        ([step("dataset-initializer", active=1), step("node")], Phase.PENDING, SubPhase.INITIALIZING),
        ([step("node", active=1)], Phase.PENDING, SubPhase.SCHEDULING),
        ([step("node")], Phase.PENDING, SubPhase.CREATED),
        ([], Phase.PENDING, SubPhase.CREATED),
    ],
)
def test_trainjob_counts_rows(steps: list[dict[str, Any]], phase: Phase, sub_phase: SubPhase | None) -> None:
    result = trainjob.normalize(train_job({"jobsStatus": steps} if steps else None), None)
    assert (result.phase, result.sub_phase) == (phase, sub_phase)


def test_trainjob_replicas_are_steps() -> None:
    result = trainjob.normalize(train_job({"jobsStatus": [step("node", active=1, ready=1)]}), None)
    assert result.replicas == {"node": ReplicaCounts(active=1, ready=1)}


# --- JobSet -----------------------------------------------------------------------------------


def test_jobset_failed_by_condition_and_terminal_state() -> None:
    status = {
        "conditions": [
            meta_condition(
                "Failed",
                "True",
                "ReachedMaxRestarts",
                "jobset failed due to reaching max number of restarts",
                9,
            )
        ],
        "terminalState": "Failed",
        "restarts": 3,
        "replicatedJobsStatus": [step("leader", failed=1), step("workers")],
    }
    result = jobset_kind.normalize(jobset(status), None)
    assert (result.phase, result.terminal, result.reason, result.restart_count) == (
        Phase.FAILED,
        True,
        "ReachedMaxRestarts",
        3,
    )
    assert result.finished_at == at(9)


def test_jobset_terminal_state_alone_decides() -> None:
    for state, phase in (("Failed", Phase.FAILED), ("Completed", Phase.SUCCEEDED)):
        result = jobset_kind.normalize(jobset({"terminalState": state}), None)
        assert (result.phase, result.terminal, result.source) == (phase, True, f"terminalState:{state}")


def test_jobset_completed() -> None:
    status = {
        "conditions": [
            meta_condition("Completed", "True", "AllJobsCompleted", "jobset completed successfully", 9)
        ],
        "terminalState": "Completed",
    }
    assert jobset_kind.normalize(jobset(status), None).phase is Phase.SUCCEEDED


def test_jobset_unknown_terminal_state_is_unknown() -> None:
    assert jobset_kind.normalize(jobset({"terminalState": "Exploded"}), None).phase is Phase.UNKNOWN


def test_jobset_suspended_and_queued() -> None:
    status = {"conditions": [meta_condition("Suspended", "True", "SuspendedJobs", "jobset is suspended", 1)]}
    assert jobset_kind.normalize(jobset(status, suspend=True), None).phase is Phase.SUSPENDED
    assert (
        jobset_kind.normalize(jobset(status, labels=KUEUE, suspend=True), None).sub_phase is SubPhase.QUEUED
    )


def test_jobset_restarting_condition_and_its_false_leftover() -> None:
    restarting = {
        "conditions": [
            meta_condition("RestartingJobSet", "True", "FailurePolicy_restart-leader", "restarting", 5)
        ],
        "restarts": 1,
        "replicatedJobsStatus": [step("leader", failed=1), step("workers", active=1, ready=1)],
    }
    result = jobset_kind.normalize(jobset(restarting), None)
    assert (result.phase, result.reason) == (Phase.RESTARTING, "FailurePolicy_restart-leader")
    # Trap: RestartingJobSet stays as False (JobsReady) once the restart is over.
    recovered = {
        "conditions": [meta_condition("RestartingJobSet", "False", "JobsReady", "jobs ready", 6)],
        "restarts": 1,
        "replicatedJobsStatus": [step("leader", active=1, ready=1), step("workers", active=1, ready=1)],
    }
    assert jobset_kind.normalize(jobset(recovered), result).phase is Phase.RUNNING


def test_old_jobset_restart_counter_heuristic_until_all_jobs_ready() -> None:
    running = jobset_kind.normalize(
        jobset(
            {
                "restarts": 0,
                "replicatedJobsStatus": [
                    step("leader", active=1, ready=1),
                    step("workers", active=1, ready=1),
                ],
            }
        ),
        None,
    )
    # The status write that counts the restart still shows the old child Jobs.
    counted = jobset_kind.normalize(
        jobset(
            {
                "restarts": 1,
                "replicatedJobsStatus": [step("leader", failed=1), step("workers", active=1, ready=1)],
            }
        ),
        running,
    )
    assert (counted.phase, counted.source) == (Phase.RESTARTING, "heuristic:status.restarts")
    recreating = jobset_kind.normalize(
        jobset(
            {
                "restarts": 1,
                "replicatedJobsStatus": [step("leader", active=1), step("workers", active=1, ready=1)],
            }
        ),
        counted,
    )
    assert recreating.phase is Phase.RESTARTING
    back = jobset_kind.normalize(
        jobset(
            {
                "restarts": 1,
                "replicatedJobsStatus": [
                    step("leader", active=1, ready=1),
                    step("workers", active=1, ready=1),
                ],
            }
        ),
        recreating,
    )
    assert (back.phase, back.restart_count) == (Phase.RUNNING, 1)


@pytest.mark.parametrize(
    ("steps", "phase", "sub_phase"),
    [
        ([step("leader", active=1, ready=1), step("workers", active=1)], Phase.RUNNING, None),
        ([step("leader", active=1), step("workers", active=1)], Phase.PENDING, SubPhase.SCHEDULING),
        ([step("leader"), step("workers")], Phase.PENDING, None),
    ],
)
def test_jobset_counts_rows(steps: list[dict[str, Any]], phase: Phase, sub_phase: SubPhase | None) -> None:
    result = jobset_kind.normalize(jobset({"restarts": 0, "replicatedJobsStatus": steps}), None)
    assert (result.phase, result.sub_phase) == (phase, sub_phase)
    assert result.replicas["leader"].desired == 1
