"""The database dies mid-stream and comes back: nothing lost, nothing doubled."""

from __future__ import annotations

import asyncio
import time

import httpx
import sqlalchemy as sa
from persister_factories import jetstream, make_event, publish, running_persister
from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_common import Phase
from trainwatch_common.streams import PERSISTER_CONSUMER
from trainwatch_common.testing import PostgresServer, eventually
from trainwatch_persister.tables import job_transitions, jobs

JOBS = 150
PHASES = [Phase.PENDING, Phase.RUNNING, Phase.RESTARTING, Phase.RUNNING, Phase.SUCCEEDED]


async def counts(engine: AsyncEngine) -> tuple[int, int]:
    async with engine.connect() as conn:
        transitions = (await conn.execute(sa.select(sa.func.count()).select_from(job_transitions))).scalar()
        rows = (await conn.execute(sa.select(sa.func.count()).select_from(jobs))).scalar()
    return int(transitions or 0), int(rows or 0)


async def test_database_killed_mid_stream_and_restarted(
    postgres_process: PostgresServer, nats_url: str
) -> None:
    events = [make_event(uid=f"u{j}", sequence=s, phase=p) for s, p in enumerate(PHASES) for j in range(JOBS)]
    first_half, second_half = events[: len(events) // 2], events[len(events) // 2 :]
    async with (
        jetstream(nats_url) as js,
        running_persister(database_url=postgres_process.url, nats_url=nats_url, batch_size=25) as app,
    ):
        engine: AsyncEngine = app.state.engine
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://persister")

        async def publish_all(batch: list) -> None:  # type: ignore[type-arg]
            for event in batch:
                await publish(js, event)

        publishing = asyncio.create_task(publish_all(first_half), name="test-publisher")
        try:
            await eventually(lambda: _some_written(engine), timeout=20, message="writes under way")
            postgres_process.kill()  # while batches are being fetched and written
            await publishing
            await publish_all(second_half)  # arrive during the outage
            await eventually(lambda: not app.state.consumer.database_ok, message="outage noticed")
            not_ready = await client.get("/readyz")
            assert not_ready.status_code == 503
            # Which dependency and why (issue 17); NATS is fine meanwhile.
            assert not_ready.json()["checks"]["database"] != "ok", not_ready.text
            assert not_ready.json()["checks"]["consumer"] == "ok", not_ready.text
            assert postgres_process.url not in not_ready.text
            pending = await js.consumer_info(PERSISTER_CONSUMER.stream, "persister")
            assert pending.num_pending + pending.num_ack_pending > 0, (
                "nothing may be acked while the database is down"
            )

            postgres_process.start()
            await eventually(
                lambda: _all_written(engine), timeout=60, message="every event written after restart"
            )
            await eventually(lambda: _fully_acked(js), timeout=20, message="every message acked")
            assert app.state.consumer.database_ok
            ready = await client.get("/readyz")
            assert ready.status_code == 200
            assert ready.json()["checks"] == {"database": "ok", "consumer": "ok", "tasks": "ok"}
            async with engine.connect() as conn:
                states = {
                    (r.phase, r.sequence)
                    for r in await conn.execute(sa.select(jobs.c.phase, jobs.c.sequence))
                }
                history = (await conn.execute(sa.select(job_transitions.c.event_id))).scalars().all()
            assert states == {("Succeeded", 4)}
            assert sorted(history) == sorted(e.event_id for e in events)  # each once: none lost, none doubled
        finally:
            publishing.cancel()
            await client.aclose()


async def _some_written(engine: AsyncEngine) -> bool:
    return (await counts(engine))[0] > 0


async def _all_written(engine: AsyncEngine) -> bool:
    return await counts(engine) == (JOBS * len(PHASES), JOBS)


async def _fully_acked(js: object) -> bool:
    info = await js.consumer_info(PERSISTER_CONSUMER.stream, "persister")  # type: ignore[attr-defined]
    return bool(info.num_pending == 0 and info.num_ack_pending == 0)


async def test_graceful_postgres_restart_only_delays_writes(
    postgres_process: PostgresServer, nats_url: str
) -> None:
    """A restart (SIGTERM, start again on the same port), as an operator's upgrade or a failover
    does: every pooled connection is closed by the server. The writes wait and then all land."""
    events = [make_event(uid=f"r{j}", sequence=s, phase=p) for s, p in enumerate(PHASES) for j in range(JOBS)]
    first_half, second_half = events[: len(events) // 2], events[len(events) // 2 :]
    async with (
        jetstream(nats_url) as js,
        running_persister(
            database_url=postgres_process.url,
            nats_url=nats_url,
            batch_size=25,
            retry_initial_seconds=0.2,
            retry_max_seconds=10.0,  # the shipped back-off
        ) as app,  # fmt: skip
    ):
        engine: AsyncEngine = app.state.engine
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://persister")
        try:
            for event in first_half:
                await publish(js, event)
            await eventually(lambda: _some_written(engine), timeout=20, message="writes under way")
            postgres_process.stop()
            for event in second_half:
                await publish(js, event)
            await eventually(lambda: not app.state.consumer.database_ok, message="outage noticed")
            down = await client.get("/v1/jobs", headers={"Authorization": "Bearer viewer-token"})
            assert down.status_code == 503, down.text  # never a 500 or a crash

            postgres_process.start()
            back = time.monotonic()
            await eventually(lambda: _all_written(engine), timeout=60, message="every event written")
            delay = time.monotonic() - back
            await eventually(lambda: _fully_acked(js), timeout=20, message="every message acked")
            print(f"persister: every write done {delay:.2f}s after PostgreSQL was back")
            assert (await client.get("/readyz")).status_code == 200
            assert app.state.tasks.crashes("persister-consumer") == 0
            async with engine.connect() as conn:
                history = (await conn.execute(sa.select(job_transitions.c.event_id))).scalars().all()
            assert sorted(history) == sorted(e.event_id for e in events)
        finally:
            await client.aclose()
