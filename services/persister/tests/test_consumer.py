"""The consumer end to end: real nats-server with JetStream, real PostgreSQL and SQLite."""

from __future__ import annotations

import json

import sqlalchemy as sa
from nats.js import JetStreamContext
from persister_factories import jetstream, make_event, migrated_engine, publish, running_persister
from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_common import JobStatusEvent, Phase, job_subject
from trainwatch_common.streams import DEADLETTER_STREAM, PERSISTER_CONSUMER
from trainwatch_common.testing import eventually
from trainwatch_persister import repository
from trainwatch_persister.consumer import REASON_HEADER, SEQUENCE_HEADER, SUBJECT_HEADER
from trainwatch_persister.tables import job_transitions, jobs

PHASES = [Phase.PENDING, Phase.RUNNING, Phase.RESTARTING, Phase.RUNNING, Phase.SUCCEEDED]


def lifecycle(uid: str, *, cluster: str = "alpha") -> list[JobStatusEvent]:
    return [make_event(uid=uid, cluster=cluster, sequence=s, phase=p) for s, p in enumerate(PHASES)]


async def counts(engine: AsyncEngine) -> tuple[int, int]:
    async with engine.connect() as conn:
        transitions = (
            await conn.execute(sa.select(sa.func.count()).select_from(job_transitions))
        ).scalar_one()
        rows = (await conn.execute(sa.select(sa.func.count()).select_from(jobs))).scalar_one()
    return int(transitions), int(rows)


async def has_counts(engine: AsyncEngine, expected: tuple[int, int]) -> bool:
    return await counts(engine) == expected


async def final_phases(engine: AsyncEngine) -> set[tuple[str, int]]:
    async with engine.connect() as conn:
        return {(r.phase, r.sequence) for r in await conn.execute(sa.select(jobs.c.phase, jobs.c.sequence))}


async def fully_acked(js: JetStreamContext) -> bool:
    info = await js.consumer_info(PERSISTER_CONSUMER.stream, PERSISTER_CONSUMER.config.durable_name or "")
    return info.num_pending == 0 and info.num_ack_pending == 0


async def test_events_flow_into_the_database_and_are_acked(database_url: str, nats_url: str) -> None:
    async with (
        jetstream(nats_url) as js,
        running_persister(database_url=database_url, nats_url=nats_url) as app,
    ):
        events = [e for i in range(40) for e in lifecycle(f"u{i}", cluster=("alpha", "beta")[i % 2])]
        for event in events:
            await publish(js, event)
        engine: AsyncEngine = app.state.engine
        await eventually(lambda: has_counts(engine, (200, 40)), timeout=20, message="all events written")
        assert await final_phases(engine) == {("Succeeded", 4)}
        await eventually(lambda: fully_acked(js), message="every message acked")


async def test_redelivered_and_republished_events_are_idempotent(database_url: str, nats_url: str) -> None:
    events = [e for i in range(10) for e in lifecycle(f"u{i}")]
    # A previous replica wrote half the stream and died before acking: all of it is redelivered.
    engine = await migrated_engine(database_url)
    async with engine.begin() as conn:
        await repository.write_events(conn, events[:25])
    await engine.dispose()
    async with jetstream(nats_url) as js:
        for event in events:
            await publish(js, event)
        # A watcher re-published after the JetStream duplicate window: same event ids, new message ids.
        for event in events[10:30]:
            await publish(js, event, msg_id=f"{event.event_id}-again")
        async with running_persister(database_url=database_url, nats_url=nats_url) as app:
            await eventually(lambda: fully_acked(js), timeout=20, message="every message acked")
            assert await counts(app.state.engine) == (50, 10)
            assert await final_phases(app.state.engine) == {("Succeeded", 4)}


async def test_poison_messages_are_dead_lettered_without_blocking_the_batch(
    database_url: str, nats_url: str
) -> None:
    subject = job_subject(cluster_id="alpha", namespace="team-a", kind_key="pytorchjob", name="bad")
    async with jetstream(nats_url) as js:
        await publish(js, make_event(uid="good-1"))
        await js.publish(subject, b"\x00not json at all")
        await js.publish(
            subject, json.dumps({"specversion": "1.0", "id": "x", "data": {"phase": "Nope"}}).encode()
        )
        await publish(js, make_event(uid="good-2"))
        async with running_persister(database_url=database_url, nats_url=nats_url) as app:
            await eventually(lambda: fully_acked(js), timeout=20, message="every message acked")
            assert await counts(app.state.engine) == (2, 2)

        dead = await js.pull_subscribe(">", durable="inspect", stream=DEADLETTER_STREAM.name)
        letters = await dead.fetch(2, timeout=5)
        assert [m.subject for m in letters] == ["deadletter.v1.persister.invalid-event"] * 2
        assert letters[0].data == b"\x00not json at all"
        for letter in letters:
            assert letter.headers is not None
            assert letter.headers[REASON_HEADER] == "invalid-event"
            assert letter.headers[SUBJECT_HEADER] == subject
        assert [m.headers[SEQUENCE_HEADER] for m in letters if m.headers] == ["2", "3"]


