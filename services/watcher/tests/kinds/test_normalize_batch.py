"""batch/v1 Job: every row of reference §3.3 "batch/v1 Job", and the §8 traps."""

from __future__ import annotations

from typing import Any

from kinds_testkit import KUEUE, at, batch_job, k8s_condition, ts

from trainwatch_common.events.jobs import Phase, ReplicaCounts, SubPhase
from trainwatch_watcher.kinds import batch
from trainwatch_watcher.kinds.model import NormalizedStatus

BACKOFF_MESSAGE = "Job has reached the specified backoff limit"


def test_failed_condition_is_terminal_failure_timed_by_the_condition() -> None:
    # v1.31+: FailureTarget first, then Failed with the same reason once pods are gone.
    status = {
        "conditions": [
            k8s_condition("FailureTarget", "True", "BackoffLimitExceeded", BACKOFF_MESSAGE, minutes=5),
            k8s_condition("Failed", "True", "BackoffLimitExceeded", BACKOFF_MESSAGE, minutes=6),
        ],
        "startTime": ts(1),
        "failed": 5,
        "ready": 0,
    }
    result = batch.normalize(batch_job(status), None)
    assert (result.phase, result.terminal, result.sub_phase) == (Phase.FAILED, True, None)
    assert result.reason == "BackoffLimitExceeded"
    assert result.message == BACKOFF_MESSAGE
    assert result.source == "condition:Failed"
    # No completionTime on failure: the Failed condition's time is the finish.
    assert result.finished_at == at(6)
    assert result.source_transition_time == at(6)
    assert result.started_at == at(1)
    assert result.created_at == at(0)
    assert result.restart_count == 5


def test_complete_condition_is_terminal_success_timed_by_completion_time() -> None:
    status = {
        "conditions": [
            k8s_condition(
                "SuccessCriteriaMet",
                "True",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                3,
            ),
            k8s_condition(
                "Complete", "True", "CompletionsReached", "Reached expected number of succeeded pods", 4
            ),
        ],
        "startTime": ts(1),
        "completionTime": ts(3.5),
        "succeeded": 1,
        "ready": 0,
    }
    result = batch.normalize(batch_job(status), None)
    assert (result.phase, result.terminal) == (Phase.SUCCEEDED, True)
    assert result.finished_at == at(3.5)
    assert result.reason == "CompletionsReached"


def test_failure_target_is_failed_but_finishing() -> None:
    status = {
        "conditions": [
            k8s_condition("FailureTarget", "True", "PodFailurePolicy", "Container main exited with 42", 5)
        ],
        "startTime": ts(1),
        "failed": 1,
        "terminating": 1,
        "ready": 0,
    }
    result = batch.normalize(batch_job(status), None)
    assert (result.phase, result.terminal, result.sub_phase) == (Phase.FAILED, False, SubPhase.FINISHING)
    assert result.source == "condition:FailureTarget"
    assert result.reason == "PodFailurePolicy"


def test_success_criteria_met_is_succeeded_but_finishing() -> None:
    status = {
        "conditions": [
            k8s_condition("SuccessCriteriaMet", "True", "SuccessPolicy", "Matched rules at index 0", 5)
        ],
        "startTime": ts(1),
        "succeeded": 1,
        "active": 2,
        "terminating": 2,
        "ready": 2,
    }
    result = batch.normalize(batch_job(status, parallelism=3, completions=3), None)
    assert (result.phase, result.terminal, result.sub_phase) == (Phase.SUCCEEDED, False, SubPhase.FINISHING)
    assert result.finished_at is None


def test_suspended_true_is_suspended() -> None:
    status = {"conditions": [k8s_condition("Suspended", "True", "JobSuspended", "Job suspended", 2)]}
    result = batch.normalize(batch_job(status, suspend=True), None)
    assert result.phase is Phase.SUSPENDED
    assert result.reason == "JobSuspended"


def test_suspended_under_kueue_is_queued() -> None:
    status = {"conditions": [k8s_condition("Suspended", "True", "JobSuspended", "Job suspended", 0)]}
    result = batch.normalize(batch_job(status, labels=KUEUE, suspend=True), None)
    assert (result.phase, result.sub_phase) == (Phase.PENDING, SubPhase.QUEUED)
    assert result.queue == "team-a-queue"


def test_kueue_job_is_queued_before_the_controller_writes_the_condition() -> None:
    result = batch.normalize(batch_job(None, labels=KUEUE, suspend=True), None)
    assert (result.phase, result.sub_phase, result.source) == (Phase.PENDING, SubPhase.QUEUED, "spec.suspend")


def test_resumed_job_keeps_suspended_false_and_is_running() -> None:
    # Trap: Suspended stays in the list with status False after a resume; the list's last entry.
    status = {
        "conditions": [k8s_condition("Suspended", "False", "JobResumed", "Job resumed", 4)],
        "startTime": ts(4),
        "active": 1,
        "ready": 1,
    }
    result = batch.normalize(batch_job(status), None)
    assert result.phase is Phase.RUNNING
    assert result.started_at == at(4)  # reset on resume


