"""Realistic job manifests for every kind (the shapes of the upstream examples)."""

from __future__ import annotations

import zlib
from typing import Any

from kubesim.kinds import KindSpec

__all__ = ["manifest", "owner_reference", "pod_template"]

_IMAGES = {
    "PyTorchJob": ("pytorch", "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727"),
    "TFJob": ("tensorflow", "kubeflow/tf-mnist-with-summaries:latest"),
    "MPIJob": ("mpi", "mpioperator/tensorflow-benchmarks:latest"),
    "XGBoostJob": ("xgboost", "docker.io/kubeflow/xgboost-dist-iris:latest"),
    "PaddleJob": ("paddle", "registry.baidubce.com/paddlepaddle/paddle:2.4.0rc0-cpu"),
    "JAXJob": ("jax", "docker.io/kubeflow/jaxjob-simple:latest"),
}
_REPLICA_KEY = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
}


def pod_template(
    container: str, image: str, *, gpus: int = 0, restart_policy: str = "OnFailure"
) -> dict[str, Any]:
    resources: dict[str, Any] = {
        "requests": {"cpu": "4", "memory": "16Gi"},
        "limits": {"cpu": "8", "memory": "32Gi"},
    }
    if gpus:
        resources["limits"]["nvidia.com/gpu"] = str(gpus)
    return {
        "metadata": {"annotations": {"sidecar.istio.io/inject": "false"}},
        "spec": {
            "restartPolicy": restart_policy,
            "containers": [
                {
                    "name": container,
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": [
                        "python3",
                        "/opt/train/train.py",
                        "--epochs=10",
                        "--batch-size=256",
                        "--checkpoint-dir=/mnt/ckpt",
                    ],
                    "env": [
                        {"name": "NCCL_DEBUG", "value": "INFO"},
                        {"name": "OMP_NUM_THREADS", "value": "4"},
                        {"name": "WANDB_PROJECT", "value": "trainwatch-demo"},
                    ],
                    "resources": resources,
                    "volumeMounts": [
                        {"name": "dshm", "mountPath": "/dev/shm"},
                        {"name": "ckpt", "mountPath": "/mnt/ckpt"},
                    ],
                }
            ],
            "volumes": [
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
                {"name": "ckpt", "persistentVolumeClaim": {"claimName": "checkpoints"}},
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _kubeflow_spec(spec: KindSpec, restart_policy: str) -> dict[str, Any]:
    container, image = _IMAGES[spec.kind]
    replicas: dict[str, Any] = {}
    for rtype in spec.replica_types:
        count = 1 if rtype in ("Master", "Chief", "Launcher", "PS") else 2
        replicas[rtype] = {
            "replicas": count,
            "restartPolicy": restart_policy,
            "template": pod_template(
                container, image, gpus=0 if rtype == "Launcher" else 1, restart_policy="Never"
            ),
        }
    out: dict[str, Any] = {
        _REPLICA_KEY[spec.kind]: replicas,
        "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": 3, "suspend": False},
    }
    if spec.family == "mpi-v2":
        out = {
            "slotsPerWorker": 1,
            "runPolicy": out["runPolicy"],
            "mpiImplementation": "OpenMPI",
            "launcherCreationPolicy": "AtStartup",
            "mpiReplicaSpecs": replicas,
        }
    return out


# Who submitted a demo job (the annotation a cluster's watch options can name as the owner).
DEMO_OWNERS = ("alice@example.com", "bob@example.com", "chen.wei@example.com")


def manifest(
    spec: KindSpec,
    name: str,
    namespace: str,
    *,
    labels: dict[str, str] | None = None,
    restart_policy: str = "OnFailure",
) -> dict[str, Any]:
    """A job of ``spec`` as a user would submit it (no status)."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {"app.kubernetes.io/part-of": "trainwatch-demo", "team": "ml-platform", **(labels or {})},
        "annotations": {"trainwatch.io/owner": DEMO_OWNERS[zlib.crc32(name.encode()) % len(DEMO_OWNERS)]},
    }
    body: dict[str, Any] = {"apiVersion": spec.api_version, "kind": spec.kind, "metadata": meta}
    family = spec.family
    if family in ("kubeflow", "mpi-v2"):
        body["spec"] = _kubeflow_spec(spec, restart_policy)
    elif family == "batch":
        body["spec"] = {
            "backoffLimit": 4,
            "completions": 1,
            "parallelism": 1,
            "suspend": False,
            "template": pod_template("train", "python:3.11-slim", restart_policy="Never"),
        }
    elif family == "trainjob":
        body["spec"] = {
            "runtimeRef": {
                "apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime",
                "name": "torch-distributed",
            },
            "trainer": {
                "numNodes": 2,
                "command": ["torchrun", "train.py"],
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": "1"}},
            },
            "suspend": False,
        }
    elif family == "jobset":
        body["spec"] = {
            "suspend": False,
            "failurePolicy": {"maxRestarts": 3},
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "parallelism": 1,
                            "completions": 1,
                            "backoffLimit": 0,
                            "template": pod_template("train", "python:3.11-slim", restart_policy="Never"),
                        }
                    },
                }
            ],
        }
    elif family == "volcano":
        body["spec"] = {
            "minAvailable": 3,
            "schedulerName": "volcano",
            "maxRetry": 3,
            "queue": "default",
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
            "plugins": {"ssh": [], "env": [], "svc": []},
            "tasks": [
                {
                    "replicas": 3,
                    "name": "worker",
                    "template": pod_template("worker", "nginx", restart_policy="OnFailure"),
                }
            ],
        }
    elif family == "ray":
        body["spec"] = {
            "entrypoint": "python /home/ray/samples/sample_code.py",
            "suspend": False,
            "shutdownAfterJobFinishes": True,
            "backoffLimit": 2,
            "rayClusterSpec": {
                "rayVersion": "2.41.0",
                "headGroupSpec": {
                    "rayStartParams": {},
                    "template": pod_template("ray-head", "rayproject/ray:2.41.0"),
                },
                "workerGroupSpecs": [
                    {
                        "groupName": "small-group",
                        "replicas": 1,
                        "minReplicas": 1,
                        "maxReplicas": 5,
                        "rayStartParams": {},
                        "template": pod_template("ray-worker", "rayproject/ray:2.41.0"),
                    }
                ],
            },
        }
    return body
