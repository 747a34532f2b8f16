"""What is news (diagnosis_changed), determinism, and which log to fetch (log_request)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from diagnosis_testkit import (
    NOW,
    at,
    condition,
    container_status,
    job,
    kubeflow_labels,
    pod,
    run,
    terminated,
    unschedulable,
    waiting,
    workload,
)

from trainwatch_common.events.diagnosis import Blame, Diagnosis, DiagnosisCategory, DiagnosisWarning
from trainwatch_common.events.jobs import Phase
from trainwatch_watcher.diagnosis import (
    PodEvidence,
    attach_log_tail,
    diagnosis_changed,
    log_request,
    trim_pod,
)
from trainwatch_watcher.diagnosis.engine import LogRequest

C = DiagnosisCategory


def d(**fields: object) -> Diagnosis:
    values: dict[str, object] = {
        "category": C.QUEUE_WAITING,
        "blame": Blame.INFRASTRUCTURE,
        "summary": "waiting",
        "queue": "gpu-queue",
        "position": 40,
        "pods_affected": 0,
    }
    values.update(fields)
    return Diagnosis.model_validate(values)


def test_appearing_and_clearing_are_news() -> None:
    assert diagnosis_changed(None, d())
    assert diagnosis_changed(d(), None)
    assert not diagnosis_changed(None, None)


@pytest.mark.parametrize(
    "change",
    [
        {"category": C.UNSCHEDULABLE, "resource": "nvidia.com/gpu"},  # quota -> insufficient GPUs
        {"blame": Blame.USER_CONFIG},
        {"role": "worker"},
        {"resource": "nvidia.com/gpu"},
        {"queue": "cpu-queue"},
        {"cluster_queue": "cq-b"},
        {"container": "sidecar"},
        {"exit_code": 137},
        {"pods_affected": 5},
        {"position": 12},  # 40 -> 12: moved by more than half
        {"position": 0},  # at the head
        {"position": 80},  # pushed back by higher priorities
    ],
)
def test_news(change: dict[str, object]) -> None:
    assert diagnosis_changed(d(), d(**change))


@pytest.mark.parametrize(
    "change",
    [
        {},  # the same evidence again
        {"summary": "waiting, position 35", "message": "other words"},
        {"since": at(30)},
        {"position": 35},  # a small move
        {"position": None},  # the visibility API did not answer this time
        {"pod": "bert-worker-7", "node": "n-2", "replica_index": 7},  # another pod of the same role
        {"events": [DiagnosisWarning(reason="FailedScheduling", count=9)]},
        {"restarts": 9, "reason": "ErrImagePull"},
    ],
)
def test_not_news(change: dict[str, object]) -> None:
    assert not diagnosis_changed(d(), d(**change))


def test_one_to_many_pods_is_news_but_many_to_more_is_not() -> None:
    assert diagnosis_changed(d(pods_affected=1), d(pods_affected=2))
    assert not diagnosis_changed(d(pods_affected=2), d(pods_affected=7))


def test_a_pending_job_moving_from_quota_to_gpus_is_news_end_to_end() -> None:
    wl = workload(
        [condition("QuotaReserved", "False", "Pending", "insufficient unused quota for cpu in flavor a", 1)]
    )
    queued = run(job("pytorchjob", Phase.PENDING), [], [], wl, pending={"positionInLocalQueue": 3})
    admitted = workload(
        [
            condition("QuotaReserved", "True", "QuotaReserved", "ok", 5),
            condition("Admitted", "True", "Admitted", "ok", 5),
        ]
    )
    p = pod(
        "bert-worker-0",
        kubeflow_labels("pytorchjob", "bert", "worker", 0),
        phase="Pending",
        node=None,
        containers=[],
        conditions=unschedulable("0/9 nodes are available: 9 Insufficient nvidia.com/gpu.", 6),
    )
    short = run(job("pytorchjob", Phase.PENDING), [p], [], admitted)
    assert queued is not None
    assert short is not None
    assert (queued.category, short.category) == (C.QUEUE_WAITING, C.UNSCHEDULABLE)
    assert diagnosis_changed(queued, short)


def test_the_same_evidence_later_is_the_same_diagnosis_and_not_news() -> None:
    p = pod(
        "bert-worker-0",
        kubeflow_labels("pytorchjob", "bert", "worker", 0),
        container_name="pytorch",
        containers=[
            container_status(
                "pytorch",
                waiting("CrashLoopBackOff", "back-off"),
                last=terminated("Error", 1, finished=20),
                restarts=3,
            )
        ],
    )
    first = run(job("pytorchjob", Phase.RUNNING), [p])
    again = run(job("pytorchjob", Phase.RUNNING), [p], now=NOW + timedelta(minutes=5))
    assert first == again
    assert first is not None
    assert not diagnosis_changed(first, again)


def crash_looping(state: dict[str, Any], restarts: int, last: dict[str, Any] | None) -> list[PodEvidence]:
    raw = pod(
        "bert-worker-0",
        kubeflow_labels("pytorchjob", "bert", "worker", 0),
        container_name="pytorch",
        containers=[container_status("pytorch", state, last=last, restarts=restarts)],
    )
    trimmed = trim_pod(raw)
    assert trimmed is not None
    return [trimmed]


def test_log_of_the_previous_instance_when_the_container_restarted() -> None:
    pods = crash_looping(waiting("CrashLoopBackOff", "back-off"), 3, terminated("Error", 1))
    diagnosis = d(category=C.CRASH_LOOP, pod="bert-worker-0", container="pytorch")
    assert log_request(diagnosis, pods) == LogRequest("bert-worker-0", "pytorch", previous=True)


def test_log_of_the_terminated_instance_itself() -> None:
    pods = crash_looping(terminated("OOMKilled", 137), 0, None)
    diagnosis = d(category=C.OOM_KILLED, pod="bert-worker-0", container="pytorch")
    assert log_request(diagnosis, pods) == LogRequest("bert-worker-0", "pytorch", previous=False)


def test_no_log_when_the_container_never_ran_or_nothing_ran() -> None:
    pods = crash_looping(waiting("CreateContainerConfigError", 'secret "x" not found'), 0, None)
    config = d(category=C.CONFIG_ERROR, pod="bert-worker-0", container="pytorch")
    assert log_request(config, pods) is None
    assert log_request(d(), pods) is None
    assert log_request(None, []) is None


def test_attach_log_tail_redacts_and_bounds() -> None:
    diagnosis = d(category=C.EXIT_CODE, pod="bert-worker-0", container="pytorch", exit_code=1)
    text = (
        "\n".join(f"step {i}" for i in range(500))
        + "\nexport HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789\n"
    )
    with_log = attach_log_tail(diagnosis, text, LogRequest("bert-worker-0", "pytorch", previous=True))
    assert with_log.log_tail is not None
    assert with_log.log_tail.previous
    assert with_log.log_tail.truncated
    assert with_log.log_tail.redacted
    assert "hf_abc" not in "\n".join(with_log.log_tail.lines)
    assert not diagnosis_changed(diagnosis, with_log)  # a log tail alone is not news
