"""The persister on a three-node JetStream cluster with R3 streams (issue 17): the JOBS stream
leader is killed (SIGKILL) while events are published and consumed; every event is written once."""

from __future__ import annotations

import asyncio
import time

import nats
import pytest
import sqlalchemy as sa
from persister_factories import make_event, running_persister
from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_common import JobStatusEvent, Phase, job_subject, wrap_job_event
from trainwatch_common.streams import JOBS_STREAM, PERSISTER_CONSUMER
from trainwatch_common.testing import NatsCluster, eventually
from trainwatch_persister.tables import job_transitions

JOBS = 60
PHASES = [Phase.PENDING, Phase.RUNNING, Phase.SUCCEEDED]


async def _publish_acked(js, event: JobStatusEvent) -> None:  # type: ignore[no-untyped-def]
    """As the watcher does: the same message id again until JetStream acks it."""
    while True:
        try:
            job = event.job
            subject = job_subject(
                cluster_id=job.cluster_id, namespace=job.namespace, kind_key=job.kind_key, name=job.name
            )
            await js.publish(
                subject, wrap_job_event(event).to_json(), headers={"Nats-Msg-Id": event.event_id}, timeout=2
            )
            return
        except (TimeoutError, nats.errors.Error):
            await asyncio.sleep(0.1)


async def test_persister_survives_the_jobs_leader_killed(
    nats_cluster: NatsCluster, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINWATCH_STREAM_REPLICAS", "3")
    events = [make_event(uid=f"u{j}", sequence=s, phase=p) for s, p in enumerate(PHASES) for j in range(JOBS)]
    client = await nats.connect(
        nats_cluster.url.split(","), max_reconnect_attempts=-1, reconnect_time_wait=0.1
    )
    try:
        async with running_persister(
            database_url=sqlite_url, nats_url=nats_cluster.url, batch_size=20
        ) as app:
            js = client.jetstream(timeout=5)
            engine: AsyncEngine = app.state.engine
            assert (await js.stream_info(JOBS_STREAM.name or "")).config.num_replicas == 3
            for event in events[: len(events) // 2]:
                await _publish_acked(js, event)
            leader = (await js.stream_info(JOBS_STREAM.name or "")).cluster.leader  # type: ignore[union-attr]
            assert leader is not None
            nats_cluster.node(leader).kill()
            killed = time.monotonic()
            for event in events[len(events) // 2 :]:
                await _publish_acked(js, event)

            async def written() -> bool:
                async with engine.connect() as conn:
                    count = (
                        await conn.execute(sa.select(sa.func.count()).select_from(job_transitions))
                    ).scalar()
                return count == len(events)

            await eventually(written, timeout=60, message="every event written after the leader was killed")
            print(
                f"persister: all {len(events)} events written "
                f"{time.monotonic() - killed:.2f}s after {leader} was killed"
            )

            async def acked() -> bool:
                info = await js.consumer_info(PERSISTER_CONSUMER.stream, "persister")
                return bool(info.num_pending == 0 and info.num_ack_pending == 0)

            await eventually(acked, timeout=30, message="every message acked")
            async with engine.connect() as conn:
                history = (await conn.execute(sa.select(job_transitions.c.event_id))).scalars().all()
            assert sorted(history) == sorted(e.event_id for e in events), "none lost, none doubled"
    finally:
        await client.close()
