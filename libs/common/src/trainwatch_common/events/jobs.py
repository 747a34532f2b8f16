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

    desired: int | None = None
    active: int = 0
    ready: int | None = None
    succeeded: int = 0
    failed: int = 0


class JobRef(BaseModel):
    """Which job this is: stable across its life (uid) and ordered by resourceVersion."""

    model_config = _TOLERANT

    cluster_id: str
    api_version: str
    kind: str
    kind_key: str = Field(description="Trainwatch's stable kind name, e.g. pytorchjob, volcanojob, job")
    namespace: str
    name: str
    uid: str
    resource_version: str


class JobStatusEvent(BaseModel):
    """One change of one job, as published on jobs.v1.<cluster>.<namespace>.<kind>.<name>."""

    model_config = _TOLERANT

    event_id: str = Field(description="Deterministic: job_event_id(cluster_id, uid, sequence)")
    change: JobChange
    sequence: int = Field(
        ge=0,
        description=(
            "Per-uid event counter: 0 for created, +1 per event, transition or diagnosis update "
            "(a job that an etcd restore brought back after its deletion is created again at the next one)"
        ),
    )
    epoch: int = Field(ge=0, description="Fencing token of the emitting watcher's lease on the cluster")
    watcher_id: str | None = None

    job: JobRef
    phase: Phase
    sub_phase: SubPhase | None = None
    terminal: bool = False
    previous_phase: Phase | None = None
    reason: str | None = None
    message: str | None = None
    source: str | None = Field(None, description='Where the phase was read, e.g. "condition:Failed"')

    replicas: dict[str, ReplicaCounts] = Field(default_factory=dict)
    restart_count: int = 0

    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    source_transition_time: datetime | None = None
    observed_at: datetime

    labels: dict[str, str] = Field(default_factory=dict, description="The job labels selected for events")
    owner: str | None = None
    queue: str | None = None

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
