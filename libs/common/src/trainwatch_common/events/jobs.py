"""Job-status events: the normalized model of ../shared/reference/job-status-and-feishu.md §3."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from trainwatch_common.events.diagnosis import Diagnosis, JobResources
from trainwatch_common.events.ids import job_event_id


class Phase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


class SubPhase(StrEnum):
    CREATED = "Created"
    QUEUED = "Queued"
    SCHEDULING = "Scheduling"
    INITIALIZING = "Initializing"
    WAITING = "Waiting"
    FINISHING = "Finishing"
    ABORTING = "Aborting"


JobChange = Literal["created", "transition", "diagnosis", "deleted"]
"""created: first seen; transition: (phase, sub_phase, terminal) changed; diagnosis: the phase did
not change but the diagnosis did (docs/contracts.md "Diagnosis updates"); deleted: gone from the
cluster. Readers skip a change value they do not handle."""

# Readers ignore fields they do not know (docs/contracts.md "Evolution within v1"): a field added
# within v1 never breaks a consumer built on an older copy of these models.
_TOLERANT = ConfigDict(frozen=True, extra="ignore")


class ReplicaCounts(BaseModel):
    """One role's replicas (a Kubeflow replica type, a Volcano task, a JobSet replicatedJob...)."""

    model_config = _TOLERANT

    desired: int | None = Field(
        None, description="Replicas the spec asks for; null when the kind does not say"
    )
    active: int = Field(0, description="Replicas (pods) currently running or starting")
    ready: int | None = Field(
        None, description="Active replicas that are ready; null when the kind does not report it"
    )
    succeeded: int = Field(0, description="Replicas that completed successfully")
    failed: int = Field(0, description="Replicas that failed")


class JobRef(BaseModel):
    """Which job this is: stable across its life (uid) and ordered by resourceVersion."""

    model_config = _TOLERANT

    cluster_id: str = Field(description="Registry id of the cluster the job runs in")
    api_version: str = Field(description='The job\'s Kubernetes apiVersion, e.g. "kubeflow.org/v1"')
    kind: str = Field(description='The job\'s Kubernetes kind, e.g. "PyTorchJob" (two kinds are named "Job")')
    kind_key: str = Field(description="Trainwatch's stable kind name, e.g. pytorchjob, volcanojob, job")
    namespace: str = Field(description="Kubernetes namespace of the job")
    name: str = Field(description="Kubernetes name of the job")
    uid: str = Field(description="metadata.uid: one job for its whole life, never reused; key events on it")
    resource_version: str = Field(
        description="metadata.resourceVersion of the object this event was read from (opaque: compare "
        "for equality only, order by sequence)"
    )


class JobStatusEvent(BaseModel):
    """One change of one job, as published on jobs.v1.<cluster>.<namespace>.<kind>.<name>."""

    model_config = _TOLERANT

    event_id: str = Field(description="Deterministic: job_event_id(cluster_id, uid, sequence)")
    change: JobChange = Field(
        description="Why this event was emitted: created (first seen, sequence 0), transition (phase, "
        "sub_phase or terminal changed), diagnosis (same phase, new diagnosis), deleted (gone from the "
        "cluster). Skip a value you do not handle: new ones may appear within v1"
    )
    sequence: int = Field(
        ge=0,
        description=(
            "Per-uid event counter: 0 for created, +1 per event, transition or diagnosis update "
            "(a job that an etcd restore brought back after its deletion is created again at the next one)"
        ),
    )
    epoch: int = Field(ge=0, description="Fencing token of the emitting watcher's lease on the cluster")
    watcher_id: str | None = Field(None, description="The watcher replica that emitted the event")

    job: JobRef = Field(description="Which job this is")
    phase: Phase = Field(description="Normalized phase, the same seven for every kind (docs/contracts.md)")
    sub_phase: SubPhase | None = Field(
        None,
        description="Where a Pending job waits (Created, Queued, Scheduling, Initializing, Waiting); "
        "Finishing for an outcome not final yet; Aborting while a job stops",
    )
    terminal: bool = Field(
        False, description="The outcome is final: the job will not change phase again; act on outcomes then"
    )
    previous_phase: Phase | None = Field(
        None, description="The phase of the job's previous event; null on created"
    )
    reason: str | None = Field(
        None,
        description="The upstream reason of the status, e.g. a condition's reason (BackoffLimitExceeded)",
    )
    message: str | None = Field(
        None, description="The upstream message of that status, as the cluster wrote it"
    )
    source: str | None = Field(None, description='Where the phase was read, e.g. "condition:Failed"')

    replicas: dict[str, ReplicaCounts] = Field(
        default_factory=dict,
        description="Replica counts per role (Kubeflow replica type, Volcano task, JobSet replicatedJob; "
        '"pods" for a batch Job)',
    )
    restart_count: int = Field(
        0, description="Times the job was retried by its controller (as the kind counts them, or as observed)"
    )

    created_at: datetime | None = Field(None, description="metadata.creationTimestamp of the job")
    started_at: datetime | None = Field(
        None, description="When the job started, as its status says (absent for kinds that do not say)"
    )
    finished_at: datetime | None = Field(
        None, description="When the job reached its outcome, as its status says (completion or failure time)"
    )
    source_transition_time: datetime | None = Field(
        None, description="lastTransitionTime of the condition or state the phase was read from"
    )
    observed_at: datetime = Field(description="When the watcher observed this change (the watcher's clock)")

    labels: dict[str, str] = Field(default_factory=dict, description="The job labels selected for events")
    owner: str | None = Field(
        None,
        description="Who owns the job: the value of the cluster's owner label or annotation, when set",
    )
    queue: str | None = Field(
        None,
        description="The Kueue queue-name label, else the kind's own spec queue (Volcano, Kubeflow gang)",
    )

    # Added within v1 (issue 16); optional, absent on older events.
    diagnosis: Diagnosis | None = Field(
        None, description="Why the job failed, restarts or waits; null when there is nothing to explain"
    )
    resources: JobResources | None = Field(None, description="Requested resources, summed over replicas")
    queue_wait_seconds: float | None = Field(
        None,
        ge=0,
        description="created_at -> first Running; while it never ran, created_at -> finished_at "
        "(terminal) or -> observed_at",
    )
    run_seconds: float | None = Field(
        None,
        ge=0,
        description="First Running -> finished_at (terminal) or -> observed_at; null if it never ran",
    )

    @classmethod
    def expected_event_id(cls, cluster_id: str, uid: str, sequence: int) -> str:
        return job_event_id(cluster_id, uid, sequence)
