"""The contracts' public surface is pinned: adding or removing a name is a decision, made here."""

from __future__ import annotations

import trainwatch_common

PUBLIC = [
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


def test_the_package_exports_exactly_the_pinned_names() -> None:
    assert sorted(trainwatch_common.__all__) == sorted(PUBLIC)


def test_every_exported_name_exists() -> None:
    missing = [name for name in trainwatch_common.__all__ if not hasattr(trainwatch_common, name)]
    assert missing == []
