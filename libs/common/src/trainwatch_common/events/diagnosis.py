"""Why a job failed, restarts or waits, and what it asked for: additive parts of the v1 job event.

Both are optional on :class:`~trainwatch_common.events.jobs.JobStatusEvent` (``diagnosis``,
``resources``): a reader that does not know them ignores them, and an event without them is
exactly the event of before. Vocabulary and evidence: ../shared/reference/diagnosis.md §9.
Every list and string has a bound, so one event stays small whatever the cluster says.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Bounds, published in the schema so every reader knows them.
MAX_SUMMARY_CHARS = 200
MAX_MESSAGE_CHARS = 1024
MAX_WARNING_EVENTS = 5
MAX_LOG_LINES = 50
MAX_LOG_BYTES = 4096
MAX_LOG_LINE_CHARS = 512


class DiagnosisCategory(StrEnum):
    """The fixed vocabulary. Readers treat a value they do not know as ``Unknown`` (this model
    does), so a category added later within v1 breaks no reader."""

    OOM_KILLED = "OOMKilled"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    CRASH_LOOP = "CrashLoop"
    EXIT_CODE = "ExitCode"
    PREEMPTED = "Preempted"
    EVICTED = "Evicted"
    NODE_FAILURE = "NodeFailure"
    UNSCHEDULABLE = "Unschedulable"
    GANG_WAITING = "GangWaiting"
    QUEUE_WAITING = "QueueWaiting"
    QUOTA_EXCEEDED = "QuotaExceeded"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    CONFIG_ERROR = "ConfigError"
    POD_FAILURE_POLICY = "PodFailurePolicy"
    UNKNOWN = "Unknown"


class Blame(StrEnum):
    """Who has to act: the job's author (code or config), the platform, or nobody can tell."""

    USER_CODE = "user_code"
    USER_CONFIG = "user_config"
    INFRASTRUCTURE = "infrastructure"
    UNKNOWN = "unknown"


class DiagnosisWarning(BaseModel):
    """One distinct Warning event (reason + object) about the job or one of its pods."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    reason: str = Field(max_length=128, description='The Event\'s reason, e.g. "FailedScheduling", "BackOff"')
    message: str = Field("", max_length=MAX_MESSAGE_CHARS, description="The Event's message")
    count: int = Field(1, ge=1, description="Occurrences (count, or series.count for events.k8s.io)")
    last_seen: datetime | None = Field(None, description="When the Event was last seen")
    object: str | None = Field(
        None, max_length=300, description='What it is about, "<Kind>/<name>", e.g. "Pod/train-worker-3"'
    )


class LogTail(BaseModel):
    """The last lines of the failing container's log, redacted before it left the cluster."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    container: str = Field(description="The container the lines are from")
    previous: bool = Field(
        False, description="True when the lines are from the previous (terminated) instance after a restart"
    )
    lines: list[str] = Field(
        default_factory=list,
        max_length=MAX_LOG_LINES,
        description=f"At most {MAX_LOG_LINES} lines and {MAX_LOG_BYTES} UTF-8 bytes in all, oldest first",
    )
    truncated: bool = Field(False, description="Lines or bytes were cut to fit the bounds")
    redacted: bool = Field(False, description="At least one secret-looking string was replaced")


class Diagnosis(BaseModel):
    """Why: one category, who should act, one plain line, and the evidence it was read from."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    category: DiagnosisCategory = Field(
        description="The root cause, from a fixed vocabulary; read a value you do not know as Unknown"
    )
    blame: Blame = Field(
        Blame.UNKNOWN, description="Who has to act: user_code, user_config, infrastructure or unknown"
    )
    summary: str = Field(max_length=MAX_SUMMARY_CHARS, description="One plain line, no newline")
    reason: str | None = Field(
        None,
        max_length=256,
        description='The upstream reason the category was read from, e.g. "ImagePullBackOff", '
        '"PreemptionByScheduler", "BackoffLimitExceeded"',
    )
    message: str | None = Field(None, max_length=MAX_MESSAGE_CHARS, description="Its upstream message")
    role: str | None = Field(None, description='Replica role of the pod, e.g. "worker", "master", "launcher"')
    replica_index: int | None = Field(None, description="Replica index of the pod within its role")
    pod: str | None = Field(None, description="The pod the category was read from")
    container: str | None = Field(None, description="The container in that pod the category was read from")
    exit_code: int | None = Field(None, description="Exit code of that container (its last termination)")
    signal: int | None = Field(
        None, description="Signal number: the API's, or exit code - 128 when above 128"
    )
    restarts: int | None = Field(None, ge=0, description="Restart count of the container")
    node: str | None = Field(None, description="The node the pod ran or was assigned to")
    resource: str | None = Field(
        None, description='Unschedulable / Evicted / QuotaExceeded: the short resource, e.g. "nvidia.com/gpu"'
    )
    queue: str | None = Field(None, description="QueueWaiting / QuotaExceeded: the Kueue LocalQueue or queue")
    cluster_queue: str | None = Field(
        None, description="QueueWaiting / QuotaExceeded: the Kueue ClusterQueue behind the queue"
    )
    position: int | None = Field(
        None, ge=0, description="QueueWaiting: 0-based position in the LocalQueue (Kueue visibility API)"
    )
    pods_affected: int = Field(0, ge=0, description="Pods of the job showing this category")
    since: datetime | None = Field(None, description="Earliest timestamp of the evidence")
    events: list[DiagnosisWarning] = Field(
        default_factory=list,
        max_length=MAX_WARNING_EVENTS,
        description=f"Up to {MAX_WARNING_EVENTS} distinct Warning events about the job or its pods",
    )
    log_tail: LogTail | None = Field(
        None,
        description="The redacted last lines of the failing container's log, when log tails are enabled; "
        "may follow on a later diagnosis update",
    )

    @field_validator("category", mode="before")
    @classmethod
    def _unknown_category_reads_as_unknown(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in DiagnosisCategory._value2member_map_:
            return DiagnosisCategory.UNKNOWN
        return value


class JobResources(BaseModel):
    """What the job asked for, summed over its replica templates (replicas x per-pod requests)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    pods: int = Field(0, ge=0, description="Pods the templates ask for in all")
    gpus: int = Field(0, ge=0, description="Sum of the GPU resources (nvidia.com/gpu, amd.com/gpu, ...)")
    gpu_resource: str | None = Field(None, description='The GPU resource name, e.g. "nvidia.com/gpu"')
    gpu_product: str | None = Field(
        None,
        description="From a nodeSelector or required node affinity naming it (nvidia.com/gpu.product, ...)",
    )
    cpu: float = Field(0.0, ge=0, description="CPU cores requested")
    memory_bytes: int = Field(0, ge=0, description="Memory requested, in bytes")
    extended: dict[str, int] = Field(
        default_factory=dict, description="Every other extended resource requested, by name"
    )
    partial: bool = Field(
        False,
        description="Some replica template could not be read (e.g. a TrainJob's runtime): a lower bound",
    )
