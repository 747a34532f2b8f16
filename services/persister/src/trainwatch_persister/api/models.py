"""Response models of the query API."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trainwatch_common import JobChange, Phase, ReplicaCounts, SubPhase
from trainwatch_common.events.diagnosis import Diagnosis


class JobPublic(BaseModel):
    """A job's current state: the newest event by the ordering rule (sequence, epoch, resourceVersion)."""

    model_config = ConfigDict(from_attributes=True)

    cluster_id: str
    uid: str
    namespace: str
    kind_key: str = Field(description="Trainwatch's kind key, e.g. pytorchjob")
    kind: str
    api_version: str
    name: str
    phase: Phase
    sub_phase: SubPhase | None
    terminal: bool
    previous_phase: Phase | None
    reason: str | None
    message: str | None
    owner: str | None
    queue: str | None
    labels: dict[str, str]
    replicas: dict[str, ReplicaCounts]
    restart_count: int
    created_at: datetime = Field(description="The job's creationTimestamp (first observation if unknown)")
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime = Field(description="When the event holding this state was observed")
    deleted_at: datetime | None = Field(description="When the job was seen deleted from its cluster")
    sequence: int
    epoch: int
    resource_version: str
    event_id: str
    watcher_id: str | None
    diagnosis: Diagnosis | None = Field(
        description="Why it failed, restarts or waits: the diagnosis of the newest event (null: none)"
    )
    last_change: JobChange | None = Field(
        description='The change of the newest event ("diagnosis": a diagnosis update, same phase); '
        "null on rows written before it was kept"
    )
    gpus: int | None = Field(description="GPUs requested, summed over replicas (null: not reported)")
    gpu_product: str | None = Field(description="The GPU product a node selector or affinity names")
    cpu: float | None = Field(description="CPU cores requested, summed over replicas")
    memory_bytes: int | None = Field(description="Memory requested, summed over replicas")
    queue_wait_seconds: float | None = Field(description="Created -> first Running (or -> now while waiting)")
    run_seconds: float | None = Field(description="First Running -> finished (or -> now)")


class JobsPublic(BaseModel):
    data: list[JobPublic]
    total: int = Field(description="How many jobs match the filters (all pages)")
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; null on the last page")


class TransitionPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    event_id: str
    change: JobChange
    sequence: int
    epoch: int
    phase: Phase
    sub_phase: SubPhase | None
    terminal: bool
    previous_phase: Phase | None
    reason: str | None
    message: str | None
    resource_version: str
    observed_at: datetime
    source_transition_time: datetime | None
    watcher_id: str | None
    diagnosis: Diagnosis | None = Field(
        description='The diagnosis as of this event; on change "diagnosis" null means it was cleared'
    )
    event: dict[str, Any] = Field(description="The JobStatusEvent as published")


class DiagnosisChange(BaseModel):
    """One step of a job's diagnosis history: an event whose diagnosis differs from the one before."""

    event_id: str
    sequence: int
    change: JobChange
    phase: Phase
    observed_at: datetime
    diagnosis: Diagnosis | None = Field(description="null: the previous diagnosis no longer holds")


class JobDetail(JobPublic):
    transitions: list[TransitionPublic] = Field(description="The whole kept history, oldest first")
    diagnosis_history: list[DiagnosisChange] = Field(
        description="The kept history reduced to where the diagnosis changed (appeared, moved, cleared), "
        "oldest first"
    )


class ClusterPhaseCount(BaseModel):
    cluster_id: str
    phase: Phase
    count: int


class StatsPublic(BaseModel):
    """Counts of live jobs (not deleted from their cluster) for dashboards."""

    total: int
    deleted: int = Field(description="Jobs deleted from their cluster but still kept")
    by_cluster: dict[str, int]
    by_phase: dict[str, int]
    by_cluster_phase: list[ClusterPhaseCount]


class NamespaceCount(BaseModel):
    cluster_id: str
    namespace: str
    count: int


class BreakdownPublic(BaseModel):
    """Jobs matching the filters (live ones unless ``deleted`` says otherwise), counted three ways."""

    total: int
    by_phase: dict[str, int]
    by_cluster: dict[str, int]
    by_namespace: list[NamespaceCount] = Field(description="The largest (cluster, namespace) pairs first")
    by_diagnosis: dict[str, int] = Field(
        default_factory=dict,
        description="Jobs per category of their current diagnosis, most first (jobs without one: uncounted)",
    )


class BucketPublic(BaseModel):
    start: datetime = Field(description="The bucket's start (UTC); it lasts bucket_seconds")
    count: int


class ActivityPublic(BaseModel):
    since: datetime
    until: datetime
    bucket_seconds: int
    failures: list[BucketPublic] = Field(description="Jobs that failed within each bucket")
    running: list[BucketPublic] = Field(description="Jobs running at some time within each bucket")


class HistogramPublic(BaseModel):
    edges_seconds: list[int] = Field(
        description="Upper bucket edges; counts[i] counts durations in [edges[i-1], edges[i])"
    )
    counts: list[int] = Field(
        description="One more than edges: the last counts durations above the last edge"
    )
    total: int


class DurationsPublic(BaseModel):
    since: datetime
    queue_wait: HistogramPublic = Field(description="Created → started, of the jobs started since `since`")
    run_time: HistogramPublic = Field(description="Started → finished, of the jobs finished since `since`")


class ReasonCount(BaseModel):
    reason: str | None = Field(description="The event's reason field; null when the job gave none")
    count: int


class FailureReasonsPublic(BaseModel):
    since: datetime
    reasons: list[ReasonCount]