def test_running_when_active_pods_are_ready() -> None:
    status = {"startTime": ts(1), "active": 1, "ready": 1}
    result = batch.normalize(batch_job(status), None)
    assert result.phase is Phase.RUNNING
    assert result.replicas == {"pods": ReplicaCounts(desired=1, active=1, ready=1, succeeded=0, failed=0)}


def test_scheduling_when_pods_are_active_but_not_ready() -> None:
    result = batch.normalize(batch_job({"startTime": ts(1), "active": 1, "ready": 0}), None)
    assert (result.phase, result.sub_phase) == (Phase.PENDING, SubPhase.SCHEDULING)


def test_created_when_nothing_happened_yet() -> None:
    for status in (None, {}, {"startTime": ts(1), "ready": 0}):
        result = batch.normalize(batch_job(status), None)
        assert (result.phase, result.sub_phase) == (Phase.PENDING, SubPhase.CREATED)


def test_old_cluster_without_ready_field_counts_active_pods_as_running() -> None:
    result = batch.normalize(batch_job({"startTime": ts(1), "active": 2}, parallelism=2, completions=2), None)
    assert result.phase is Phase.RUNNING
    assert result.replicas["pods"].ready is None


def test_failed_counter_increase_is_restarting_and_stays_until_pods_are_ready() -> None:
    running = batch.normalize(batch_job({"startTime": ts(1), "active": 1, "ready": 1}), None)
    assert running.phase is Phase.RUNNING
    assert running.restart_counter == 0

    # The pod failed; the controller waits out the back-off before re-creating it.
    backing_off = batch.normalize(batch_job({"startTime": ts(1), "failed": 1, "ready": 0}), running)
    assert backing_off.phase is Phase.RESTARTING
    assert backing_off.source == "heuristic:status.failed"
    assert (backing_off.restart_count, backing_off.restart_counter) == (1, 1)

    # Nothing new failed, the replacement pod is pending: still restarting, not Pending.
    recreated = batch.normalize(
        batch_job({"startTime": ts(1), "failed": 1, "active": 1, "ready": 0}), backing_off
    )
    assert recreated.phase is Phase.RESTARTING

    back = batch.normalize(batch_job({"startTime": ts(1), "failed": 1, "active": 1, "ready": 1}), recreated)
    assert back.phase is Phase.RUNNING
    assert back.restart_count == 1

    # Later observations with the same counter do not bring Restarting back.
    not_ready = batch.normalize(batch_job({"startTime": ts(1), "failed": 1, "active": 1, "ready": 0}), back)
    assert (not_ready.phase, not_ready.sub_phase) == (Phase.PENDING, SubPhase.SCHEDULING)


def test_parallel_job_restarting_until_every_wanted_pod_is_ready() -> None:
    spec: dict[str, Any] = {"parallelism": 4, "completions": 8}
    previous = batch.normalize(batch_job({"active": 4, "ready": 4}, **spec), None)
    failed_one = batch.normalize(batch_job({"active": 3, "ready": 3, "failed": 1}, **spec), previous)
    assert failed_one.phase is Phase.RESTARTING
    replacement = batch.normalize(batch_job({"active": 4, "ready": 3, "failed": 1}, **spec), failed_one)
    assert replacement.phase is Phase.RESTARTING
    all_up = batch.normalize(batch_job({"active": 4, "ready": 4, "failed": 1}, **spec), replacement)
    assert all_up.phase is Phase.RUNNING


def test_coalesced_observation_with_pods_back_up_is_running() -> None:
    # A re-list can skip the failure: the counter went up but every pod is ready again.
    previous = batch.normalize(batch_job({"active": 1, "ready": 1}), None)
    result = batch.normalize(batch_job({"active": 1, "ready": 1, "failed": 1}), previous)
    assert result.phase is Phase.RUNNING
    assert result.restart_count == 1


def test_first_sight_of_a_job_retrying_a_failed_pod_is_restarting() -> None:
    result = batch.normalize(batch_job({"startTime": ts(1), "failed": 2, "active": 1, "ready": 0}), None)
    assert result.phase is Phase.RESTARTING


def test_restart_heuristic_does_not_override_finished_or_suspended_rows() -> None:
    previous = NormalizedStatus(phase=Phase.RUNNING, restart_counter=0)
    failed = {
        "conditions": [k8s_condition("FailureTarget", "True", "BackoffLimitExceeded", BACKOFF_MESSAGE, 5)],
        "failed": 1,
    }
    assert batch.normalize(batch_job(failed, backoffLimit=0), previous).phase is Phase.FAILED
    suspended = {
        "conditions": [k8s_condition("Suspended", "True", "JobSuspended", "Job suspended")],
        "failed": 1,
    }
    assert batch.normalize(batch_job(suspended), previous).phase is Phase.SUSPENDED


def test_condition_order_does_not_decide() -> None:
    conditions = [
        k8s_condition(
            "Failed", "True", "DeadlineExceeded", "Job was active longer than specified deadline", 9
        ),
        k8s_condition("Suspended", "False", "JobResumed", "Job resumed", 3),
    ]
    for ordered in (conditions, conditions[::-1]):
        result = batch.normalize(batch_job({"conditions": ordered}), None)
        assert (result.phase, result.reason) == (Phase.FAILED, "DeadlineExceeded")
