"""Ingest benchmark: events/s from JetStream into PostgreSQL, batched vs row-at-a-time.

Both modes run the real consumer (fetch, decode, one transaction, ack after commit) against a
fresh database, draining a pre-published stream; the only difference is the batch size.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import nats
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from trainwatch_common import (
    JobRef,
    JobStatusEvent,
    Phase,
    ensure_consumer,
    ensure_streams,
    job_event_id,
    job_subject,
    wrap_job_event,
)
from trainwatch_common.streams import JOBS_STREAM, PERSISTER_CONSUMER
from trainwatch_persister import repository
from trainwatch_persister.consumer import JobEventConsumer
from trainwatch_persister.database import make_engine
from trainwatch_persister.migrate import migrate
from trainwatch_persister.settings import PersisterSettings

PHASES = [Phase.PENDING, Phase.RUNNING, Phase.RESTARTING, Phase.RUNNING, Phase.SUCCEEDED]
START = datetime(2026, 11, 1, tzinfo=UTC)


@dataclass(frozen=True)
class IngestResult:
    mode: str
    batch_size: int
    events: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.events / self.seconds


def make_events(count: int, *, run: str) -> list[JobStatusEvent]:
    events = []
    for n in range(count // len(PHASES)):
        cluster, uid = f"cluster-{n % 10}", f"{run}-{n}"
        for sequence, phase in enumerate(PHASES):
            events.append(
                JobStatusEvent(
                    event_id=job_event_id(cluster, uid, sequence),
                    change="created" if sequence == 0 else "transition",
                    sequence=sequence, epoch=1, watcher_id="bench",
                    job=JobRef(cluster_id=cluster, api_version="kubeflow.org/v1", kind="PyTorchJob",
                               kind_key="pytorchjob", namespace=f"ns-{n % 7}", name=f"train-{n}", uid=uid,
                               resource_version=str(1000 + n * 10 + sequence)),
                    phase=phase, terminal=phase is Phase.SUCCEEDED,
                    created_at=START, observed_at=START + timedelta(seconds=n + sequence),
                    labels={"team": f"team-{n % 5}"}, owner=f"user-{n % 50}",
                )
            )  # fmt: skip
    return events


async def publish_all(js: JetStreamContext, events: list[JobStatusEvent]) -> None:
    for event in events:
        job = event.job
        subject = job_subject(
            cluster_id=job.cluster_id, namespace=job.namespace, kind_key=job.kind_key, name=job.name
        )
        await js.publish_async(
            subject, wrap_job_event(event).to_json(), headers={"Nats-Msg-Id": event.event_id}
        )
    await js.publish_async_completed()


async def _fresh_stream(js: JetStreamContext) -> None:
    with contextlib.suppress(NotFoundError):
        await js.delete_stream(JOBS_STREAM.name or "JOBS")
    await ensure_streams(js)
    await ensure_consumer(js, PERSISTER_CONSUMER)


async def _drained(js: JetStreamContext, expected: int) -> bool:
    info = await js.consumer_info(PERSISTER_CONSUMER.stream, PERSISTER_CONSUMER.config.durable_name or "")
    return info.ack_floor.stream_seq >= expected and info.num_ack_pending == 0


async def run_mode(
    *, mode: str, batch_size: int, events: int, nats_url: str, database_url: str
) -> IngestResult:
    await migrate(database_url)
    client = await nats.connect(nats_url)
    engine = make_engine(database_url)
    try:
        js = client.jetstream(publish_async_max_pending=4000)
        await _fresh_stream(js)
        await publish_all(js, make_events(events, run=mode))
        settings = PersisterSettings(database_url=database_url, batch_size=batch_size, batch_max_wait_ms=100)
        consumer = JobEventConsumer(js=js, engine=engine, settings=settings)
        started = time.perf_counter()
        task = asyncio.create_task(consumer.run(), name=f"bench-consumer-{mode}")
        try:
            while not await _drained(js, events):  # noqa: ASYNC110 - polling the server's ack floor
                await asyncio.sleep(0.05)
            elapsed = time.perf_counter() - started
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return IngestResult(mode=mode, batch_size=batch_size, events=events, seconds=elapsed)
    finally:
        await engine.dispose()
        await client.close()


async def write_path(*, database_url: str, events: int, batch_size: int) -> IngestResult:
    """The database part alone: repository.write_events, one transaction per batch."""
    await migrate(database_url)
    engine = make_engine(database_url)
    batch = make_events(events, run=f"direct{batch_size}")
    try:
        started = time.perf_counter()
        for start in range(0, len(batch), batch_size):
            async with engine.begin() as conn:
                await repository.write_events(conn, batch[start : start + batch_size])
        return IngestResult(
            f"write path, {batch_size}/txn", batch_size, len(batch), time.perf_counter() - started
        )
    finally:
        await engine.dispose()
