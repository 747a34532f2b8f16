"""Pure parts of diagnosis in the watcher: the evidence cache and its job links, what a checkpoint
record and the stream keep of a diagnosis, and the size of a cached pod."""

from __future__ import annotations

import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from trainwatch_common.events.clusters import WatchOptions
from trainwatch_common.events.diagnosis import Diagnosis, DiagnosisCategory, DiagnosisWarning
from trainwatch_common.events.jobs import Phase
from trainwatch_watcher import transitions
from trainwatch_watcher.diagnosis.selectors import KIND_POD_SELECTORS
from trainwatch_watcher.evidence_cache import EvidenceCache, job_links
from trainwatch_watcher.evidence_feed import evidence_sources
from trainwatch_watcher.history import parse_stored
from trainwatch_watcher.job_diagnosis import JobDiagnoser
from trainwatch_watcher.kinds.model import NormalizedStatus
from trainwatch_watcher.records import JobRecord, decode_record, encode_record, trim

NS = "team-a"


def pytorchjob(name: str = "bert", uid: str = "u-bert") -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": NS, "uid": uid},
    }


def kubeflow_pod(job: str, index: int, *, reason: str | None = None, rv: str = "1") -> dict[str, Any]:
    state: dict[str, Any] = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    if reason:
        state = {"terminated": {"reason": reason, "exitCode": 137, "finishedAt": "2026-01-01T00:05:00Z"}}
    return {
        "metadata": {
            "name": f"{job}-worker-{index}",
            "namespace": NS,
            "resourceVersion": rv,
            "labels": {
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
                "training.kubeflow.org/job-name": job,
                "training.kubeflow.org/replica-type": "worker",
                "training.kubeflow.org/replica-index": str(index),
                "app": "noise",
            },
            "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}] * 5,
        },
        "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "pytorch", "env": [{"name": "X"}] * 30}]},
        "status": {
            "phase": "Failed" if reason else "Running",
            "podIP": f"10.0.0.{index}",
            "containerStatuses": [
                {"name": "pytorch", "restartCount": 0, "state": state, "ready": not reason}
            ],
        },
    }


def warning(name: str, about: str, reason: str, kind: str = "Pod", uid: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS},
        "involvedObject": {"kind": kind, "name": about, "namespace": NS, **({"uid": uid} if uid else {})},
        "reason": reason,
        "message": f"{reason} happened",
        "type": "Warning",
        "count": 1,
        "lastTimestamp": "2026-01-01T00:05:00Z",
    }


def test_a_jobs_pods_events_and_podgroup_are_found_by_its_links_and_changes_name_the_job() -> None:
    cache = EvidenceCache()
    woken: list[set[str]] = []
    cache.subscribe(woken.append)
    links = job_links("pytorchjob", pytorchjob())
    assert links is not None
    cache.apply("pod", "pods/kubeflow", "ADDED", kubeflow_pod("bert", 0))
    cache.apply("pod", "pods/kubeflow", "ADDED", kubeflow_pod("other", 0))
    assert [p.name for p in cache.pods_of(links)] == ["bert-worker-0"]
    assert woken
    assert woken[0] & links.keys()
    assert not woken[1] & links.keys()  # another job's pod wakes nobody else

    woken.clear()
    cache.apply("pod", "pods/kubeflow", "MODIFIED", {**kubeflow_pod("bert", 0, rv="2")})
    assert woken == []  # a change diagnosis does not read (resourceVersion) wakes nobody
    cache.apply("pod", "pods/kubeflow", "MODIFIED", kubeflow_pod("bert", 0, reason="OOMKilled"))
    assert woken
    assert woken[0] & links.keys()
    assert cache.pods_of(links)[0].containers[0].reason == "OOMKilled"

    cache.apply("event", "events", "ADDED", warning("e1", "bert-worker-0", "BackOff"))
    cache.apply("event", "events", "ADDED", warning("e2", "bert", "PyTorchJobFailed", kind="PyTorchJob"))
    cache.apply("event", "events", "ADDED", warning("e3", "unrelated", "BackOff"))
    assert {e.reason for e in cache.events_of(links, cache.pods_of(links))} == {"BackOff", "PyTorchJobFailed"}

    podgroup = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "metadata": {"name": "bert", "namespace": NS, "ownerReferences": [{"uid": "u-bert"}]},
        "spec": {"minMember": 2},
        "status": {"phase": "Scheduling"},
    }
    woken.clear()
    cache.apply("podgroup", "podgroup-coscheduling", "ADDED", podgroup)
    assert woken == [{"uid=u-bert"}]
    assert cache.podgroup_of(links) is not None

    # A relist that no longer shows the pod: it is gone, and the job hears of it.
    woken.clear()
    cache.forget_source("pods/kubeflow", {(NS, "other-worker-0")})
    assert cache.pods_of(links) == []
    assert woken
    assert woken[0] & links.keys()


