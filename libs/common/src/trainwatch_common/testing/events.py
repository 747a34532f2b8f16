"""Job events for tests: a builder with plain defaults, and publishing one as the watcher does.

Each package's tests keep their own small factory with the defaults their assertions read, and
build on these two, so the event's shape and the way it reaches JetStream live in one place.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nats.js import JetStreamContext

from trainwatch_common.events.envelope import wrap_job_event
from trainwatch_common.events.ids import job_event_id
from trainwatch_common.events.jobs import JobRef, JobStatusEvent, Phase
from trainwatch_common.kinds import kinds_for_key
from trainwatch_common.subjects import job_subject

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def job_event(
    *,
    cluster_id: str = "alpha",
    namespace: str = "team-a",
    name: str = "train-1",
    uid: str = "uid-1",
    kind_key: str = "pytorchjob",
    resource_version: str = "42",
    sequence: int = 0,
    epoch: int = 1,
    phase: Phase = Phase.RUNNING,
    terminal: bool | None = None,
    change: str | None = None,
    observed_at: datetime = T0,
    **fields: Any,
) -> JobStatusEvent:
    """A valid event of one job. ``change`` defaults to "created" for sequence 0, else
    "transition"; ``terminal`` to whether the phase is; any other field of the event by name."""
    kind = kinds_for_key(kind_key)[0]
    return JobStatusEvent.model_validate(
        {
            "event_id": job_event_id(cluster_id, uid, sequence),
            "change": change or ("created" if sequence == 0 else "transition"),
            "sequence": sequence,
            "epoch": epoch,
            "job": JobRef(
                cluster_id=cluster_id,
                api_version=kind.api_version,
                kind=kind.kind,
                kind_key=kind_key,
                namespace=namespace,
                name=name,
                uid=uid,
                resource_version=resource_version,
            ),
            "phase": phase,
            "terminal": phase in (Phase.SUCCEEDED, Phase.FAILED) if terminal is None else terminal,
            "observed_at": observed_at,
            **fields,
        }
    )


async def publish_job_event(
    js: JetStreamContext, event: JobStatusEvent, *, msg_id: str | None = None
) -> None:
    """Publish as the watcher does: the job's subject, the CloudEvent, the event id as Nats-Msg-Id."""
    job = event.job
    subject = job_subject(
        cluster_id=job.cluster_id, namespace=job.namespace, kind_key=job.kind_key, name=job.name
    )
    await js.publish(
        subject, wrap_job_event(event).to_json(), headers={"Nats-Msg-Id": msg_id or event.event_id}
    )
