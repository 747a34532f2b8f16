"""Requested resources per kind (replicas x per-pod requests) with the GPU product, and job times."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from diagnosis_testkit import T0

from trainwatch_common.events.diagnosis import JobResources
from trainwatch_watcher.diagnosis import job_times, summarize_resources
from trainwatch_watcher.diagnosis.resources import parse_quantity, pod_requests

H100 = "NVIDIA-H100-80GB-HBM3"


def container(
    name: str = "main",
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": name, "image": "train:v1", "resources": resources, **extra}


def template(
    *containers: dict[str, Any], node_selector: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": list(containers), **spec}
    if node_selector:
        body["nodeSelector"] = node_selector
    return {"metadata": {"labels": {"app": "x"}}, "spec": body}


GPU_POD = template(
    container(requests={"cpu": "16", "memory": "128Gi"}, limits={"nvidia.com/gpu": 8, "memory": "128Gi"}),
    node_selector={"nvidia.com/gpu.product": H100},
)
CPU_POD = template(container(requests={"cpu": "4", "memory": "16Gi"}))


def expect(
    resources: JobResources, *, pods: int, gpus: int, cpu: float, memory_gi: int, product: str | None
) -> None:
    assert resources.pods == pods
    assert resources.gpus == gpus
    assert resources.gpu_resource == ("nvidia.com/gpu" if gpus else None)
    assert resources.cpu == cpu
    assert resources.memory_bytes == memory_gi * 2**30
    assert resources.gpu_product == product
    assert resources.partial is False


@pytest.mark.parametrize(
    ("kind", "key", "roles"),
    [
        ("pytorchjob", "pytorchReplicaSpecs", ("Master", "Worker")),
        ("tfjob", "tfReplicaSpecs", ("Chief", "Worker")),
        ("mpijob", "mpiReplicaSpecs", ("Launcher", "Worker")),
        ("xgboostjob", "xgbReplicaSpecs", ("Master", "Worker")),
        ("paddlejob", "paddleReplicaSpecs", ("Master", "Worker")),
        ("jaxjob", "jaxReplicaSpecs", ("Coordinator", "Worker")),
    ],
)
def test_kubeflow_replica_specs(kind: str, key: str, roles: tuple[str, str]) -> None:
    first, workers = roles
    job = {"spec": {key: {first: {"template": CPU_POD}, workers: {"replicas": 3, "template": GPU_POD}}}}
    expect(summarize_resources(job, kind), pods=4, gpus=24, cpu=52.0, memory_gi=400, product=H100)


def test_batch_job_parallelism_capped_by_completions() -> None:
    job = {"spec": {"parallelism": 4, "completions": 2, "template": GPU_POD}}
    expect(summarize_resources(job, "job"), pods=2, gpus=16, cpu=32.0, memory_gi=256, product=H100)
    expect(
        summarize_resources({"spec": {"template": CPU_POD}}, "job"),
        pods=1,
        gpus=0,
        cpu=4.0,
        memory_gi=16,
        product=None,
    )


def test_jobset_replicated_jobs_times_parallelism() -> None:
    job = {
        "spec": {
            "replicatedJobs": [
                {"name": "driver", "template": {"spec": {"template": CPU_POD}}},
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {"spec": {"parallelism": 4, "completions": 4, "template": GPU_POD}},
                },
            ]
        }
    }
    expect(summarize_resources(job, "jobset"), pods=9, gpus=64, cpu=132.0, memory_gi=1040, product=H100)


def test_trainjob_nodes_times_resources_per_node() -> None:
    job = {
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "numNodes": 4,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8", "cpu": "32", "memory": "256Gi"}},
            },
            "podTemplateOverrides": [
                {
                    "targetJobs": [{"name": "node"}],
                    "spec": {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}},
                }
            ],
        }
    }
    expect(
        summarize_resources(job, "trainjob"),
        pods=4,
        gpus=32,
        cpu=128.0,
        memory_gi=1024,
        product="nvidia-h100-80gb",
    )


def test_trainjob_without_trainer_resources_is_partial() -> None:
    resources = summarize_resources({"spec": {"runtimeRef": {"name": "torch-distributed"}}}, "trainjob")
    assert resources.partial
    assert resources.gpus == 0


def test_volcano_tasks() -> None:
    job = {
        "spec": {
            "minAvailable": 3,
            "tasks": [
                {"name": "ps", "replicas": 1, "template": CPU_POD},
                {"name": "worker", "replicas": 2, "template": GPU_POD},
            ],
        }
    }
    expect(summarize_resources(job, "volcanojob"), pods=3, gpus=16, cpu=36.0, memory_gi=272, product=H100)


def test_rayjob_head_and_worker_groups() -> None:
    job = {
        "spec": {
            "entrypoint": "python train.py",
            "rayClusterSpec": {
                "headGroupSpec": {"rayStartParams": {}, "template": CPU_POD},
                "workerGroupSpecs": [
                    {
                        "groupName": "gpu",
                        "replicas": 2,
                        "minReplicas": 1,
                        "maxReplicas": 4,
                        "numOfHosts": 2,
                        "template": GPU_POD,
                    },
                    {"groupName": "cpu", "minReplicas": 3, "template": CPU_POD},
                ],
            },
        }
    }
    expect(summarize_resources(job, "rayjob"), pods=8, gpus=32, cpu=80.0, memory_gi=576, product=H100)


def test_rayjob_on_an_existing_cluster_is_partial() -> None:
    assert summarize_resources({"spec": {"clusterSelector": {"ray.io/cluster": "shared"}}}, "rayjob").partial


def test_gpu_product_from_required_node_affinity() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "nvidia.com/gpu.product",
                                "operator": "In",
                                "values": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"],
                            }
                        ]
                    }
                ]
            }
        }
    }
    job = {"spec": {"template": template(container(limits={"nvidia.com/gpu": "1"}), affinity=affinity)}}
    resources = summarize_resources(job, "job")
    assert resources.gpu_product == "NVIDIA-A100-SXM4-80GB,NVIDIA-H100-80GB-HBM3"
    assert resources.gpus == 1


@pytest.mark.parametrize(
    "label",
    ["cloud.google.com/gke-accelerator", "k8s.amazonaws.com/accelerator", "aliyun.accelerator/nvidia_name"],
)
def test_gpu_product_from_cloud_labels(label: str) -> None:
    job = {
        "spec": {
            "template": template(container(limits={"nvidia.com/gpu": "1"}), node_selector={label: "a10g"})
        }
    }
    assert summarize_resources(job, "job").gpu_product == "a10g"


def test_gpu_product_from_preferred_affinity_when_nothing_is_required() -> None:
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {
                        "matchExpressions": [
                            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["L4"]}
                        ]
                    },
                },
                {
                    "weight": 90,
                    "preference": {
                        "matchExpressions": [
                            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["A100"]}
                        ]
                    },
                },
            ]
        }
    }
    job = {"spec": {"template": template(container(limits={"nvidia.com/gpu": "1"}), affinity=affinity)}}
    assert summarize_resources(job, "job").gpu_product == "A100,L4"


def test_requests_else_limits_and_other_accelerators() -> None:
    spec = template(
        container(
            requests={"cpu": "500m"},
            limits={
                "cpu": "2",
                "memory": "1G",
                "amd.com/gpu": "2",
                "habana.ai/gaudi": "1",
                "hugepages-2Mi": "1Gi",
            },
        )
    )["spec"]
    assert pod_requests(spec) == {
        "cpu": Decimal("0.500"),
        "memory": Decimal(10**9),
        "amd.com/gpu": Decimal(2),
        "habana.ai/gaudi": Decimal(1),
        "hugepages-2Mi": Decimal(2**30),
    }
    resources = summarize_resources({"spec": {"template": {"spec": spec}}}, "job")
    assert (resources.gpus, resources.gpu_resource, resources.extended) == (
        2,
        "amd.com/gpu",
        {"habana.ai/gaudi": 1},
    )


def test_init_containers_and_sidecars_count_as_the_scheduler_counts_them() -> None:
    spec = template(
        container(requests={"cpu": "2", "memory": "4Gi"}),
        initContainers=[
            container("sidecar", requests={"cpu": "1", "memory": "1Gi"}, restartPolicy="Always"),
            container("download", requests={"cpu": "8", "memory": "2Gi"}),
        ],
        overhead={"cpu": "250m"},
    )["spec"]
    requests = pod_requests(spec)
    # cpu: max(app 2 + sidecar 1, init 8 + sidecar 1) + overhead 0.25; memory: max(4 + 1, 2 + 1)
    assert requests["cpu"] == Decimal("9.25")
    assert requests["memory"] == 5 * 2**30


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("2", Decimal(2)),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("1e3", Decimal(1000)),
        ("128974848", Decimal(128974848)),
        ("129M", Decimal(129 * 10**6)),
        ("100Ki", Decimal(102400)),
        (4, Decimal(4)),
        ("lots", None),
        ("-1", None),
        (True, None),
        ("", None),
    ],
)
def test_parse_quantity(text: object, value: Decimal | None) -> None:
    assert parse_quantity(text) == value


def test_odd_objects_sum_to_nothing() -> None:
    assert summarize_resources({"spec": "x"}, "pytorchjob") == JobResources()
    assert summarize_resources({}, "sparkjob").partial
    replica = {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": "3", "template": GPU_POD}}}}
    assert summarize_resources(replica, "pytorchjob").pods == 1  # an unreadable count is the default


def test_queue_wait_and_run_time() -> None:
    created, running, finished, now = (
        T0,
        T0 + timedelta(minutes=5),
        T0 + timedelta(minutes=65),
        T0 + timedelta(hours=2),
    )
    assert job_times(created, running, finished, now, terminal=True) == (300.0, 3600.0)
    assert job_times(created, running, None, now) == (300.0, 6900.0)
    assert job_times(created, None, None, now) == (7200.0, None)  # still waiting
    assert job_times(created, None, finished, now, terminal=True) == (3900.0, None)  # failed before running
    assert job_times(None, None, None, now) == (None, None)
