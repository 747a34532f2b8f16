"""RayJob: every row of §3.3 "RayJob" and the §8 traps (Complete is not success; Retrying)."""

from __future__ import annotations

import pytest
from kinds_testkit import KUEUE, at, ray_job, ray_status, ts

from trainwatch_common.events.jobs import Phase, SubPhase
from trainwatch_watcher.kinds import ray


@pytest.mark.parametrize(
    ("deployment", "job_status", "phase", "sub_phase", "terminal"),
    [
        ("", "", Phase.PENDING, SubPhase.CREATED, False),
        ("Initializing", "", Phase.PENDING, SubPhase.INITIALIZING, False),
        ("Waiting", "", Phase.PENDING, SubPhase.WAITING, False),
        ("Running", "", Phase.PENDING, SubPhase.SCHEDULING, False),
        ("Running", "PENDING", Phase.PENDING, SubPhase.SCHEDULING, False),
        ("Running", "RUNNING", Phase.RUNNING, None, False),
        ("Running", "SUCCEEDED", Phase.SUCCEEDED, SubPhase.FINISHING, False),
        ("Running", "FAILED", Phase.FAILED, SubPhase.FINISHING, False),
        ("Running", "STOPPED", Phase.FAILED, SubPhase.FINISHING, False),
        ("Complete", "SUCCEEDED", Phase.SUCCEEDED, None, True),
        ("Complete", "STOPPED", Phase.FAILED, None, True),
        ("Complete", "FAILED", Phase.FAILED, None, True),
        ("Failed", "FAILED", Phase.FAILED, None, True),
        ("ValidationFailed", "", Phase.FAILED, None, True),
        ("Retrying", "FAILED", Phase.RESTARTING, None, False),
        ("Suspending", "", Phase.SUSPENDED, None, False),
        ("Suspended", "", Phase.SUSPENDED, None, False),
        ("FailedToGetOrCreateRayCluster", "", Phase.FAILED, None, False),
        ("FailedJobDeploy", "", Phase.FAILED, None, False),
        ("FailedToGetJobStatus", "RUNNING", Phase.FAILED, None, False),
        ("WaitForDashboard", "", Phase.PENDING, SubPhase.INITIALIZING, False),
        ("WaitForDashboardReady", "", Phase.PENDING, SubPhase.INITIALIZING, False),
    ],
)
def test_rows(
    deployment: str, job_status: str, phase: Phase, sub_phase: SubPhase | None, terminal: bool
) -> None:
    result = ray.normalize(ray_job(ray_status(deployment, job_status)), None)
    assert (result.phase, result.sub_phase, result.terminal) == (phase, sub_phase, terminal)


def test_complete_with_stopped_is_a_failure_with_reason_stopped() -> None:
    status = ray_status(
        "Complete", "STOPPED", endTime=ts(9), rayJobInfo={"startTime": ts(2), "endTime": ts(8)}
    )
    result = ray.normalize(ray_job(status), None)
    assert (result.phase, result.terminal, result.reason) == (Phase.FAILED, True, "Stopped")
    assert result.finished_at == at(9)
    assert result.source == "jobDeploymentStatus:Complete,jobStatus:STOPPED"


def test_complete_with_failed_on_kuberay_1_0() -> None:
    result = ray.normalize(ray_job(ray_status("Complete", "FAILED", endTime=ts(9))), None)
    assert (result.phase, result.terminal, result.reason) == (Phase.FAILED, True, "AppFailed")


def test_failed_keeps_the_status_reason() -> None:
    status = ray_status(
        "Failed",
        "RUNNING",
        reason="DeadlineExceeded",
        message="The RayJob has passed the activeDeadlineSeconds.",
        endTime=ts(30),
        failed=1,
    )
    result = ray.normalize(ray_job(status, activeDeadlineSeconds=1800), None)
    assert (result.phase, result.reason, result.finished_at) == (Phase.FAILED, "DeadlineExceeded", at(30))
    assert result.restart_count == 0  # one failed attempt, never retried


def test_retrying_counts_failed_attempts() -> None:
    status = ray_status("Retrying", "FAILED", reason="AppFailed", failed=2, endTime=ts(5))
    result = ray.normalize(ray_job(status, backoffLimit=3), None)
    assert (result.phase, result.reason, result.restart_count) == (Phase.RESTARTING, "AppFailed", 2)
    assert result.finished_at is None  # an attempt's endTime is not the job's end


def test_success_after_retries_keeps_the_retries() -> None:
    status = ray_status("Complete", "SUCCEEDED", failed=1, succeeded=1, endTime=ts(20))
    assert ray.normalize(ray_job(status, backoffLimit=3), None).restart_count == 1


def test_suspended_under_kueue_is_queued() -> None:
    result = ray.normalize(ray_job(ray_status("Suspended"), labels=KUEUE, suspend=True), None)
    assert (result.phase, result.sub_phase, result.queue) == (Phase.PENDING, SubPhase.QUEUED, "team-a-queue")
    before_controller = ray.normalize(ray_job(None, labels=KUEUE, suspend=True), None)
    assert (before_controller.sub_phase, before_controller.source) == (SubPhase.QUEUED, "spec.suspend")


@pytest.mark.parametrize(
    ("deployment", "job_status"),
    [("Exploding", ""), ("Running", "WEIRD"), ("Complete", ""), ("Complete", "RUNNING")],
)
def test_unknown_values_are_unknown(deployment: str, job_status: str) -> None:
    result = ray.normalize(ray_job(ray_status(deployment, job_status)), None)
    assert (result.phase, result.terminal) == (Phase.UNKNOWN, False)


def test_non_string_status_values_are_unknown() -> None:
    assert ray.normalize(ray_job({"jobDeploymentStatus": 3}), None).phase is Phase.UNKNOWN
    assert (
        ray.normalize(ray_job({"jobDeploymentStatus": "Running", "jobStatus": ["RUNNING"]}), None).phase
        is Phase.UNKNOWN
    )
