"""The API's models: what comes in (Create/Update), what goes out (Public). No secret goes out."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from trainwatch_common import WatchOptions
from trainwatch_common.events.clusters import CLUSTER_ID_PATTERN, KindHealth

ClusterIdField = Field(pattern=CLUSTER_ID_PATTERN, min_length=1, max_length=63, examples=["gpu-east-1"])
_LABEL_KEY = r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"


def _check_text(value: str, *, multiline: bool = False) -> str:
    """Printable text only: a NUL or a lone surrogate would fail in PostgreSQL, not here."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text") from None
    allowed = "\n\t" if multiline else ""
    if any(not ch.isprintable() and ch not in allowed for ch in value):
        raise ValueError("must not contain control characters")
    return value


def _check_labels(labels: dict[str, str]) -> dict[str, str]:
    if len(labels) > 64:
        raise ValueError("at most 64 labels")
    for key, value in labels.items():
        if not re.match(_LABEL_KEY, key):
            raise ValueError(f"label key {key!r} is not a Kubernetes-style label key")
        if len(value) > 253:
            raise ValueError(f"label {key!r} has a value longer than 253 characters")
        _check_text(value)
    return labels


def _check_kubeconfig(value: SecretStr) -> SecretStr:
    try:
        value.get_secret_value().encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("the kubeconfig must be valid Unicode text") from None
    return value


class ClusterCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = ClusterIdField
    name: str = Field(min_length=1, max_length=200)
    description: str = Field("", max_length=2000)
    labels: dict[str, str] = Field(default_factory=dict)
    kubeconfig: SecretStr = Field(
        json_schema_extra={"writeOnly": True, "format": "password"},
        description="Kubeconfig as YAML or JSON; write-only, never returned",
    )
    context: str | None = Field(None, max_length=253, description="Context to use; default: current-context")
    watch: WatchOptions = Field(default_factory=WatchOptions)

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        return _check_labels(labels)

    @field_validator("name", "context")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        return None if value is None else _check_text(value)

    @field_validator("description")
    @classmethod
    def _multiline(cls, value: str) -> str:
        return _check_text(value, multiline=True)

    @field_validator("kubeconfig")
    @classmethod
    def _kubeconfig(cls, value: SecretStr) -> SecretStr:
        return _check_kubeconfig(value)


class ClusterUpdate(BaseModel):
    """A partial update; a kubeconfig here rotates the credentials (and may change the connection)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, min_length=1, max_length=200)
    description: str | None = Field(None, max_length=2000)
    labels: dict[str, str] | None = None
    kubeconfig: SecretStr | None = Field(None, json_schema_extra={"writeOnly": True, "format": "password"})
    context: str | None = Field(None, max_length=253)
    watch: WatchOptions | None = None
    expected_revision: int | None = Field(
        None, ge=1, description="Refuse with 409 unless the cluster is at this revision (optimistic locking)"
    )

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str] | None) -> dict[str, str] | None:
        return None if labels is None else _check_labels(labels)

    @field_validator("name", "context")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        return None if value is None else _check_text(value)

    @field_validator("description")
    @classmethod
    def _multiline(cls, value: str | None) -> str | None:
        return None if value is None else _check_text(value, multiline=True)

    @field_validator("kubeconfig")
    @classmethod
    def _kubeconfig(cls, value: SecretStr | None) -> SecretStr | None:
        return None if value is None else _check_kubeconfig(value)


class HealthPublic(BaseModel):
    reachable: bool
    owner: str | None
    epoch: int
    observed_at: datetime
    kinds_served: list[str] = Field(default_factory=list)
    informers_running: int = 0
    last_error: str | None = None
    watch_lag_seconds: float | None = None
    kinds: dict[str, KindHealth] = Field(
        default_factory=dict,
        description="Per kind key: watching, starting, forbidden, not_installed, failing",
    )
    diagnosis_error: str | None = Field(
        None, description='e.g. "diagnosis unavailable: forbidden to list pods" (jobs are still watched)'
    )


CredentialsState = Literal["ok", "expiring", "expired"]


class ClusterPublic(BaseModel):
    id: str
    name: str
    description: str
    labels: dict[str, str]
    watch: WatchOptions
    context: str
    server: str
    auth_method: str
    connection_fingerprint: str
    credentials_expire_at: datetime | None = Field(
        None,
        description="When the registered token expires (a JWT's exp claim, e.g. a TokenRequest token "
        "from `trainwatch clusters join`); null when unknown or never. Renew with rotate-token.",
    )
    credentials_state: CredentialsState | None = Field(
        None,
        description="expired, expiring (within TRAINWATCH_REGISTRY_CREDENTIALS_WARNING_DAYS, as the "
        "trainwatch_registry_credentials_expiring gauge counts) or ok; null when credentials_expire_at is",
    )
    revision: int
    source: str
    created_at: datetime
    updated_at: datetime
    health: HealthPublic | None = None


class ClustersPublic(BaseModel):
    data: list[ClusterPublic]
    total: int
    next_cursor: str | None = Field(None, description="Pass as ?cursor= for the next page")


# Strings an API server sends are repeated to the caller cut to this many characters: a hostile
# server must not be able to make the registry's reply carry its payload (a 100 MB gitVersion).
MAX_ECHOED_CHARS = 64


class ServerVersion(BaseModel):
    git_version: str | None = None
    major: str | None = None
    minor: str | None = None
    platform: str | None = None

    @field_validator("git_version", "major", "minor", "platform", mode="before")
    @classmethod
    def _bounded(cls, value: object) -> object:
        if isinstance(value, str) and len(value) > MAX_ECHOED_CHARS:
            return value[:MAX_ECHOED_CHARS] + "…"
        return value


KindAccess = Literal["allowed", "forbidden", "not_installed", "error"]


class ConnectivityReport(BaseModel):
    """The result of talking to the cluster's API server; nothing is stored."""

    ok: bool
    server: str
    server_version: ServerVersion | None = None
    kinds_served: list[str] = Field(default_factory=list, description="Kind keys the cluster serves")
    kinds: dict[str, KindAccess] = Field(
        default_factory=dict,
        description=(
            "Per served kind key: whether the credentials may list it (a LIST ?limit=1 of each): "
            "allowed, forbidden (403; the test is then not ok), not_installed (404), error"
        ),
    )
    error: str | None = None
    elapsed_ms: float


class DryRunResult(BaseModel):
    dry_run: Literal[True] = True
    cluster: ClusterPublic
    connectivity: ConnectivityReport


class ImportedFile(BaseModel):
    file: str
    cluster_id: str | None = None
    outcome: Literal["registered", "updated", "unchanged", "skipped", "refused"]
    reasons: list[str] = Field(default_factory=list)


class ImportReport(BaseModel):
    directory: str
    files: list[ImportedFile]


class ErrorItem(BaseModel):
    type: str
    loc: list[str | int]
    msg: str
    ctx: dict[str, Any] | None = Field(
        None,
        description="For cluster.duplicate_server and cluster.server_changed: reason (msg without "
        "the force hint), server, and clusters (the ids already registered at that server)",
    )


class ErrorBody(BaseModel):
    detail: list[ErrorItem] | str