def test_events_about_child_jobs_reach_their_jobset_and_each_object_keeps_a_bounded_few() -> None:
    cache = EvidenceCache(max_events_per_object=3)
    jobset = {"metadata": {"name": "llm", "namespace": NS, "uid": "u-llm"}}
    links = job_links("jobset", jobset)
    assert links is not None
    woken: list[set[str]] = []
    cache.subscribe(woken.append)
    cache.apply("event", "events", "ADDED", warning("c1", "llm-workers-0", "FailedCreate", kind="Job"))
    assert woken[0] & links.keys()
    assert [e.reason for e in cache.events_of(links, [])] == ["FailedCreate"]
    for i in range(10):
        cache.apply("event", "events", "ADDED", warning(f"p{i}", "llm-workers-0-abcde", f"R{i}"))
    assert cache.event_count == 4  # 3 about the pod, 1 about the child Job


def test_a_cluster_without_kueue_or_volcano_watches_pods_of_its_kinds_and_warnings_only() -> None:
    assert set(evidence_sources({"pytorchjob", "tfjob"}, set())) == {"pods/kubeflow", "events"}
    every = evidence_sources(
        {"job", "pytorchjob", "jobset", "trainjob", "volcanojob", "rayjob", "mpijob"},
        {"workload", "podgroup-volcano", "podgroup-coscheduling"},
    )
    assert len([k for k in every if k.startswith("pods/")]) == len(KIND_POD_SELECTORS) == 6
    assert len(every) == 11  # and the Kueue queue positions refresher
    assert every["events"].field_selector == "type=Warning"
    assert evidence_sources(set(), {"workload"}) == {}  # no job kind watched: nothing to diagnose


def _worker_template() -> dict[str, Any]:
    resources = {"requests": {"nvidia.com/gpu": "8", "cpu": "16"}, "limits": {"nvidia.com/gpu": "8"}}
    return {"spec": {"containers": [{"name": "pytorch", "image": "train:1", "resources": resources}]}}


def pytorchjob_with_spec(generation: int, workers: int, running: int) -> dict[str, Any]:
    job = pytorchjob()
    job["metadata"] |= {"generation": generation, "resourceVersion": str(100 + running)}
    job["spec"] = {"pytorchReplicaSpecs": {"Worker": {"replicas": workers, "template": _worker_template()}}}
    job["status"] = {"replicaStatuses": {"Worker": {"active": running}}}
    return job


def test_a_job_event_rereads_the_spec_only_when_its_generation_moved_and_pods_only_when_they_moved() -> None:
    """Links and resources are kept while ``metadata.generation`` stays, the job's pods and events
    while the cache names none of its keys (bench/diagnosis: re-reading them on every status change
    was most of what diagnosis added to a job event)."""
    cache = EvidenceCache()
    diagnoser = JobDiagnoser("pytorchjob", cache, WatchOptions())
    running = NormalizedStatus(phase=Phase.RUNNING)
    now = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
    for i in range(4):
        cache.apply("pod", "pods/kubeflow", "ADDED", kubeflow_pod("bert", i))

    first = diagnoser.track("u-bert", pytorchjob_with_spec(1, workers=4, running=3), running)
    assert first is not None
    assert first.resources is not None
    assert (first.resources["pods"], first.resources["gpus"]) == (4, 32)
    assert diagnoser.diagnose("u-bert", now) is None
    pods = first.pods
    assert pods is not None
    assert len(pods) == 4

    # A status change: the same spec and pods, read from what the last event kept.
    first_metadata = first.metadata
    second = diagnoser.track("u-bert", pytorchjob_with_spec(1, workers=4, running=4), running)
    assert second is not None
    assert second.resources is first.resources
    assert second.links is first.links
    # ... updated in place, so that a status churn leaves the collector little to do.
    assert second is first
    assert second.metadata is first_metadata
    assert second.metadata == {"labels": {}, "resourceVersion": "104"}
    assert diagnoser.diagnose("u-bert", now) is None
    assert second.pods is pods

    # A pod moved: the job's pods are read again.
    cache.apply("pod", "pods/kubeflow", "MODIFIED", kubeflow_pod("bert", 2, reason="OOMKilled"))
    assert second.pods is None
    diagnosis = diagnoser.diagnose("u-bert", now)
    assert diagnosis is not None
    assert diagnosis.category is DiagnosisCategory.OOM_KILLED

    # A spec change (the apiserver bumps the generation): resources are read again.
    third = diagnoser.track("u-bert", pytorchjob_with_spec(2, workers=8, running=4), running)
    assert third is not None
    assert third.resources is not None
    assert (third.resources["pods"], third.resources["gpus"]) == (8, 64)
    # No generation to go by: read on every event.
    unversioned = pytorchjob_with_spec(2, workers=2, running=4)
    del unversioned["metadata"]["generation"]
    fourth = diagnoser.track("u-bert", unversioned, running)
    assert fourth is not None
    assert fourth.resources is not None
    assert fourth.resources["pods"] == 2
    diagnoser.close()


