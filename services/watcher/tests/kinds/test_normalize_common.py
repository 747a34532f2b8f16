"""What every kind shares: timestamps, trimming, malformed input, ownership and the catalog."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from kinds_testkit import (
    batch_job,
    jobset,
    kubeflow_job,
    metadata,
    mpi_v2_job,
    ray_job,
    train_job,
    volcano_job,
)

from trainwatch_common import kinds as catalog
from trainwatch_common.events.jobs import Phase
from trainwatch_watcher.kinds import (
    MalformedObject,
    NormalizedStatus,
    batch,
    is_owned_by_higher_level_job,
    kubeflow_v1,
    mpi_v2beta1,
    normalize_object,
    normalizer_for,
)
from trainwatch_watcher.kinds.fields import MAX_MESSAGE_CHARS, parse_time

SAMPLES: dict[catalog.JobKind, dict[str, Any]] = {
    catalog.BATCH_JOB: batch_job({}),
    catalog.PYTORCH_JOB: kubeflow_job("PyTorchJob", {}),
    catalog.TF_JOB: kubeflow_job("TFJob", {}, spec_key="tfReplicaSpecs", roles=("PS", "Worker")),
    catalog.MPI_JOB_V1: kubeflow_job("MPIJob", {}, spec_key="mpiReplicaSpecs", roles=("Launcher", "Worker")),
    catalog.XGBOOST_JOB: kubeflow_job("XGBoostJob", {}, spec_key="xgbReplicaSpecs"),
    catalog.PADDLE_JOB: kubeflow_job("PaddleJob", {}, spec_key="paddleReplicaSpecs"),
    catalog.JAX_JOB: kubeflow_job("JAXJob", {}, spec_key="jaxReplicaSpecs", roles=("Worker",)),
    catalog.MPI_JOB_V2BETA1: mpi_v2_job({}),
    catalog.TRAIN_JOB: train_job({}),
    catalog.JOBSET: jobset({}),
    catalog.VOLCANO_JOB: volcano_job({}),
    catalog.RAY_JOB: ray_job({}),
}


# --- timestamps and trimming ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-11-29T10:00:00Z", datetime(2026, 11, 29, 10, 0, tzinfo=UTC)),
        ("2026-11-29T10:00:00.123456Z", datetime(2026, 11, 29, 10, 0, 0, 123456, tzinfo=UTC)),
        ("2026-11-29T10:00:00.123456789Z", datetime(2026, 11, 29, 10, 0, 0, 123456, tzinfo=UTC)),
        ("2026-11-29T10:00:00.5z", datetime(2026, 11, 29, 10, 0, 0, 500000, tzinfo=UTC)),
        ("2026-11-29T18:00:00+08:00", datetime(2026, 11, 29, 10, 0, tzinfo=UTC)),
        ("2026-11-29T10:00:00", datetime(2026, 11, 29, 10, 0, tzinfo=UTC)),
        ("2016-12-31T23:59:60Z", datetime(2016, 12, 31, 23, 59, 59, tzinfo=UTC)),
        ("2026-13-01T00:00:00Z", None),
        ("2026-11-29T25:00:00Z", None),
        ("2026-11-29T10:00:00+99:00", None),
        ("yesterday", None),
        ("", None),
        (1732874400, None),
        (None, None),
        (["2026-11-29T10:00:00Z"], None),
    ],
)
def test_parse_time(value: object, expected: datetime | None) -> None:
    parsed = parse_time(value)
    assert parsed == expected
    if parsed is not None:
        assert parsed.tzinfo is not None
        assert parsed.utcoffset() == timedelta(0)


def test_parse_time_keeps_offsets_as_utc_instants() -> None:
    parsed = parse_time("2026-11-29T05:30:00-04:30")
    assert parsed == datetime(2026, 11, 29, 5, 30, tzinfo=timezone(timedelta(hours=-4, minutes=-30)))


def test_huge_message_is_trimmed() -> None:
    status = {
        "conditions": [
            {"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": "x" * 100_000}
        ]
    }
    result = batch.normalize(batch_job(status), None)
    assert result.message is not None
    assert len(result.message) == MAX_MESSAGE_CHARS


def test_unparsable_condition_time_is_none_not_an_error() -> None:
    status = {"conditions": [{"type": "Failed", "status": "True", "lastTransitionTime": "not-a-time"}]}
    result = batch.normalize(batch_job(status), None)
    assert (result.phase, result.finished_at) == (Phase.FAILED, None)


# --- malformed objects ------------------------------------------------------------------------


def broken(kind: catalog.JobKind, path: tuple[str, ...], value: object) -> dict[str, Any]:
    obj = copy.deepcopy(SAMPLES[kind])
    target = obj
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value
    return obj


@pytest.mark.parametrize("kind", list(SAMPLES), ids=lambda k: f"{k.key}-{k.version}")
@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("metadata",), None),
        (("metadata",), ["name"]),
        (("metadata", "uid"), None),
        (("metadata", "uid"), ""),
        (("metadata", "name"), 5),
        (("metadata", "namespace"), None),
        (("metadata", "labels"), "a=b"),
        (("status",), ["Running"]),
        (("status",), "Running"),
    ],
)
def test_unreadable_objects_are_malformed(
    kind: catalog.JobKind, path: tuple[str, ...], value: object
) -> None:
    with pytest.raises(MalformedObject):
        normalize_object(kind, broken(kind, path, value), None)


@pytest.mark.parametrize("obj", [None, "job", 3, ["metadata"]])
def test_non_mapping_objects_are_malformed(obj: Any) -> None:
    for kind in SAMPLES:
        with pytest.raises(MalformedObject):
            normalize_object(kind, obj, None)


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        (catalog.BATCH_JOB, {"conditions": "Complete"}),
        (catalog.BATCH_JOB, {"conditions": [{"type": "Complete", "status": "True"}, "Failed"]}),
        (catalog.PYTORCH_JOB, {"conditions": {"type": "Running"}}),
        (catalog.PYTORCH_JOB, {"replicaStatuses": [{"Master": {}}]}),
        (catalog.PYTORCH_JOB, {"replicaStatuses": {"Master": 1}}),
        (catalog.MPI_JOB_V2BETA1, {"replicaStatuses": {"Launcher": "failed"}}),
        (catalog.TRAIN_JOB, {"jobsStatus": {"node": {}}}),
        (catalog.JOBSET, {"replicatedJobsStatus": ["leader"]}),
        (catalog.VOLCANO_JOB, {"state": "Running"}),
        (catalog.VOLCANO_JOB, {"taskStatusCount": [1]}),
        (catalog.VOLCANO_JOB, {"taskStatusCount": {"default-nginx": {"phase": [1]}}}),
        (catalog.VOLCANO_JOB, {"conditions": [None]}),
    ],
)
def test_containers_of_the_wrong_type_are_malformed(kind: catalog.JobKind, status: dict[str, Any]) -> None:
    with pytest.raises(MalformedObject):
        normalize_object(kind, broken(kind, ("status",), status), None)


def test_leaves_of_the_wrong_type_are_ignored() -> None:
    status = {
        "active": "3",
        "ready": True,
        "failed": -2,
        "startTime": 12,
        "conditions": [{"type": 5, "status": "True"}],
    }
    result = batch.normalize(batch_job(status), None)
    assert result.phase is Phase.PENDING
    assert result.replicas["pods"].active == 0
    assert result.replicas["pods"].ready is None


# --- ownership --------------------------------------------------------------------------------


def owner(api_version: str, kind: str, controller: object = True) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": "parent",
        "uid": "1234",
        "controller": controller,
        "blockOwnerDeletion": True,
    }


@pytest.mark.parametrize(
    ("reference", "skipped"),
    [
        (owner("trainer.kubeflow.org/v1alpha1", "TrainJob"), True),  # a TrainJob's JobSet
        (owner("kubeflow.org/v2beta1", "MPIJob"), True),  # an MPIJob v2beta1 launcher Job
        (owner("ray.io/v1", "RayJob"), True),  # a RayJob's submitter Job
        (owner("ray.io/v1alpha1", "RayJob"), True),
        (owner("jobset.x-k8s.io/v1alpha2", "JobSet"), True),  # a JobSet's child Job
        (owner("kubeflow.org/v1", "PyTorchJob"), True),
        (owner("batch.volcano.sh/v1alpha1", "Job"), True),
        (owner("batch/v1", "CronJob"), False),  # each run of a CronJob is a job of its own
        (owner("apps/v1", "ReplicaSet"), False),
        (owner("ray.io/v1", "RayJob", controller=False), False),
        (owner("ray.io/v1", "RayJob", controller="true"), False),
        ({"kind": "RayJob", "controller": True}, False),
        ("RayJob", False),
    ],
)
def test_is_owned_by_higher_level_job(reference: Any, skipped: bool) -> None:
    obj = batch_job({})
    obj["metadata"]["ownerReferences"] = [reference]
    assert is_owned_by_higher_level_job(obj) is skipped


def test_objects_without_owners_are_not_children() -> None:
    assert is_owned_by_higher_level_job(batch_job({})) is False
    obj = {"metadata": {**metadata(), "ownerReferences": "nonsense"}}
    assert is_owned_by_higher_level_job(obj) is False
    with pytest.raises(MalformedObject):
        is_owned_by_higher_level_job({"metadata": None})


# --- catalog ----------------------------------------------------------------------------------


def test_every_catalog_kind_has_a_normalizer() -> None:
    for kind in catalog.ALL_JOB_KINDS:
        result = normalizer_for(kind)(SAMPLES[kind], None)
        assert isinstance(result, NormalizedStatus)
        assert result.phase is not Phase.UNKNOWN


def test_the_two_mpijob_versions_use_different_normalizers() -> None:
    assert normalizer_for(catalog.MPI_JOB_V1) is kubeflow_v1.normalize
    assert normalizer_for(catalog.MPI_JOB_V2BETA1) is mpi_v2beta1.normalize


def test_unknown_kind_is_a_lookup_error() -> None:
    with pytest.raises(LookupError):
        normalizer_for(catalog.JobKind("deployment", "apps", "v1", "Deployment", "deployments"))


def test_normalize_object_passes_the_companion() -> None:
    companion = jobset(
        {
            "restarts": 1,
            "conditions": [{"type": "RestartingJobSet", "status": "True", "reason": "DefaultFailurePolicy"}],
        }
    )
    result = normalize_object(catalog.TRAIN_JOB, train_job({}), None, related=companion)
    assert result.phase is Phase.RESTARTING
