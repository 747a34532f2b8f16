"""Silences, pure: what a silence matches, and which events it suppresses (issue 18).

A silence names one or more matchers; an event is silenced when it satisfies all of them
(a matcher left out matches anything). Values compare exactly (no globs: a silence is usually
"this job" or "this namespace", and an exact value cannot silence more than its author meant):

- ``cluster``: the cluster id; ``namespace``; ``kind``: the kind key (``pytorchjob``) or the
  Kubernetes kind (``PyTorchJob``), either case;
- ``job``: the job's name or its uid;
- ``owner``: the event's owner;
- ``labels``: ``{key: value}``, every pair among the job labels the event carries (the cluster's
  ``selected_labels``);
- ``category``: the diagnosis category (``OOMKilled``, ...); an event without a diagnosis does
  not match a silence that names one.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field, field_validator, model_validator

from trainwatch_common.events.diagnosis import DiagnosisCategory
from trainwatch_common.events.jobs import JobStatusEvent

MAX_DURATION_SECONDS = 90 * 24 * 3600  # a silence is temporary; a longer one is a rule change


class Matchers(BaseModel):
    model_config = {"extra": "forbid"}

    cluster: str | None = Field(None, max_length=63)
    namespace: str | None = Field(None, max_length=63)
    kind: str | None = Field(None, max_length=63)
    job: str | None = Field(None, max_length=253, description="The job's name or uid")
    owner: str | None = Field(None, max_length=253)
    labels: dict[str, str] = Field(default_factory=dict, description="key=value pairs, all must match")
    category: str | None = Field(None, description="A diagnosis category, e.g. OOMKilled")

    @field_validator("cluster", "namespace", "kind", "job", "owner", "category")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None

    @field_validator("category")
    @classmethod
    def _known_category(cls, value: str | None) -> str | None:
        if value is not None and value not in {c.value for c in DiagnosisCategory}:
            known = ", ".join(c.value for c in DiagnosisCategory)
            raise ValueError(f"unknown diagnosis category {value!r}; one of {known}")
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > 20:
            raise ValueError("at most 20 labels")
        for key in value:
            if not key.strip():
                raise ValueError("a label key may not be empty")
        return value

    @model_validator(mode="after")
    def _names_something(self) -> Matchers:
        # An empty silence would mute every notification: that is switching the notifier off.
        if not self.labels and all(
            getattr(self, name) is None
            for name in ("cluster", "namespace", "kind", "job", "owner", "category")
        ):
            raise ValueError(
                "a silence must name at least one of cluster, namespace, kind, job, owner, labels, category"
            )
        return self

    def matches(self, event: JobStatusEvent) -> bool:
        job = event.job
        if self.cluster is not None and job.cluster_id != self.cluster:
            return False
        if self.namespace is not None and job.namespace != self.namespace:
            return False
        if self.kind is not None and self.kind.lower() not in (job.kind_key.lower(), job.kind.lower()):
            return False
        if self.job is not None and self.job not in (job.name, job.uid):
            return False
        if self.owner is not None and event.owner != self.owner:
            return False
        if any(event.labels.get(key) != value for key, value in self.labels.items()):
            return False
        if self.category is not None:
            diagnosis = event.diagnosis
            if diagnosis is None or diagnosis.category.value != self.category:
                return False
        return True


class Silence(BaseModel):
    """A silence as stored and as the API shows it."""

    id: str
    matchers: Matchers
    author: str
    created_by: str = Field(description="The short id of the token that created it (never the token)")
    reason: str
    created_at: datetime
    ends_at: datetime
    expired_by: str | None = Field(None, description="The token id that expired it early, if one did")

    def active(self, now: datetime) -> bool:
        return self.created_at <= now < self.ends_at

    def state(self, now: datetime) -> str:
        return "active" if self.active(now) else "expired"


def first_match(silences: list[Silence], event: JobStatusEvent, now: datetime) -> Silence | None:
    """The oldest active silence that matches the event (the one its suppression is recorded under)."""
    for silence in sorted(silences, key=lambda s: (s.created_at, s.id)):
        if silence.active(now) and silence.matchers.matches(event):
            return silence
    return None
