"""CloudEvents 1.0 envelope, structured JSON mode, so other teams can use standard SDKs.

https://github.com/cloudevents/spec/blob/v1.0.2/cloudevents/formats/json-format.md
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field

from trainwatch_common.events.clusters import ClusterEvent, ClusterHealth
from trainwatch_common.events.jobs import JobStatusEvent

CONTENT_TYPE = "application/cloudevents+json"

JOB_STATUS_TYPE = "io.trainwatch.job.status.v1"
CLUSTER_EVENT_TYPE = "io.trainwatch.cluster.{type}.v1"
CLUSTER_HEALTH_TYPE = "io.trainwatch.cluster.health.v1"

DataT = TypeVar("DataT", bound=BaseModel)


class CloudEvent(BaseModel, Generic[DataT]):
    model_config = ConfigDict(frozen=True, extra="allow")

    specversion: str = "1.0"
    id: str
    source: str
    type: str
    subject: str | None = None
    time: datetime
    datacontenttype: str = "application/json"
    dataschema: str | None = None
    data: DataT = Field(description="The event itself")

    def to_json(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json", exclude_none=True))


def wrap_job_event(event: JobStatusEvent) -> CloudEvent[JobStatusEvent]:
    job = event.job
    return CloudEvent[JobStatusEvent](
        id=event.event_id,
        source=f"/trainwatch/clusters/{job.cluster_id}",
        type=JOB_STATUS_TYPE,
        subject=f"{job.namespace}/{job.kind_key}/{job.name}",
        time=event.observed_at,
        dataschema="https://trainwatch.dev/schemas/v1/job-status-event.json",
        data=event,
    )


def wrap_cluster_event(event: ClusterEvent, *, event_id: str) -> CloudEvent[ClusterEvent]:
    return CloudEvent[ClusterEvent](
        id=event_id,
        source="/trainwatch/registry",
        type=CLUSTER_EVENT_TYPE.format(type=event.type),
        subject=event.cluster.id,
        time=event.occurred_at,
        dataschema="https://trainwatch.dev/schemas/v1/cluster-event.json",
        data=event,
    )


def wrap_cluster_health(health: ClusterHealth, *, event_id: str) -> CloudEvent[ClusterHealth]:
    return CloudEvent[ClusterHealth](
        id=event_id,
        source=f"/trainwatch/watcher/{health.owner or 'unowned'}",
        type=CLUSTER_HEALTH_TYPE,
        subject=health.cluster_id,
        time=health.observed_at,
        dataschema="https://trainwatch.dev/schemas/v1/cluster-health.json",
        data=health,
    )


def parse_job_event(payload: bytes | str) -> JobStatusEvent:
    """Read a job-status CloudEvent; raises pydantic.ValidationError on anything else."""
    return CloudEvent[JobStatusEvent].model_validate_json(payload).data


def parse_cluster_event(payload: bytes | str) -> ClusterEvent:
    return CloudEvent[ClusterEvent].model_validate_json(payload).data


def parse_cluster_health(payload: bytes | str) -> ClusterHealth:
    return CloudEvent[ClusterHealth].model_validate_json(payload).data


def envelope_fields(payload: bytes) -> dict[str, Any]:
    """The raw envelope as a dict (for consumers that only route on attributes)."""
    value = orjson.loads(payload)
    if not isinstance(value, dict):
        raise ValueError("a CloudEvent in structured mode is a JSON object")
    return value
