"""Deterministic event ids: never random, so a replayed event is recognised as the same one.

The id doubles as the JetStream ``Nats-Msg-Id`` (publish de-duplication), the primary key of a
transition row, and the base of a notification's idempotency key.
"""

from __future__ import annotations

import hashlib


def job_event_id(cluster_id: str, uid: str, sequence: int) -> str:
    """The id of the ``sequence``-th event (0 = created) of job ``uid`` in ``cluster_id``."""
    if not cluster_id or not uid or sequence < 0:
        raise ValueError("job_event_id needs a cluster id, a uid and a sequence >= 0")
    return f"job.{cluster_id}.{uid}.{sequence}"


def cluster_event_id(cluster_id: str, revision: int) -> str:
    """The id of a cluster event: each registry revision of a cluster is published once."""
    return f"cluster.{cluster_id}.{revision}"


def fingerprint(secret: bytes) -> str:
    """A short, stable, non-reversible fingerprint of secret material (for display and change detection)."""
    return "sha256:" + hashlib.sha256(secret).hexdigest()[:16]
