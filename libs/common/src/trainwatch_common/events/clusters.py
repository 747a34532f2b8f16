"""Cluster events: what the registry broadcasts about the clusters under management.

Broadcast events never carry credentials: other teams read the same bus. A watcher that needs
a cluster's connection config asks the registry for it over HTTP with a watcher-role bearer
token (``GET /v1/clusters/{id}/connection``, answered with ``ClusterConnection``); see
docs/contracts.md for why HTTP rather than NATS request/reply.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from trainwatch_common.kinds import KIND_KEYS

CLUSTER_ID_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
_CLUSTER_ID_RE = re.compile(CLUSTER_ID_PATTERN)


def _check_cluster_id(value: str) -> str:
    if not _CLUSTER_ID_RE.match(value):
        raise ValueError(
            "a cluster id is a slug: 1-63 lower-case letters, digits and '-', starting and ending "
            "with a letter or digit"
        )
    return value


ClusterId = Annotated[str, AfterValidator(_check_cluster_id)]

ClusterEventType = Literal["added", "updated", "removed"]


class WatchOptions(BaseModel):
    """What to watch in a cluster. Empty lists mean "all"."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    include_namespaces: list[str] = Field(
        default_factory=list, description="Namespaces to watch; empty = all namespaces"
    )
    exclude_namespaces: list[str] = Field(
        default_factory=list, description="Namespaces never watched (applied after include_namespaces)"
    )
    kinds: list[str] = Field(default_factory=list, description="Kind keys, e.g. pytorchjob; empty = all")
    owner_label: str | None = Field(None, description="Job label that names its owner")
    owner_annotation: str | None = Field(None, description="Job annotation that names its owner")
    selected_labels: list[str] = Field(
        default_factory=list, description="Job labels copied into events (besides the owner)"
    )

    @field_validator("kinds")
    @classmethod
    def _known_kinds(cls, kinds: list[str]) -> list[str]:
        unknown = sorted(set(kinds) - KIND_KEYS)
        if unknown:
            raise ValueError(f"unknown job kinds {unknown}; known: {sorted(KIND_KEYS)}")
        return kinds

    def watches_kind(self, kind_key: str) -> bool:
        return not self.kinds or kind_key in self.kinds

    def watches_namespace(self, namespace: str) -> bool:
        if self.include_namespaces and namespace not in self.include_namespaces:
            return False
        return namespace not in self.exclude_namespaces


class ClusterSpec(BaseModel):
    """The desired state of one cluster as the registry publishes it: no secret in here."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: ClusterId = Field(
        description="Registry cluster id: a slug (1-63 lower-case letters, digits and '-'), never changes"
    )
    name: str = Field(description="Display name, free text")
    labels: dict[str, str] = Field(default_factory=dict, description="Operator-set labels of the cluster")
    description: str = Field("", description="Operator-set free text about the cluster")
    watch: WatchOptions = Field(default_factory=WatchOptions, description="What the watchers watch in it")
    revision: int = Field(ge=1, description="Grows with every change of this cluster; never reused")
    connection_fingerprint: str = Field(description="Changes exactly when the effective connection does")


class ClusterEvent(BaseModel):
    """clusters.v1.<added|updated|removed>.<cluster_id>"""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: ClusterEventType = Field(description="added, updated or removed (as in the subject)")
    cluster: ClusterSpec = Field(
        description="The cluster as of this event; for removed, its last state before removal"
    )
    connection_changed: bool = Field(
        description="False for a metadata-only update: watchers must not rebuild informers for it"
    )
    occurred_at: datetime = Field(description="When the registry committed the change")


KindState = Literal["watching", "starting", "forbidden", "not_installed", "failing"]


class KindHealth(BaseModel):
    """How one job kind of a cluster is being watched."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    state: KindState = Field(
        description=(
            "watching: listed and watching; starting: not listed yet (or the server's storage is "
            "initializing); forbidden: the credentials get 403 on it; not_installed: the cluster "
            "does not serve it; failing: another error, retried"
        )
    )
    error: str | None = Field(None, description="The last error of this kind's watch (forbidden, failing)")
    recovered: str | None = Field(
        None,
        description="The last time the server was found behind our resourceVersion (etcd restored?)",
    )
    recovered_at: datetime | None = Field(None, description="When that was found")


class ClusterHealth(BaseModel):
    """clusters.v1.health.<cluster_id>, reported by the watcher replica that owns the cluster."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster_id: ClusterId = Field(description="Registry cluster id")
    reachable: bool = Field(
        description="The API server's discovery answers (says nothing about RBAC: see kinds)"
    )
    kinds_served: list[str] = Field(default_factory=list, description="Kind keys the cluster serves")
    informers_running: int = Field(0, description="Watches (one per watched kind and scope) running now")
    last_error: str | None = Field(None, description="The cluster's or a watch's last error; null when none")
    watch_lag_seconds: float | None = Field(
        None,
        description="Seconds since the quietest watch last heard from the API server (an event or a "
        "bookmark); null until every watch has",
    )
    owner: str | None = Field(None, description="The watcher replica that holds the cluster's lease")
    epoch: int = Field(0, description="Fencing token of the owner's lease (as on its job events)")
    observed_at: datetime = Field(description="When the owner took this reading (its clock)")
    kinds: dict[str, KindHealth] = Field(
        default_factory=dict,
        description="Per kind key of the catalog: how it is watched (added in v1, optional)",
    )
    diagnosis_error: str | None = Field(
        None,
        description='Why job diagnoses are unavailable or partial, e.g. "diagnosis unavailable: forbidden '
        'to list pods"; job watching is unaffected (added in v1, optional)',
    )


class ClusterConnection(BaseModel):
    """The registry's answer to an authenticated watcher: the secret itself. Never broadcast, never logged."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster_id: ClusterId
    revision: int
    connection_fingerprint: str
    kubeconfig: str = Field(repr=False, description="Sanitized kubeconfig reduced to one context (YAML)")

    def __repr__(self) -> str:  # keep secrets out of logs and tracebacks
        return (
            f"ClusterConnection(cluster_id={self.cluster_id!r}, fingerprint={self.connection_fingerprint!r})"
        )

    __str__ = __repr__