async def test_replicas_share_the_durable_consumer(database_url: str, nats_url: str) -> None:
    events = [e for i in range(60) for e in lifecycle(f"u{i}")]
    async with (
        jetstream(nats_url) as js,
        running_persister(database_url=database_url, nats_url=nats_url) as first,
        running_persister(database_url=database_url, nats_url=nats_url, migrate_on_start=False) as second,
    ):
        for event in events:
            await publish(js, event)
        await eventually(lambda: fully_acked(js), timeout=30, message="every message acked")
        assert await counts(first.state.engine) == (300, 60)
        assert await final_phases(first.state.engine) == {("Succeeded", 4)}
        assert first.state.consumer.batches_written + second.state.consumer.batches_written > 0


async def test_a_row_the_database_refuses_is_dead_lettered_alone(postgres_url: str, nats_url: str) -> None:
    """PostgreSQL enforces VARCHAR(253): the batch is retried event by event and only the bad one goes."""
    too_long = make_event(uid="long", name="x" * 300)
    async with jetstream(nats_url) as js:
        await publish(js, make_event(uid="before"))
        await publish(js, too_long)
        await publish(js, make_event(uid="after"))
        async with running_persister(database_url=postgres_url, nats_url=nats_url) as app:
            await eventually(lambda: fully_acked(js), timeout=20, message="every message acked")
            assert await counts(app.state.engine) == (2, 2)
        dead = await js.pull_subscribe(">", durable="inspect", stream=DEADLETTER_STREAM.name)
        (letter,) = await dead.fetch(1, timeout=5)
        assert letter.subject == "deadletter.v1.persister.db-rejected"
        assert letter.headers is not None
        assert "too long" in letter.headers["Trainwatch-Error"]


async def test_out_of_order_and_stale_epoch_events_over_the_bus(database_url: str, nats_url: str) -> None:
    arrivals = [
        make_event(uid="j", sequence=2, epoch=5, phase=Phase.RUNNING),
        make_event(uid="j", sequence=0, epoch=4),  # late
        make_event(
            uid="j", sequence=3, epoch=4, rv="999", phase=Phase.FAILED, event_id="stale-3"
        ),  # fenced off
        make_event(uid="j", sequence=3, epoch=5, rv="200", phase=Phase.SUCCEEDED),
        make_event(uid="j", sequence=1, epoch=4, phase=Phase.PENDING),  # late
        make_event(uid="j", sequence=4, epoch=5, phase=Phase.SUCCEEDED, change="deleted"),
    ]
    async with jetstream(nats_url) as js:
        for event in arrivals:
            await publish(js, event)
        async with running_persister(database_url=database_url, nats_url=nats_url, batch_size=2) as app:
            await eventually(lambda: fully_acked(js), timeout=20, message="every message acked")
            async with app.state.engine.connect() as conn:
                row = (await conn.execute(sa.select(jobs))).mappings().one()
            assert (row["phase"], row["sequence"], row["epoch"]) == ("Succeeded", 4, 5)
            assert row["deleted_at"] is not None
            assert await counts(app.state.engine) == (6, 1)  # every distinct event kept in the history


async def test_events_trickling_in_are_written_in_one_transaction_and_acked_after_its_commit(
    database_url: str, nats_url: str
) -> None:
    """A fetch that does not fill the batch waits (batch_coalesce_ms) for more: what it took stays
    unacked and unwritten while the rest of the events arrive, and all five are one transaction."""
    first, rest = lifecycle("u0")[:3], lifecycle("u0")[3:]
    # Long enough for the test to see the first events held and publish the rest within it.
    coalescing = {"batch_size": 5, "batch_coalesce_ms": 10_000}
    async with (
        jetstream(nats_url) as js,
        running_persister(database_url=database_url, nats_url=nats_url, **coalescing) as app,
    ):
        for event in first:
            await publish(js, event)

        async def held() -> bool:
            info = await js.consumer_info(
                PERSISTER_CONSUMER.stream, PERSISTER_CONSUMER.config.durable_name or ""
            )
            return info.num_ack_pending >= 1 and info.ack_floor.stream_seq == 0

        await eventually(held, timeout=20, message="the consumer holding delivered, unacked events")
        engine: AsyncEngine = app.state.engine
        assert await counts(engine) == (0, 0)  # held, not written: and nothing acked (held())
        assert app.state.consumer.batches_written == 0
        for event in rest:
            await publish(js, event)
        await eventually(lambda: fully_acked(js), timeout=30, message="every message acked")
        assert await counts(engine) == (5, 1)
        assert await final_phases(engine) == {("Succeeded", 4)}
        assert app.state.consumer.batches_written == 1
        async with engine.connect() as conn:
            sequences = (await conn.execute(sa.select(job_transitions.c.sequence))).scalars()
            assert sorted(sequences) == [0, 1, 2, 3, 4]
