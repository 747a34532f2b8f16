"""Builders of job objects shaped like the real controllers write them (reference §2).

Objects are plain dicts, as orjson decodes an API server's JSON. Times are RFC 3339 strings with
a ``Z`` suffix, as the API server serializes metav1.Time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

T0 = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)


def ts(minutes: float = 0) -> str:
    """T0 plus ``minutes``, serialized like metav1.Time."""
    return (T0 + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def at(minutes: float = 0) -> datetime:
    return T0 + timedelta(minutes=minutes)


def metadata(
    name: str = "train-1",
    *,
    namespace: str = "team-a",
    uid: str = "6f1c9a52-0d7e-4c57-9d2b-1b1f0e1d2c3a",
    labels: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "resourceVersion": "250",
        "generation": 1,
        "creationTimestamp": ts(0),
    }
    if labels:
        meta["labels"] = labels
    if owner:
        meta["ownerReferences"] = [owner]
    return meta


KUEUE = {"kueue.x-k8s.io/queue-name": "team-a-queue"}


def k8s_condition(
    type_: str, status: str, reason: str = "", message: str = "", minutes: float = 1
) -> dict[str, Any]:
    """A batch/v1 JobCondition."""
    cond: dict[str, Any] = {
        "type": type_,
        "status": status,
        "lastProbeTime": ts(minutes),
        "lastTransitionTime": ts(minutes),
    }
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def kubeflow_condition(
    type_: str,
    status: str,
    kind: str = "PyTorchJob",
    reason: str = "",
    minutes: float = 1,
    name: str = "train-1",
) -> dict[str, Any]:
    """A Kubeflow JobCondition; reasons are "<Kind><Reason>" (pkg/util/status.go)."""
    verbs = {
        "Created": "is created.",
        "Running": "is running.",
        "Restarting": "is restarting because 1 Worker replica(s) failed.",
        "Succeeded": "is successfully completed.",
        "Failed": "is failed because 1 Worker replica(s) failed.",
        "Suspended": "is suspended.",
    }
    return {
        "type": type_,
        "status": status,
        "reason": reason or f"{kind}{type_}",
        "message": f"{kind} team-a/{name} {verbs.get(type_, 'changed.')}",
        "lastUpdateTime": ts(minutes),
        "lastTransitionTime": ts(minutes),
    }


def meta_condition(
    type_: str, status: str, reason: str, message: str = "", minutes: float = 1
) -> dict[str, Any]:
    """A metav1.Condition (TrainJob, JobSet): reason and message are required there."""
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message or reason,
        "lastTransitionTime": ts(minutes),
        "observedGeneration": 1,
    }


def batch_job(
    status: dict[str, Any] | None = None, *, labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata("pi", labels=labels),
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 4,
            "template": {"spec": {"containers": [{"name": "pi", "image": "perl:5.34.0"}]}},
            **spec,
        },
    }
    if status is not None:
        body["status"] = status
    return body


# (kind, spec key, replica types) of the Kubeflow v1 kinds.
KUBEFLOW_V1_KINDS = [
    ("PyTorchJob", "pytorchReplicaSpecs", ("Master", "Worker")),
    ("TFJob", "tfReplicaSpecs", ("PS", "Worker")),
    ("MPIJob", "mpiReplicaSpecs", ("Launcher", "Worker")),
    ("XGBoostJob", "xgbReplicaSpecs", ("Master", "Worker")),
    ("PaddleJob", "paddleReplicaSpecs", ("Master", "Worker")),
    ("JAXJob", "jaxReplicaSpecs", ("Worker",)),
]


def kubeflow_job(
    kind: str = "PyTorchJob",
    status: dict[str, Any] | None = None,
    *,
    spec_key: str = "pytorchReplicaSpecs",
    roles: tuple[str, ...] = ("Master", "Worker"),
    api_version: str = "kubeflow.org/v1",
    labels: dict[str, str] | None = None,
    run_policy: dict[str, Any] | None = None,
) -> dict[str, Any]:
    replica_specs = {
        role: {
            "replicas": 1 if role in ("Master", "Launcher", "Chief") else 2,
            "restartPolicy": "OnFailure",
            "template": {"spec": {"containers": [{"name": "main", "image": "example/train:1"}]}},
        }
        for role in roles
    }
    body: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": metadata(labels=labels),
        "spec": {spec_key: replica_specs, "runPolicy": run_policy or {"cleanPodPolicy": "None"}},
    }
    if status is not None:
        body["status"] = status
    return body


def mpi_v2_job(status: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    return kubeflow_job(
        "MPIJob",
        status,
        spec_key="mpiReplicaSpecs",
        roles=("Launcher", "Worker"),
        api_version="kubeflow.org/v2beta1",
        **kwargs,
    )


def train_job(
    status: dict[str, Any] | None = None, *, labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": metadata("multi-node-example", labels=labels),
        "spec": {
            "runtimeRef": {
                "apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime",
                "name": "torch-distributed",
            },
            "trainer": {"numNodes": 3},
            **spec,
        },
    }
    if status is not None:
        body["status"] = status
    return body


def step(name: str, active: int = 0, ready: int = 0, succeeded: int = 0, failed: int = 0) -> dict[str, Any]:
    """One jobsStatus / replicatedJobsStatus entry (all fields are required there)."""
    return {
        "name": name,
        "active": active,
        "ready": ready,
        "succeeded": succeeded,
        "failed": failed,
        "suspended": 0,
    }


def jobset(
    status: dict[str, Any] | None = None, *, labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": metadata("restartjobset-action-example", labels=labels),
        "spec": {
            "failurePolicy": {"maxRestarts": 3},
            "replicatedJobs": [
                {"name": "leader", "replicas": 1, "template": {"spec": {"completions": 2, "parallelism": 2}}},
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {"spec": {"completions": 2, "parallelism": 2}},
                },
            ],
            **spec,
        },
    }
    if status is not None:
        body["status"] = status
    return body


def volcano_job(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": metadata("test-job"),
        "spec": {
            "minAvailable": 3,
            "schedulerName": "volcano",
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
            "maxRetry": 5,
            "queue": "default",
            "tasks": [{"replicas": 6, "name": "default-nginx", "template": {"spec": {"containers": []}}}],
            **spec,
        },
    }
    if status is not None:
        body["status"] = status
    return body


def volcano_status(phase: str, *, history: tuple[str, ...] = (), **counts: Any) -> dict[str, Any]:
    """A Volcano JobStatus in ``phase`` after passing through ``history`` (one minute apart)."""
    phases = [*history, phase]
    return {
        "state": {"phase": phase, "lastTransitionTime": ts(len(phases) + 5)},
        "conditions": [{"status": p, "lastTransitionTime": ts(i + 1)} for i, p in enumerate(phases)],
        "minAvailable": 3,
        "version": len(phases),
        **counts,
    }


def podgroup(phase: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": metadata("test-job-6f1c9a52"),
        "spec": {"minMember": 3, "queue": "default"},
    }
    if phase is not None:
        body["status"] = {"phase": phase}
    return body


def ray_job(
    status: dict[str, Any] | None = None, *, labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": metadata("rayjob-sample", labels=labels),
        "spec": {
            "entrypoint": "python /home/ray/samples/sample_code.py",
            "shutdownAfterJobFinishes": True,
            **spec,
        },
    }
    if status is not None:
        body["status"] = status
    return body


def ray_status(deployment: str, job_status: str = "", **extra: Any) -> dict[str, Any]:
    status: dict[str, Any] = {
        "jobDeploymentStatus": deployment,
        "jobId": "rayjob-sample-abc12",
        "rayClusterName": "rayjob-sample-raycluster-x7k2p",
        "dashboardURL": "rayjob-sample-raycluster-x7k2p-head-svc.team-a.svc.cluster.local:8265",
        "startTime": ts(1),
        "observedGeneration": 1,
        **extra,
    }
    if job_status:
        status["jobStatus"] = job_status
    return status
