"""Trimming: what is kept of a pod, Event, Workload and PodGroup, and the 1 KB bound per cached pod."""

from __future__ import annotations

import json
import pickle
import sys
from dataclasses import fields, is_dataclass
from typing import Any

import pytest
from diagnosis_testkit import (
    at,
    condition,
    container_status,
    core_event,
    disruption,
    kubeflow_labels,
    new_event,
    pod,
    running,
    sp_podgroup,
    terminated,
    ts,
    unschedulable,
    volcano_podgroup,
    waiting,
    workload,
)

from trainwatch_common.events.jobs import Phase
from trainwatch_watcher.diagnosis import job_evidence, trim_event, trim_pod, trim_podgroup, trim_workload

LONG_FIT = (
    "0/512 nodes are available: "
    + ", ".join(f"{n} node(s) had untolerated taint {{pool-{n}: reserved}}" for n in range(40))
    + ", 64 Insufficient nvidia.com/gpu, 12 Insufficient memory. preemption: 0/512 nodes are available: "
    + "512 No preemption victims found for incoming pod."
)


def deep_size(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes held by ``obj`` and everything it references (shared interned strings counted once)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or obj is None or (isinstance(obj, bool | int | float) and -5 <= obj <= 256):
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if is_dataclass(obj) and not isinstance(obj, type):
        size += sum(deep_size(getattr(obj, f.name), seen) for f in fields(obj))
    elif isinstance(obj, tuple | list | set | frozenset):
        size += sum(deep_size(item, seen) for item in obj)
    elif isinstance(obj, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    return size


def worst_pod(i: int = 0) -> dict[str, Any]:
    """A large pod: 2 init + 3 app containers that all failed and restarted, long messages everywhere;
    ``i`` makes its name and every timestamp its own (no sharing with the other pods of a cache)."""
    labels = kubeflow_labels(
        "pytorchjob", "a-rather-long-job-name-for-a-large-model-pretraining-run", "worker", i
    )
    s = i / 60  # i seconds later
    failing = [
        container_status(
            name,
            waiting(
                "CrashLoopBackOff", "back-off 5m0s restarting failed container=" + name + " pod=" + "p" * 200
            ),
            last=terminated(
                "Error", 1, finished=30 + s, started=2 + s, message="Traceback (most recent call):\n" * 50
            ),
            restarts=17,
        )
        for name in ("pytorch", "sidecar-logger", "metrics-exporter")
    ]
    init = [
        container_status(
            "fetch-dataset", terminated("Error", 2, 3 + s, 1 + s, message="x" * 2000), restarts=3
        ),
        container_status("wait-for-peers", waiting("PodInitializing")),
    ]
    raw = pod(
        f"a-rather-long-job-name-for-a-large-model-pretraining-run-worker-{i}",
        labels,
        containers=failing,
        init=init,
        phase="Pending",
        node=f"gpu-node-with-a-long-name-{i:04d}.us-east-2.compute.internal",
        conditions=[
            *unschedulable(LONG_FIT, 3 + s),
            disruption(
                "PreemptionByScheduler",
                "default-scheduler: preempting to accommodate a higher priority pod",
                5 + s,
            ),
        ],
        reason="Evicted",
        message="The node was low on resource: memory. " * 20,
        annotations={"kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 5000 + "}"},
    )
    raw["metadata"]["creationTimestamp"] = ts(s)
    return raw


def typical_pod(i: int = 0) -> dict[str, Any]:
    """A worker crash-looping after an OOM kill."""
    return pod(
        f"bert-worker-{i}",
        kubeflow_labels("pytorchjob", "bert", "worker", i),
        node=f"gpu-node-{i:04d}",
        containers=[
            container_status(
                "pytorch",
                waiting(
                    "CrashLoopBackOff",
                    f"back-off 5m0s restarting failed container=pytorch pod=bert-worker-{i}",
                ),
                last=terminated("OOMKilled", 137, finished=30 + i / 60, started=1 + i / 60),
                restarts=4,
            )
        ],
    )


def per_pod_bytes(make: Any, n: int = 500) -> float:
    """Bytes per pod of a cache of ``n`` trimmed pods: deep size of the list, objects shared across
    pods (interned reasons, roles, container names) counted once, as they are in memory."""
    cache = [trim_pod(make(i)) for i in range(n)]
    return (deep_size(cache) - sys.getsizeof(cache)) / n


def test_a_trimmed_failing_pod_is_under_one_kilobyte() -> None:
    raw = typical_pod(7)
    assert len(json.dumps(raw)) > 4_000
    trimmed = trim_pod(raw)
    assert trimmed is not None
    assert per_pod_bytes(typical_pod) <= 600  # in a cache of 500
    assert deep_size(trimmed) <= 1024  # alone, nothing shared with other pods
    assert len(pickle.dumps(trimmed, protocol=pickle.HIGHEST_PROTOCOL)) <= 512


def test_the_worst_pod_stays_bounded() -> None:
    """Five failing containers, 2 KB messages, 60-character names: the trim keeps two containers and
    200 characters of messages, so even this pod costs about 1.3 KB in a cache (1 KB pickled)."""
    raw = worst_pod(7)
    assert len(json.dumps(raw)) > 10_000
    trimmed = trim_pod(raw)
    assert trimmed is not None
    assert len(trimmed.containers) == 2
    assert per_pod_bytes(worst_pod) <= 1536
    assert len(pickle.dumps(trimmed, protocol=pickle.HIGHEST_PROTOCOL)) <= 1024


def test_a_healthy_pod_keeps_almost_nothing() -> None:
    trimmed = trim_pod(pod("bert-worker-0", kubeflow_labels("pytorchjob", "bert", "worker", 0)))
    assert trimmed is not None
    assert trimmed.containers == ()
    assert trimmed.conditions == ()
    assert deep_size(trimmed) <= 600


def test_trim_pod_keeps_what_diagnosis_reads() -> None:
    raw = pod(
        "bert-worker-3",
        kubeflow_labels("pytorchjob", "bert", "worker", 3),
        containers=[
            container_status(
                "pytorch", running(31), last=terminated("OOMKilled", 137, finished=30), restarts=2
            ),
            container_status("done", terminated("Completed", 0)),
        ],
        init=[container_status("init", terminated("Completed", 0))],
        conditions=[
            condition(
                "Ready", "False", "ContainersNotReady", "containers with unready status: [pytorch]", 30
            ),
            disruption("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint", 40),
        ],
    )
    trimmed = trim_pod(raw)
    assert trimmed is not None
    assert (trimmed.name, trimmed.role, trimmed.index, trimmed.node, trimmed.phase) == (
        "bert-worker-3",
        "worker",
        3,
        "gpu-node-7",
        "Running",
    )
    assert [c.type for c in trimmed.conditions] == ["DisruptionTarget"]
    assert trimmed.conditions[0].since == at(40)
    (container,) = trimmed.containers  # completed containers without restarts are dropped
    assert (container.name, container.state, container.restarts) == ("pytorch", "running", 2)
    assert (container.last_reason, container.last_exit_code, container.last_finished_at) == (
        "OOMKilled",
        137,
        at(30),
    )
    assert container.started_at == at(31)


def test_the_scheduler_message_is_read_before_it_is_cut() -> None:
    raw = pod("p", {}, phase="Pending", node=None, containers=[], conditions=unschedulable(LONG_FIT))
    trimmed = trim_pod(raw)
    assert trimmed is not None
    assert trimmed.insufficient == ("nvidia.com/gpu", "memory")
    message = trimmed.conditions[0].message
    assert message is not None
    assert len(message) <= 160
    assert message.endswith("...")


@pytest.mark.parametrize(
    "bad", [None, [], "pod", {"metadata": "x"}, {"metadata": {"name": ""}}, {"spec": {}}]
)
def test_unreadable_pods_are_none(bad: Any) -> None:
    assert trim_pod(bad) is None


def test_odd_fields_read_as_absent() -> None:
    raw = pod("p", {})
    raw["status"]["containerStatuses"] = [
        {"name": "c", "restartCount": "many", "state": [], "lastState": 3},
        7,
    ]
    raw["status"]["conditions"] = ["x", {"type": "PodScheduled"}]
    raw["spec"]["nodeName"] = 12
    trimmed = trim_pod(raw)
    assert trimmed is not None
    assert trimmed.node is None
    assert trimmed.conditions == ()
    assert trimmed.containers[0].restarts == 0


def test_core_v1_event() -> None:
    event = trim_event(
        core_event("BackOff", "Back-off restarting failed container", count=9, first=1, last=8)
    )
    assert event is not None
    assert (event.reason, event.type, event.count, event.object_kind, event.object_name) == (
        "BackOff",
        "Warning",
        9,
        "Pod",
        "bert-worker-3",
    )
    assert (event.first_seen, event.last_seen) == (at(1), at(8))


def test_events_k8s_io_v1_event_uses_note_and_series() -> None:
    event = trim_event(new_event("FailedScheduling", "0/3 nodes are available", count=4, minutes=9))
    assert event is not None
    assert (event.message, event.count, event.last_seen, event.first_seen) == (
        "0/3 nodes are available",
        4,
        at(9),
        at(5),
    )


def test_event_without_a_reason_is_skipped() -> None:
    assert trim_event({"message": "x"}) is None
    assert trim_event("x") is None  # type: ignore[arg-type]


def test_workload_with_visibility_positions() -> None:
    raw = workload([condition("QuotaReserved", "False", "Pending", "waiting", 2)], cluster_queue="cq-a")
    trimmed = trim_workload(raw, {"positionInLocalQueue": 4, "positionInClusterQueue": 11})
    assert trimmed is not None
    assert (trimmed.queue, trimmed.cluster_queue) == ("gpu-queue", "cq-a")
    assert (trimmed.position_in_local_queue, trimmed.position_in_cluster_queue) == (4, 11)
    quota = trimmed.condition("QuotaReserved")
    assert quota is not None
    assert (quota.status, quota.reason, quota.since) == ("False", "Pending", at(2))
    assert trim_workload(raw, {"positionInLocalQueue": -1}).position_in_local_queue is None  # type: ignore[union-attr]


def test_podgroups_of_both_schedulers() -> None:
    volcano = trim_podgroup(volcano_podgroup("Inqueue", min_member=6, running=2, message="gang"))
    assert volcano is not None
    assert (volcano.flavor, volcano.phase, volcano.min_member, volcano.running, volcano.queue) == (
        "volcano",
        "Inqueue",
        6,
        2,
        "research",
    )
    assert volcano.condition("Unschedulable") is not None
    plugins = trim_podgroup(sp_podgroup("Pending", min_member=3))
    assert plugins is not None
    assert (plugins.flavor, plugins.phase, plugins.min_member, plugins.conditions) == (
        "scheduler-plugins",
        "Pending",
        3,
        (),
    )


def test_a_jobs_evidence_keeps_only_the_conditions_that_say_why_it_failed() -> None:
    """Created, Running, Restarting... say nothing the normalized status does not: only a true
    Failed or FailureTarget is kept (the engine reads no other; parsing the rest on every job
    event was a fifth of what diagnosis added to it, bench/diagnosis)."""
    conditions = [
        condition("Created", "True", "PyTorchJobCreated", "created", 0),
        condition("Running", "False", "PyTorchJobRunning", "running", 1),
        condition("Restarting", "True", "PyTorchJobRestarting", "restarting", 2),
        condition("FailureTarget", "False", "BackoffLimitExceeded", "not yet", 3),
        condition("Failed", "True", "PyTorchJobFailed", "1 Worker replica(s) failed.", 4),
    ]
    job = {"metadata": {"name": "bert"}, "status": {"conditions": conditions}}
    evidence = job_evidence("pytorchjob", job, phase=Phase.FAILED, terminal=True)
    assert [(c.type, c.reason) for c in evidence.conditions] == [("Failed", "PyTorchJobFailed")]
    running_job = {"metadata": {"name": "bert"}, "status": {"conditions": conditions[:3]}}
    assert job_evidence("pytorchjob", running_job, phase=Phase.RUNNING).conditions == ()