def test_a_cached_pod_costs_under_half_a_kilobyte() -> None:
    """What the cache holds per pod (its PodEvidence, the selector labels, the indexes), measured
    by tracemalloc over 1000 pods of 100 jobs. Issue 16 allows 1 KB per cached pod in the
    process's RSS, which also pays for the heap the listing's decode leaves behind (bench/diagnosis):
    the cache itself keeps to half of that (~330 B here; 620 B with a dict of labels, a
    (namespace, name) tuple and a set per index key)."""
    blobs = [
        orjson.dumps(kubeflow_pod(f"job-{j:04d}", i, reason="OOMKilled" if i == 3 else None))
        for j in range(100)
        for i in range(10)
    ]
    decoded = [orjson.loads(blob) for blob in blobs]
    cache = EvidenceCache()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for pod in decoded:
            cache.apply("pod", "pods/kubeflow", "ADDED", pod)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    per_pod = sum(stat.size_diff for stat in after.compare_to(before, "filename")) / len(decoded)
    assert cache.pod_count == 1000
    assert per_pod < 512, per_pod


def _diagnosis() -> Diagnosis:
    return Diagnosis(
        category=DiagnosisCategory.OOM_KILLED,
        summary="worker-3 (pytorch) was killed for running out of memory",
        role="worker",
        pod="bert-worker-3",
        container="pytorch",
        exit_code=137,
        signal=9,
        events=[DiagnosisWarning(reason="OOMKilled", message="x" * 500)],
    )


def test_a_record_keeps_the_last_diagnosis_and_first_running_time_and_old_records_still_decode() -> None:
    status = NormalizedStatus(phase=Phase.FAILED, terminal=True, reason="PyTorchJobFailed")
    emission = transitions.observe(None, status, namespace=NS, name="bert")
    assert emission is not None
    started = datetime(2026, 1, 1, tzinfo=UTC)
    record = JobRecord(emission.slot, trim(status), _diagnosis(), started)
    decoded = decode_record(encode_record(record))
    assert decoded.first_running_at == started
    assert decoded.diagnosis is not None
    assert (decoded.diagnosis.category, decoded.diagnosis.exit_code) == (DiagnosisCategory.OOM_KILLED, 137)
    assert decoded.diagnosis.events == []  # not what news is decided by: not kept
    assert len(encode_record(record)) < 600

    old = orjson.loads(encode_record(JobRecord(emission.slot, trim(status))))
    assert "dg" not in old
    assert "fr" not in old
    legacy = decode_record(orjson.dumps(old))
    assert (legacy.diagnosis, legacy.first_running_at) == (None, None)


def test_the_stream_gives_back_the_last_diagnosis_and_when_the_job_first_ran() -> None:
    created = datetime(2026, 1, 1, tzinfo=UTC)
    data = {
        "event_id": "job.c.u1.3",
        "change": "diagnosis",
        "sequence": 3,
        "job": {"namespace": NS, "name": "bert", "uid": "u1", "resource_version": "9"},
        "phase": "Running",
        "terminal": False,
        "created_at": created.isoformat(),
        "queue_wait_seconds": 30.0,
        "run_seconds": 60.0,
        "diagnosis": _diagnosis().model_dump(mode="json"),
    }
    stored = parse_stored(orjson.dumps({"data": data}))
    assert stored is not None
    assert stored.head.record is not None
    assert stored.head.record.diagnosis is not None
    assert stored.head.record.diagnosis.category is DiagnosisCategory.OOM_KILLED
    assert stored.head.record.first_running_at == created + timedelta(seconds=30)
    del data["diagnosis"], data["run_seconds"]
    older = parse_stored(orjson.dumps({"data": data}))
    assert older is not None
    assert older.head.record is not None
    assert (older.head.record.diagnosis, older.head.record.first_running_at) == (None, None)
