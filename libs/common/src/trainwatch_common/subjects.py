"""NATS subject names, with escaping of the tokens NATS forbids.

A NATS subject token may not contain '.', '*', '>' or whitespace, and Kubernetes names may
contain dots (a custom resource's name is a DNS subdomain). Every token therefore keeps
[A-Za-z0-9_-] as is and percent-encodes each other UTF-8 byte ('%' included), so the escaping
is reversible and two different names never share a subject.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from trainwatch_common.events.clusters import ClusterEventType

JOBS_PREFIX = "jobs.v1"
CLUSTERS_PREFIX = "clusters.v1"
DEADLETTER_PREFIX = "deadletter.v1"

_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def escape_token(value: str) -> str:
    """One subject token from any non-empty string."""
    if not value:
        raise ValueError("a subject token cannot be empty")
    return "".join(ch if ch in _SAFE else "".join(f"%{b:02X}" for b in ch.encode()) for ch in value)


def unescape_token(token: str) -> str:
    return unquote(token, errors="strict")


def job_subject(*, cluster_id: str, namespace: str, kind_key: str, name: str) -> str:
    """jobs.v1.<cluster_id>.<namespace>.<kind>.<name>"""
    tokens = (cluster_id, namespace, kind_key, name)
    return ".".join((JOBS_PREFIX, *map(escape_token, tokens)))


def job_filter(
    *, cluster_id: str | None = None, namespace: str | None = None, kind_key: str | None = None
) -> str:
    """A subscription filter for job events, '*' where a part is not given."""

    def token(value: str | None) -> str:
        return "*" if value is None else escape_token(value)

    return f"{JOBS_PREFIX}.{token(cluster_id)}.{token(namespace)}.{token(kind_key)}.*"


@dataclass(frozen=True, slots=True)
class JobSubject:
    cluster_id: str
    namespace: str
    kind_key: str
    name: str


def parse_job_subject(subject: str) -> JobSubject:
    parts = subject.split(".")
    if len(parts) != 6 or ".".join(parts[:2]) != JOBS_PREFIX:
        raise ValueError(f"not a job subject: {subject!r}")
    cluster_id, namespace, kind_key, name = map(unescape_token, parts[2:])
    return JobSubject(cluster_id, namespace, kind_key, name)


def cluster_subject(event: ClusterEventType, cluster_id: str) -> str:
    """clusters.v1.<added|updated|removed>.<cluster_id>"""
    return f"{CLUSTERS_PREFIX}.{event}.{escape_token(cluster_id)}"


def cluster_health_subject(cluster_id: str) -> str:
    """clusters.v1.health.<cluster_id>"""
    return f"{CLUSTERS_PREFIX}.health.{escape_token(cluster_id)}"


def deadletter_subject(service: str, reason: str) -> str:
    """deadletter.v1.<service>.<reason>: messages a service gave up on, with the reason in a header."""
    return f"{DEADLETTER_PREFIX}.{escape_token(service)}.{escape_token(reason)}"
