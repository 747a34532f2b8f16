"""Pod selectors per kind exactly as reference diagnosis.md §1.2, and roles from §1.1 labels."""

from __future__ import annotations

from typing import Any

import pytest
from diagnosis_testkit import (
    batch_labels,
    jobset_labels,
    kubeflow_labels,
    mpi_v2_labels,
    ray_labels,
    volcano_labels,
)

from trainwatch_watcher.diagnosis import KIND_POD_SELECTORS, index_of, pod_selector, role_of


def job_object(name: str = "bert", api_version: str = "kubeflow.org/v1", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "metadata": {"name": name, "namespace": "team-a", "uid": "u-1"},
        **extra,
    }


@pytest.mark.parametrize(
    ("kind", "api_version", "expected"),
    [
        ("job", "batch/v1", "batch.kubernetes.io/controller-uid=u-1"),
        (
            "pytorchjob",
            "kubeflow.org/v1",
            "training.kubeflow.org/operator-name=pytorchjob-controller,training.kubeflow.org/job-name=bert",
        ),
        (
            "tfjob",
            "kubeflow.org/v1",
            "training.kubeflow.org/operator-name=tfjob-controller,training.kubeflow.org/job-name=bert",
        ),
        (
            "xgboostjob",
            "kubeflow.org/v1",
            "training.kubeflow.org/operator-name=xgboostjob-controller,training.kubeflow.org/job-name=bert",
        ),
        (
            "paddlejob",
            "kubeflow.org/v1",
            "training.kubeflow.org/operator-name=paddlejob-controller,training.kubeflow.org/job-name=bert",
        ),
        (
            "jaxjob",
            "kubeflow.org/v1",
            "training.kubeflow.org/operator-name=jaxjob-controller,training.kubeflow.org/job-name=bert",
        ),
        (
            "mpijob",
            "kubeflow.org/v1",
            "training.kubeflow.org/operator-name=mpijob-controller,training.kubeflow.org/job-name=bert",
        ),
        (
            "mpijob",
            "kubeflow.org/v2beta1",
            "training.kubeflow.org/operator-name=mpi-operator,training.kubeflow.org/job-name=bert",
        ),
        ("jobset", "jobset.x-k8s.io/v1alpha2", "jobset.sigs.k8s.io/jobset-name=bert"),
        ("trainjob", "trainer.kubeflow.org/v1alpha1", "jobset.sigs.k8s.io/jobset-name=bert"),
        ("volcanojob", "batch.volcano.sh/v1alpha1", "volcano.sh/job-name=bert"),
    ],
)
def test_one_selector_per_kind(kind: str, api_version: str, expected: str) -> None:
    assert pod_selector(kind, job_object(api_version=api_version)) == (expected,)


def test_rayjob_selects_its_cluster_and_its_submitter() -> None:
    ray = job_object(api_version="ray.io/v1", status={"rayClusterName": "bert-raycluster-x7k2p"})
    assert pod_selector("rayjob", ray) == (
        "ray.io/cluster=bert-raycluster-x7k2p",
        "batch.kubernetes.io/job-name=bert,ray.io/originated-from-crd=RayJob",
    )
    # Before the cluster exists only the submitter can be selected.
    assert pod_selector("rayjob", job_object(api_version="ray.io/v1")) == (
        "batch.kubernetes.io/job-name=bert,ray.io/originated-from-crd=RayJob",
    )


def test_batch_job_legacy_labels_and_manual_selector() -> None:
    assert pod_selector("job", job_object(api_version="batch/v1"), legacy_job_labels=True) == (
        "controller-uid=u-1",
    )
    manual = job_object(
        api_version="batch/v1",
        spec={"manualSelector": True, "selector": {"matchLabels": {"b": "2", "a": "1"}}},
    )
    assert pod_selector("job", manual) == ("a=1,b=2",)


def test_unknown_kind_or_nameless_job_selects_nothing() -> None:
    assert pod_selector("sparkjob", job_object()) == ()
    assert pod_selector("pytorchjob", {"metadata": {}}) == ()
    assert pod_selector("job", {"metadata": {"name": "x"}}) == ()  # no uid yet


def test_cluster_wide_selectors_of_option_a() -> None:
    assert KIND_POD_SELECTORS["job"] == (
        "batch.kubernetes.io/controller-uid,!jobset.sigs.k8s.io/jobset-name,!training.kubeflow.org/job-name,"
        "!ray.io/originated-from-crd"
    )
    assert KIND_POD_SELECTORS["kubeflow"] == "training.kubeflow.org/job-name"
    assert KIND_POD_SELECTORS["raycluster"] == "ray.io/is-ray-node=yes"


def pod_with(labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "labels": labels, "annotations": annotations or {}}}


@pytest.mark.parametrize(
    ("labels", "role", "index"),
    [
        (kubeflow_labels("pytorchjob", "bert", "master", 0), "master", 0),
        (kubeflow_labels("pytorchjob", "bert", "worker", 5), "worker", 5),
        (kubeflow_labels("tfjob", "bert", "ps", 1), "ps", 1),
        (kubeflow_labels("tfjob", "bert", "chief", 0), "chief", 0),
        (kubeflow_labels("tfjob", "bert", "evaluator", 0), "evaluator", 0),
        (kubeflow_labels("mpijob", "bert", "launcher", 0), "launcher", 0),
        (mpi_v2_labels("bert", "launcher", None), "launcher", None),
        (mpi_v2_labels("bert", "worker", 2), "worker", 2),
        (jobset_labels("bert", "workers", 3), "workers", 3),
        (jobset_labels("bert", "node", 1), "node", 1),
        (jobset_labels("bert", "dataset-initializer", 0), "dataset-initializer", 0),
        (volcano_labels("bert", "ps", 0), "ps", 0),
        (ray_labels("rc", "head", "headgroup"), "head", None),
        (ray_labels("rc", "worker", "gpu-group"), "gpu-group", None),
        ({"ray.io/originated-from-crd": "RayJob", **batch_labels("bert", "u")}, "submitter", None),
        (batch_labels("bert", "u", 4), None, 4),
        ({}, None, None),
    ],
)
def test_role_and_index_from_labels(labels: dict[str, str], role: str | None, index: int | None) -> None:
    assert role_of(pod_with(labels)) == role
    assert index_of(pod_with(labels)) == index


def test_volcano_task_from_the_annotation_on_old_releases() -> None:
    # volcano.sh/task-index is absent in v1.8.0; the task spec is always an annotation too.
    labels = {"volcano.sh/job-name": "bert"}
    annotations = {"volcano.sh/task-spec": "worker", "volcano.sh/task-index": "2"}
    assert role_of(pod_with(labels, annotations)) == "worker"
    assert index_of(pod_with(labels, annotations)) == 2
