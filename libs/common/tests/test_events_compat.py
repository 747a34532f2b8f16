"""Within v1, events only grow: old events still parse, new events parse with the old shape.

``OldJobStatusEvent`` is the job event as it was before issue 16 (diagnosis, resources, times and the
``diagnosis`` change value did not exist), read the way docs/contracts.md "Evolution within v1"
asks every reader to read: unknown fields ignored.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

import jsonschema
import orjson
import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainwatch_common import (
    Blame,
    CloudEvent,
    Diagnosis,
    DiagnosisCategory,
    DiagnosisWarning,
    JobRef,
    JobResources,
    JobStatusEvent,
    LogTail,
    Phase,
    job_event_id,
    parse_job_event,
    wrap_job_event,
)
from trainwatch_common.events.diagnosis import MAX_LOG_LINES, MAX_SUMMARY_CHARS, MAX_WARNING_EVENTS
from trainwatch_common.schemas import json_schemas

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
_OLD = ConfigDict(frozen=True, extra="ignore")


class OldJobRef(BaseModel):
    model_config = _OLD
    cluster_id: str
    api_version: str
    kind: str
    kind_key: str
    namespace: str
    name: str
    uid: str
    resource_version: str


class OldReplicaCounts(BaseModel):
    model_config = _OLD
    desired: int | None = None
    active: int = 0
    ready: int | None = None
    succeeded: int = 0
    failed: int = 0


class OldJobStatusEvent(BaseModel):
    model_config = _OLD
    event_id: str
    change: Literal["created", "transition", "deleted"]
    sequence: int = Field(ge=0)
    epoch: int = Field(ge=0)
    watcher_id: str | None = None
    job: OldJobRef
    phase: Literal["Pending", "Running", "Restarting", "Suspended", "Succeeded", "Failed", "Unknown"]
    sub_phase: str | None = None
    terminal: bool = False
    previous_phase: str | None = None
    reason: str | None = None
    message: str | None = None
    source: str | None = None
    replicas: dict[str, OldReplicaCounts] = Field(default_factory=dict)
    restart_count: int = 0
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    source_transition_time: datetime | None = None
    observed_at: datetime
    labels: dict[str, str] = Field(default_factory=dict)
    owner: str | None = None
    queue: str | None = None


# An event exactly as a watcher published it before issue 16 (no diagnosis, resources or times).
OLD_EVENT: dict[str, Any] = {
    "event_id": "job.alpha.uid-1.3",
    "change": "transition",
    "sequence": 3,
    "epoch": 2,
    "watcher_id": "w-1",
    "job": {
        "cluster_id": "alpha", "api_version": "kubeflow.org/v1", "kind": "PyTorchJob",
        "kind_key": "pytorchjob", "namespace": "team-a", "name": "bert", "uid": "uid-1",
        "resource_version": "812",
    },
    "phase": "Failed",
    "sub_phase": None,
    "terminal": True,
    "previous_phase": "Running",
    "reason": "PyTorchJobFailed",
    "message": "Job bert has failed because it has reached the specified backoff limit",
    "source": "condition:Failed",
    "replicas": {"Master": {"active": 0, "failed": 1, "succeeded": 0}, "Worker": {"failed": 3}},
    "restart_count": 2,
    "created_at": "2026-12-01T11:00:00Z",
    "started_at": "2026-12-01T11:05:00Z",
    "finished_at": "2026-12-01T11:59:00Z",
    "source_transition_time": "2026-12-01T11:59:00Z",
    "observed_at": "2026-12-01T11:59:01Z",
    "labels": {"owner": "alice"},
    "owner": "alice",
    "queue": None,
}  # fmt: skip


def new_event(change: Literal["transition", "diagnosis"] = "transition", sequence: int = 4) -> JobStatusEvent:
    return JobStatusEvent(
        event_id=job_event_id("alpha", "uid-1", sequence),
        change=change,
        sequence=sequence,
        epoch=2,
        job=JobRef(
            cluster_id="alpha", api_version="kubeflow.org/v1", kind="PyTorchJob", kind_key="pytorchjob",
            namespace="team-a", name="bert", uid="uid-1", resource_version="813",
        ),
        phase=Phase.FAILED,
        terminal=True,
        previous_phase=Phase.FAILED if change == "diagnosis" else Phase.RUNNING,
        observed_at=NOW,
        diagnosis=Diagnosis(
            category=DiagnosisCategory.OOM_KILLED,
            blame=Blame.USER_CODE,
            summary="worker-3 container pytorch was killed: out of memory (exit 137)",
            reason="OOMKilled",
            role="worker",
            replica_index=3,
            pod="bert-worker-3",
            container="pytorch",
            exit_code=137,
            signal=9,
            node="gpu-node-7",
            pods_affected=1,
            since=datetime(2026, 12, 1, 11, 58, tzinfo=UTC),
            events=[DiagnosisWarning(reason="OOMKilled", message="Error pod bert-worker-3 ...", count=2)],
            log_tail=LogTail(container="pytorch", previous=True, lines=["step 100", "CUDA out of memory"]),
        ),
        resources=JobResources(
            pods=4, gpus=32, gpu_resource="nvidia.com/gpu", gpu_product="NVIDIA-H100-80GB-HBM3",
            cpu=128.0, memory_bytes=4 * 512 * 2**30,
        ),
        queue_wait_seconds=300.0,
        run_seconds=3240.0,
    )  # fmt: skip


def envelope_of(data: dict[str, Any]) -> bytes:
    return orjson.dumps(
        {
            "specversion": "1.0", "id": data["event_id"], "source": "/trainwatch/clusters/alpha",
            "type": "io.trainwatch.job.status.v1", "subject": "jobs.v1.alpha.team-a.pytorchjob.bert",
            "time": "2026-12-01T11:59:01Z", "datacontenttype": "application/json", "data": data,
        }
    )  # fmt: skip


def test_an_old_event_parses_with_the_new_model_and_schema() -> None:
    payload = envelope_of(OLD_EVENT)
    event = parse_job_event(payload)
    assert event.phase is Phase.FAILED
    assert event.diagnosis is None
    assert event.resources is None
    assert event.queue_wait_seconds is None
    assert event.run_seconds is None
    jsonschema.validate(orjson.loads(payload), json_schemas()["job-status-event.json"])


def test_a_new_event_parses_with_the_old_model_shape() -> None:
    payload = wrap_job_event(new_event()).to_json()
    old = CloudEvent[OldJobStatusEvent].model_validate_json(payload).data
    assert old.phase == "Failed"
    assert old.change == "transition"
    assert old.event_id == "job.alpha.uid-1.4"
    assert not hasattr(old, "diagnosis")


def test_a_new_event_round_trips_and_validates() -> None:
    event = new_event()
    payload = wrap_job_event(event).to_json()
    jsonschema.validate(orjson.loads(payload), json_schemas()["job-status-event.json"])
    assert parse_job_event(payload) == event


def test_a_diagnosis_update_keeps_the_event_id_scheme() -> None:
    event = new_event("diagnosis", sequence=5)
    assert event.event_id == JobStatusEvent.expected_event_id("alpha", "uid-1", 5)
    payload = wrap_job_event(event).to_json()
    jsonschema.validate(orjson.loads(payload), json_schemas()["job-status-event.json"])
    assert parse_job_event(payload).change == "diagnosis"
    # A reader that validates ``change`` against the old closed set refuses the new value: that is
    # why docs/contracts.md asks readers to skip change values they do not handle.
    with pytest.raises(ValidationError, match="change"):
        CloudEvent[OldJobStatusEvent].model_validate_json(payload)


def test_fields_a_newer_writer_adds_are_ignored_by_this_reader() -> None:
    data = orjson.loads(wrap_job_event(new_event()).to_json())["data"]
    data["some_future_field"] = {"x": 1}
    data["diagnosis"]["some_future_evidence"] = [1, 2]
    data["resources"]["tpus"] = 4
    event = parse_job_event(envelope_of(data))
    assert event.diagnosis is not None
    assert event.diagnosis.category is DiagnosisCategory.OOM_KILLED


def test_the_bounds_are_enforced() -> None:
    with pytest.raises(ValidationError):
        Diagnosis(category=DiagnosisCategory.UNKNOWN, summary="x" * (MAX_SUMMARY_CHARS + 1))
    with pytest.raises(ValidationError):
        Diagnosis(
            category=DiagnosisCategory.UNKNOWN,
            summary="x",
            events=[DiagnosisWarning(reason="r")] * (MAX_WARNING_EVENTS + 1),
        )
    with pytest.raises(ValidationError):
        LogTail(container="c", lines=["l"] * (MAX_LOG_LINES + 1))


def test_a_category_added_later_reads_as_unknown() -> None:
    data = orjson.loads(wrap_job_event(new_event()).to_json())["data"]
    data["diagnosis"]["category"] = "GPUXidError"
    event = parse_job_event(envelope_of(data))
    assert event.diagnosis is not None
    assert event.diagnosis.category is DiagnosisCategory.UNKNOWN
