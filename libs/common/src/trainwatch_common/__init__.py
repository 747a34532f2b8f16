"""Trainwatch contracts: the only code services share.

Events (job status, cluster changes and health), their CloudEvents envelope and deterministic
ids; NATS subjects; JetStream streams, KV buckets and consumers; the job-kind catalog;
settings; the Redis lease; logging, health and metrics.
"""

from trainwatch_common.events.clusters import (
    ClusterConnection,
    ClusterEvent,
    ClusterEventType,
    ClusterHealth,
    ClusterSpec,
    WatchOptions,
)
from trainwatch_common.events.diagnosis import (
    Blame,
    Diagnosis,
    DiagnosisCategory,
    DiagnosisWarning,
    JobResources,
    LogTail,
)
from trainwatch_common.events.envelope import (
    CloudEvent,
    parse_cluster_event,
    parse_cluster_health,
    parse_job_event,
    wrap_cluster_event,
    wrap_cluster_health,
    wrap_job_event,
)
from trainwatch_common.events.ids import cluster_event_id, fingerprint, job_event_id
from trainwatch_common.events.jobs import (
    JobChange,
    JobRef,
    JobStatusEvent,
    Phase,
    ReplicaCounts,
    SubPhase,
)
from trainwatch_common.kinds import ALL_JOB_KINDS, KIND_KEYS, JobKind, kind_for, kinds_for_key
from trainwatch_common.leases import Lease, LeaseManager
from trainwatch_common.settings import ServiceSettings
from trainwatch_common.streams import ensure_consumer, ensure_streams
from trainwatch_common.subjects import (
    cluster_health_subject,
    cluster_subject,
    deadletter_subject,
    escape_token,
    job_filter,
    job_subject,
    parse_job_subject,
    unescape_token,
)

__all__ = [
    "ALL_JOB_KINDS",
    "KIND_KEYS",
    "Blame",
    "CloudEvent",
    "ClusterConnection",
    "ClusterEvent",
    "ClusterEventType",
    "ClusterHealth",
    "ClusterSpec",
    "Diagnosis",
    "DiagnosisCategory",
    "DiagnosisWarning",
    "JobChange",
    "JobKind",
    "JobRef",
    "JobResources",
    "JobStatusEvent",
    "Lease",
    "LeaseManager",
    "LogTail",
    "Phase",
    "ReplicaCounts",
    "ServiceSettings",
    "SubPhase",
    "WatchOptions",
    "cluster_event_id",
    "cluster_health_subject",
    "cluster_subject",
    "deadletter_subject",
    "ensure_consumer",
    "ensure_streams",
    "escape_token",
    "fingerprint",
    "job_event_id",
    "job_filter",
    "job_subject",
    "kind_for",
    "kinds_for_key",
    "parse_cluster_event",
    "parse_cluster_health",
    "parse_job_event",
    "parse_job_subject",
    "unescape_token",
    "wrap_cluster_event",
    "wrap_cluster_health",
    "wrap_job_event",
]
