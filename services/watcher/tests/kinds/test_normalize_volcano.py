"""Volcano Job: every phase row of §3.3 "Volcano Job", the PodGroup cases and the §8 traps."""

from __future__ import annotations

from typing import Any

import pytest
from kinds_testkit import at, podgroup, volcano_job, volcano_status

from trainwatch_common.events.jobs import Phase, ReplicaCounts, SubPhase
from trainwatch_watcher.kinds import volcano


@pytest.mark.parametrize(
    ("phase", "history", "expected", "sub_phase", "terminal"),
    [
        ("Running", ("Pending",), Phase.RUNNING, None, False),
        ("Restarting", ("Pending", "Running"), Phase.RESTARTING, None, False),
        ("Completing", ("Pending", "Running"), Phase.SUCCEEDED, SubPhase.FINISHING, False),
        ("Completed", ("Pending", "Running", "Completing"), Phase.SUCCEEDED, None, True),
        ("Aborting", ("Pending", "Running"), Phase.SUSPENDED, SubPhase.ABORTING, False),
        # Trap: Aborted can be resumed (vcctl job resume); it is not a failure.
        ("Aborted", ("Pending", "Running", "Aborting"), Phase.SUSPENDED, None, False),
        ("Terminating", ("Pending", "Running"), Phase.FAILED, SubPhase.FINISHING, False),
        ("Terminated", ("Pending", "Running", "Terminating"), Phase.FAILED, None, True),
        ("Failed", ("Pending", "Running", "Restarting"), Phase.FAILED, None, True),
    ],
)
def test_phase_rows(
    phase: str, history: tuple[str, ...], expected: Phase, sub_phase: SubPhase | None, terminal: bool
) -> None:
    result = volcano.normalize(volcano_job(volcano_status(phase, history=history)), None)
    assert (result.phase, result.sub_phase, result.terminal) == (expected, sub_phase, terminal)
    assert result.source == f"state.phase:{phase}"
    # The per-phase condition entry times the phase; state.lastTransitionTime moves on any change.
    assert result.source_transition_time == at(len(history) + 1)
    assert result.finished_at == (at(len(history) + 1) if terminal else None)


def test_empty_phase_is_created() -> None:
    statuses: list[dict[str, Any] | None] = [None, {}, {"state": {}}, {"state": {"phase": ""}}]
    for status in statuses:
        result = volcano.normalize(volcano_job(status), None)
        assert (result.phase, result.sub_phase) == (Phase.PENDING, SubPhase.CREATED)


def test_pending_without_pods_is_queued_and_with_pods_scheduling() -> None:
    queued = volcano.normalize(volcano_job(volcano_status("Pending")), None)
    assert (queued.phase, queued.sub_phase) == (Phase.PENDING, SubPhase.QUEUED)
    scheduling = volcano.normalize(volcano_job(volcano_status("Pending", pending=6)), None)
    assert (scheduling.phase, scheduling.sub_phase) == (Phase.PENDING, SubPhase.SCHEDULING)


@pytest.mark.parametrize(
    ("pg_phase", "expected"),
    [("Pending", SubPhase.QUEUED), (None, SubPhase.QUEUED), ("Inqueue", SubPhase.SCHEDULING)],
)
def test_pending_read_with_the_podgroup(pg_phase: str | None, expected: SubPhase) -> None:
    result = volcano.normalize(volcano_job(volcano_status("Pending")), None, podgroup(pg_phase))
    assert (result.phase, result.sub_phase) == (Phase.PENDING, expected)


def test_failed_reason_is_made_up_from_retries() -> None:
    exhausted = volcano.normalize(
        volcano_job(volcano_status("Failed", history=("Restarting",), retryCount=5)), None
    )
    assert exhausted.reason == "MaxRetryExceeded"
    default_max = volcano.normalize(volcano_job(volcano_status("Failed", retryCount=3), maxRetry=None), None)
    assert default_max.reason == "MaxRetryExceeded"
    not_enough = volcano.normalize(
        volcano_job(volcano_status("Failed", history=("Running",), failed=6)), None
    )
    assert not_enough.reason == "MinSuccessNotReached"


def test_terminated_reason() -> None:
    result = volcano.normalize(
        volcano_job(volcano_status("Terminated", history=("Running", "Terminating"))), None
    )
    assert result.reason == "Terminated"


def test_state_reason_is_used_if_a_controller_ever_writes_it() -> None:
    status = volcano_status("Aborted")
    status["state"].update(reason="Preempted", message="preempted by high-priority job")
    result = volcano.normalize(volcano_job(status), None)
    assert (result.reason, result.message) == ("Preempted", "preempted by high-priority job")


def test_unknown_phase_is_unknown() -> None:
    # "Inqueue" is a job phase only in arena's vendored copy; current Volcano has no such phase.
    for phase in ("Inqueue", "Exploded", 7):
        result = volcano.normalize(volcano_job({"state": {"phase": phase}}), None)
        assert result.phase is Phase.UNKNOWN


def test_started_at_is_the_running_entry_and_restarts_are_retry_count() -> None:
    status = volcano_status(
        "Running", history=("Pending", "Running", "Restarting", "Pending"), retryCount=1, running=6
    )
    result = volcano.normalize(volcano_job(status), None)
    # Re-entering Running moved its entry to the end: the latest entry wins.
    assert result.started_at == at(5)
    assert result.restart_count == 1
    assert result.queue == "default"


def test_replicas_from_task_status_count() -> None:
    status = volcano_status(
        "Running",
        running=4,
        pending=2,
        taskStatusCount={"default-nginx": {"phase": {"Running": 4, "Pending": 2}}},
    )
    result = volcano.normalize(volcano_job(status), None)
    assert result.replicas == {"default-nginx": ReplicaCounts(desired=6, active=6)}
