"""The example other teams copy runs against a real JetStream server."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import nats

from trainwatch_common import JobStatusEvent, ensure_streams
from trainwatch_common.testing import eventually
from trainwatch_common.testing.events import job_event, publish_job_event

_spec = importlib.util.spec_from_file_location(
    "subscribe_jobs", Path(__file__).with_name("subscribe_jobs.py")
)
assert _spec is not None
assert _spec.loader is not None
subscribe_jobs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(subscribe_jobs)


async def publish(nats_url: str, events: list[JobStatusEvent]) -> None:
    client = await nats.connect(nats_url)
    try:
        js = client.jetstream()
        await ensure_streams(js)
        for event in events:
            await publish_job_event(js, event)
    finally:
        await client.close()


async def test_example_consumer_filters_by_namespace_and_resumes(nats_url: str) -> None:
    wanted = [job_event(sequence=s, namespace="team-a") for s in range(3)]
    other = job_event(sequence=9, namespace="team-b")
    await publish(nats_url, [wanted[0], other, wanted[1]])

    received: list[JobStatusEvent] = []

    async def handle(event: JobStatusEvent) -> None:
        received.append(event)

    stop = asyncio.Event()
    run = dict(
        nats_url=nats_url, durable="example", handle=handle, stop=stop, cluster_id="alpha", namespace="team-a"
    )
    task = asyncio.create_task(subscribe_jobs.consume(**run), name="example-consumer")
    await eventually(lambda: len(received) == 2, timeout=10, message="two team-a events")
    stop.set()
    await task

    # Restarted, the durable consumer resumes after what was acked.
    await publish(nats_url, [wanted[2]])
    stop = asyncio.Event()
    run["stop"] = stop
    task = asyncio.create_task(subscribe_jobs.consume(**run), name="example-consumer")
    await eventually(lambda: len(received) == 3, timeout=10, message="the third event")
    stop.set()
    await task
    assert [e.sequence for e in received] == [0, 1, 2]
    assert all(e.job.namespace == "team-a" for e in received)
