"""Realistic objects for the diagnosis tests, with the field names of ../shared/reference/diagnosis.md.

Every builder returns the decoded JSON a cluster sends (a pod with managedFields, spec and status;
an Event in core/v1 or events.k8s.io/v1 form; a Kueue Workload; a PodGroup), so the tests go
through the same ``trim_*`` functions as the watcher.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from trainwatch_common.events.diagnosis import Diagnosis
from trainwatch_common.events.jobs import Phase, SubPhase
from trainwatch_watcher.diagnosis import (
    JobEvidence,
    KueueWorkload,
    PodEvidence,
    PodGroupEvidence,
    WarningEvent,
    diagnose,
    job_evidence,
    trim_event,
    trim_pod,
    trim_podgroup,
    trim_workload,
)

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=1)
NS = "team-a"


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def ts(minutes: float) -> str:
    return at(minutes).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- containers ---------------------------------------------------------------------------------


def running(minutes: float = 1) -> dict[str, Any]:
    return {"running": {"startedAt": ts(minutes)}}


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    body: dict[str, Any] = {"reason": reason}
    if message:
        body["message"] = message
    return {"waiting": body}


def terminated(
    reason: str, exit_code: int, finished: float = 10, started: float = 1, message: str = ""
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "reason": reason,
        "exitCode": exit_code,
        "startedAt": ts(started),
        "finishedAt": ts(finished),
        "containerID": "containerd://" + "ab" * 32,
    }
    if message:
        body["message"] = message
    return {"terminated": body}


def container_status(
    name: str, state: dict[str, Any], *, last: dict[str, Any] | None = None, restarts: int = 0
) -> dict[str, Any]:
    return {
        "name": name,
        "state": state,
        "lastState": last or {},
        "ready": "running" in state,
        "restartCount": restarts,
        "image": "registry.example.com/ml/train:v1.2.3",
        "imageID": "registry.example.com/ml/train@sha256:" + "cd" * 32,
        "containerID": "containerd://" + "ef" * 32,
        "started": "running" in state,
    }


# --- pods ---------------------------------------------------------------------------------------


def condition(
    type_: str, status: str, reason: str = "", message: str = "", minutes: float = 0
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": type_,
        "status": status,
        "lastTransitionTime": ts(minutes),
        "lastProbeTime": None,
    }
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


def pod(
    name: str,
    labels: dict[str, str],
    *,
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    phase: str = "Running",
    node: str | None = "gpu-node-7",
    conditions: list[dict[str, Any]] | None = None,
    reason: str | None = None,
    message: str | None = None,
    annotations: dict[str, str] | None = None,
    container_name: str = "main",
) -> dict[str, Any]:
    """A pod as the API server sends it, managedFields and all."""
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": conditions
        if conditions is not None
        else [
            condition("PodReadyToStartContainers", "True", minutes=1),
            condition("Initialized", "True", minutes=1),
            condition("Ready", "True", minutes=2),
            condition("ContainersReady", "True", minutes=2),
            condition("PodScheduled", "True", minutes=0),
        ],
        "hostIP": "10.0.3.17",
        "podIP": "10.244.3.41",
        "podIPs": [{"ip": "10.244.3.41"}],
        "startTime": ts(0.5),
        "qosClass": "Burstable",
        "containerStatuses": containers
        if containers is not None
        else [container_status(container_name, running())],
    }
    if init is not None:
        status["initContainerStatuses"] = init
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": container_name,
                "image": "registry.example.com/ml/train:v1.2.3",
                "command": ["torchrun", "--nnodes=4", "--nproc-per-node=8", "train.py"],
                "env": [{"name": f"VAR_{i}", "value": "x" * 20} for i in range(15)],
                "resources": {
                    "limits": {"nvidia.com/gpu": "8", "memory": "512Gi"},
                    "requests": {"cpu": "32"},
                },
                "volumeMounts": [
                    {"name": "data", "mountPath": "/data"},
                    {"name": "dshm", "mountPath": "/dev/shm"},
                ],
            }
        ],
        "restartPolicy": "OnFailure",
        "schedulerName": "default-scheduler",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}, {"name": "dshm"}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "resourceVersion": "123456",
            "creationTimestamp": ts(0),
            "labels": labels,
            "annotations": annotations or {},
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "name": "bert",
                    "uid": "uid-bert",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "training-operator",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": ts(0),
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {k: {} for k in labels}}},
                },
                {
                    "manager": "kubelet",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": ts(2),
                    "fieldsType": "FieldsV1",
                    "subresource": "status",
                    "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {}}},
                },
            ],
        },
        "spec": spec,
        "status": status,
    }


def unschedulable(message: str, minutes: float = 0) -> list[dict[str, Any]]:
    return [condition("PodScheduled", "False", "Unschedulable", message, minutes)]


def disruption(reason: str, message: str, minutes: float) -> dict[str, Any]:
    return condition("DisruptionTarget", "True", reason, message, minutes)


# --- pod labels per kind (reference §1.1) --------------------------------------------------------

KUBEFLOW_CONTROLLERS = {
    "pytorchjob": "pytorchjob-controller",
    "tfjob": "tfjob-controller",
    "xgboostjob": "xgboostjob-controller",
    "paddlejob": "paddlejob-controller",
    "jaxjob": "jaxjob-controller",
    "mpijob": "mpijob-controller",
}


def kubeflow_labels(kind: str, job: str, rtype: str, index: int) -> dict[str, str]:
    labels = {
        "training.kubeflow.org/operator-name": KUBEFLOW_CONTROLLERS[kind],
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/replica-type": rtype,
        "training.kubeflow.org/replica-index": str(index),
    }
    if rtype in ("master", "launcher"):
        labels["training.kubeflow.org/job-role"] = "master"
    return labels


def mpi_v2_labels(job: str, role: str, index: int | None) -> dict[str, str]:
    labels = {
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/job-role": role,
    }
    if index is not None:
        labels["training.kubeflow.org/replica-index"] = str(index)
    if role == "launcher":
        labels |= batch_labels(f"{job}-launcher", "uid-launcher")
    return labels


def batch_labels(job: str, uid: str, index: int | None = None) -> dict[str, str]:
    labels = {
        "batch.kubernetes.io/job-name": job,
        "job-name": job,
        "batch.kubernetes.io/controller-uid": uid,
        "controller-uid": uid,
    }
    if index is not None:
        labels["batch.kubernetes.io/job-completion-index"] = str(index)
    return labels


def jobset_labels(jobset: str, rjob: str, index: int) -> dict[str, str]:
    return {
        "jobset.sigs.k8s.io/jobset-name": jobset,
        "jobset.sigs.k8s.io/jobset-uid": f"uid-{jobset}",
        "jobset.sigs.k8s.io/replicatedjob-name": rjob,
        "jobset.sigs.k8s.io/replicatedjob-replicas": "4",
        "jobset.sigs.k8s.io/job-index": str(index),
        "jobset.sigs.k8s.io/job-global-index": str(index),
        "jobset.sigs.k8s.io/restart-attempt": "0",
    } | batch_labels(f"{jobset}-{rjob}-{index}", f"uid-{jobset}-{rjob}-{index}", 0)


def volcano_labels(job: str, task: str, index: int) -> dict[str, str]:
    return {
        "volcano.sh/job-name": job,
        "volcano.sh/job-namespace": NS,
        "volcano.sh/queue-name": "research",
        "volcano.sh/task-spec": task,
        "volcano.sh/task-index": str(index),
    }


def ray_labels(cluster: str, node_type: str, group: str) -> dict[str, str]:
    return {
        "ray.io/cluster": cluster,
        "ray.io/node-type": node_type,
        "ray.io/group": group,
        "ray.io/identifier": f"{cluster}-{node_type}",
        "ray.io/is-ray-node": "yes",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }


@dataclass(frozen=True)
class KindCase:
    """One job kind: how its failing pod is labelled and named, and how its job says "failed"."""

    kind: str
    api_version: str
    pod_name: str
    labels: dict[str, str]
    role: str | None
    index: int | None
    container: str
    failed_reason: str
    failed_message: str


def kind_cases() -> list[KindCase]:
    kf = []
    for kind, api, rtype, container in (
        ("pytorchjob", "kubeflow.org/v1", "worker", "pytorch"),
        ("tfjob", "kubeflow.org/v1", "worker", "tensorflow"),
        ("xgboostjob", "kubeflow.org/v1", "worker", "xgboost"),
        ("paddlejob", "kubeflow.org/v1", "worker", "paddle"),
        ("jaxjob", "kubeflow.org/v1", "worker", "jax"),
        ("mpijob", "kubeflow.org/v1", "worker", "mpi"),
    ):
        prefix = {
            "pytorchjob": "PyTorchJob",
            "tfjob": "TFJob",
            "xgboostjob": "XGBoostJob",
            "paddlejob": "PaddleJob",
            "jaxjob": "JAXJob",
            "mpijob": "MPIJob",
        }[kind]
        kf.append(
            KindCase(
                kind,
                api,
                f"bert-{rtype}-3",
                kubeflow_labels(kind, "bert", rtype, 3),
                rtype,
                3,
                container,
                f"{prefix}Failed",
                f"{prefix} bert is failed because 1 Worker replica(s) failed.",
            )
        )
    return [
        *kf,
        KindCase(
            "mpijob",
            "kubeflow.org/v2beta1",
            "bert-worker-3",
            mpi_v2_labels("bert", "worker", 3),
            "worker",
            3,
            "mpi",
            "MPIJobFailed",
            "MPIJob team-a/bert has failed",
        ),
        KindCase(
            "job",
            "batch/v1",
            "bert-3-x7k2p",
            batch_labels("bert", "uid-bert", 3),
            None,
            3,
            "main",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        ),
        KindCase(
            "jobset",
            "jobset.x-k8s.io/v1alpha2",
            "bert-workers-3-0-abcde",
            jobset_labels("bert", "workers", 3),
            "workers",
            3,
            "main",
            "FailedJobs",
            "jobset failed due to one or more job failures (first failed job: bert-workers-3)",
        ),
        KindCase(
            "trainjob",
            "trainer.kubeflow.org/v1alpha1",
            "bert-node-3-0-abcde",
            jobset_labels("bert", "node", 3),
            "node",
            3,
            "node",
            "FailedJobs",
            "jobset failed due to one or more job failures (first failed job: bert-node-3)",
        ),
        KindCase(
            "volcanojob",
            "batch.volcano.sh/v1alpha1",
            "bert-worker-3",
            volcano_labels("bert", "worker", 3),
            "worker",
            3,
            "main",
            "",
            "",
        ),
        KindCase(
            "rayjob",
            "ray.io/v1",
            "bert-raycluster-x7k2p-gpu-worker-abcde",
            ray_labels("bert-raycluster-x7k2p", "worker", "gpu-group"),
            "gpu-group",
            None,
            "ray-worker",
            "AppFailed",
            "Job entrypoint command failed with exit code 1",
        ),
    ]


def case_id(case: KindCase) -> str:
    return case.kind + ("-v2beta1" if case.api_version.endswith("v2beta1") else "")


# --- job, events, Kueue, PodGroups ----------------------------------------------------------------


def job(
    kind: str,
    phase: Phase,
    *,
    conditions: list[dict[str, Any]] | None = None,
    reason: str | None = None,
    message: str | None = None,
    terminal: bool | None = None,
    sub_phase: SubPhase | None = None,
    api_version: str = "v1",
    name: str = "bert",
    status: dict[str, Any] | None = None,
) -> JobEvidence:
    obj = {
        "apiVersion": api_version,
        "metadata": {"name": name, "namespace": NS, "uid": "uid-bert", "creationTimestamp": ts(0)},
        "status": {"conditions": conditions or [], **(status or {})},
    }
    return job_evidence(
        kind,
        obj,
        phase=phase,
        sub_phase=sub_phase,
        terminal=phase in (Phase.FAILED, Phase.SUCCEEDED) if terminal is None else terminal,
        reason=reason,
        message=message,
    )


def failed_condition(reason: str, message: str, minutes: float = 20, type_: str = "Failed") -> dict[str, Any]:
    return condition(type_, "True", reason, message, minutes)


def core_event(
    reason: str,
    message: str,
    *,
    kind: str = "Pod",
    name: str = "bert-worker-3",
    type_: str = "Warning",
    count: int = 1,
    first: float = 5,
    last: float = 9,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.17d3a", "namespace": NS},
        "involvedObject": {
            "kind": kind,
            "namespace": NS,
            "name": name,
            "uid": f"uid-{name}",
            "apiVersion": "v1",
        },
        "reason": reason,
        "message": message,
        "source": {"component": "kubelet", "host": "gpu-node-7"},
        "firstTimestamp": ts(first),
        "lastTimestamp": ts(last),
        "count": count,
        "type": type_,
    }


def new_event(
    reason: str,
    note: str,
    *,
    kind: str = "Pod",
    name: str = "bert-worker-3",
    count: int = 3,
    minutes: float = 9,
) -> dict[str, Any]:
    """events.k8s.io/v1, as the scheduler, Kueue >= 0.18 and JobSet write them."""
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.18a", "namespace": NS},
        "regarding": {"kind": kind, "namespace": NS, "name": name},
        "reason": reason,
        "note": note,
        "type": "Warning",
        "action": "Scheduling",
        "reportingController": "default-scheduler",
        "eventTime": ts(minutes - 4) + "",
        "series": {"count": count, "lastObservedTime": ts(minutes)},
    }


def workload(
    conditions: list[dict[str, Any]], *, queue: str = "gpu-queue", cluster_queue: str | None = None
) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": conditions}
    if cluster_queue:
        status["admission"] = {"clusterQueue": cluster_queue, "podSetAssignments": []}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": "pytorchjob-bert-8d56e",
            "namespace": NS,
            "creationTimestamp": ts(0),
            "labels": {"kueue.x-k8s.io/job-uid": "uid-bert"},
        },
        "spec": {"queueName": queue, "podSets": [{"name": "main", "count": 4}]},
        "status": status,
    }


def volcano_podgroup(
    phase: str, *, min_member: int = 4, running: int = 0, message: str | None = None
) -> dict[str, Any]:
    conditions = []
    if message is not None:
        conditions.append(
            {
                "type": "Unschedulable",
                "status": "True",
                "transitionID": "t-1",
                "lastTransitionTime": ts(2),
                "reason": "NotEnoughResources",
                "message": message,
            }
        )
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "bert-uid-bert", "namespace": NS, "creationTimestamp": ts(0)},
        "spec": {"minMember": min_member, "queue": "research"},
        "status": {"phase": phase, "running": running, "conditions": conditions},
    }


def sp_podgroup(phase: str, *, min_member: int = 4, running: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "bert", "namespace": NS, "creationTimestamp": ts(0)},
        "spec": {"minMember": min_member, "scheduleTimeoutSeconds": 60},
        "status": {"phase": phase, "running": running, "scheduleStartTime": ts(0)},
    }


def run(
    job_: JobEvidence,
    pods: list[dict[str, Any]] = (),  # type: ignore[assignment]
    events: list[dict[str, Any]] = (),  # type: ignore[assignment]
    workload_: dict[str, Any] | None = None,
    podgroup: dict[str, Any] | None = None,
    *,
    pending: dict[str, Any] | None = None,
    now: datetime = NOW,
) -> Diagnosis | None:
    """diagnose() over raw objects, trimmed exactly as the watcher trims them."""
    trimmed_pods: list[PodEvidence] = [p for raw in pods if (p := trim_pod(raw)) is not None]
    trimmed_events: list[WarningEvent] = [e for raw in events if (e := trim_event(raw)) is not None]
    wl: KueueWorkload | None = trim_workload(workload_, pending) if workload_ else None
    pg: PodGroupEvidence | None = trim_podgroup(podgroup) if podgroup else None
    return diagnose(job_, trimmed_pods, trimmed_events, wl, pg, now)
