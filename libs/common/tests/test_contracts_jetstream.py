"""Round-trip the contracts through a real JetStream server."""

from __future__ import annotations

import nats
import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy

from trainwatch_common import (
    JobStatusEvent,
    ensure_consumer,
    ensure_streams,
    job_filter,
    job_subject,
    parse_job_event,
    wrap_job_event,
)
from trainwatch_common.streams import ALL_STREAMS, CLUSTERS_BUCKET, PERSISTER_CONSUMER
from trainwatch_common.testing.events import job_event


def make_event(*, name: str = "train-1", sequence: int = 0, namespace: str = "team-a") -> JobStatusEvent:
    return job_event(name=name, sequence=sequence, namespace=namespace, epoch=3)


async def test_streams_are_created_idempotently(nats_url: str) -> None:
    client = await nats.connect(nats_url)
    try:
        js = client.jetstream()
        await ensure_streams(js)
        await ensure_streams(js)  # a second replica starting up changes nothing
        names = sorted(info.config.name for info in await js.streams_info())
        expected = [s.name for s in ALL_STREAMS if s.name] + [f"KV_{CLUSTERS_BUCKET.bucket}"]
        assert names == sorted(expected)
        await ensure_consumer(js, PERSISTER_CONSUMER)
        await ensure_consumer(js, PERSISTER_CONSUMER)
        info = await js.consumer_info("JOBS", "persister")
        assert info.config.durable_name == "persister"
    finally:
        await client.close()


async def test_publish_with_msg_id_suppresses_the_duplicate(nats_url: str) -> None:
    client = await nats.connect(nats_url)
    try:
        js = client.jetstream()
        await ensure_streams(js)
        event = make_event()
        subject = job_subject(cluster_id="alpha", namespace="team-a", kind_key="pytorchjob", name="train-1")
        first = await js.publish(
            subject, wrap_job_event(event).to_json(), headers={"Nats-Msg-Id": event.event_id}
        )
        again = await js.publish(
            subject, wrap_job_event(event).to_json(), headers={"Nats-Msg-Id": event.event_id}
        )
        assert not first.duplicate
        assert again.duplicate
        assert again.seq == first.seq
        info = await js.stream_info("JOBS")
        assert info.state.messages == 1
    finally:
        await client.close()


async def test_durable_consumer_receives_acks_and_resumes(nats_url: str) -> None:
    client = await nats.connect(nats_url)
    try:
        js = client.jetstream()
        await ensure_streams(js)
        for sequence in range(3):
            event = make_event(sequence=sequence)
            await js.publish(
                job_subject(cluster_id="alpha", namespace="team-a", kind_key="pytorchjob", name="train-1"),
                wrap_job_event(event).to_json(),
                headers={"Nats-Msg-Id": event.event_id},
            )
        config = ConsumerConfig(durable_name="test-reader", deliver_policy=DeliverPolicy.ALL)
        sub = await js.pull_subscribe(job_filter(cluster_id="alpha"), durable="test-reader", config=config)
        messages = await sub.fetch(2, timeout=5)
        received = [parse_job_event(m.data) for m in messages]
        assert [e.sequence for e in received] == [0, 1]
        for message in messages:
            await message.ack_sync()
        await sub.unsubscribe()
        # A new subscription on the same durable resumes after what was acked.
        sub = await js.pull_subscribe(job_filter(cluster_id="alpha"), durable="test-reader", config=config)
        rest = await sub.fetch(5, timeout=2)
        assert [parse_job_event(m.data).sequence for m in rest] == [2]
        await rest[0].ack_sync()
    finally:
        await client.close()


@pytest.mark.parametrize(
    "name",
    ["with.dots.in.it", "has space", "star*", "gt>", "全角名字", "per%cent", "tab\tname", "a.*.>"],
)
async def test_hostile_names_survive_the_subject(nats_url: str, name: str) -> None:
    client = await nats.connect(nats_url)
    try:
        js = client.jetstream()
        await ensure_streams(js)
        subject = job_subject(cluster_id="alpha", namespace="ns.x", kind_key="pytorchjob", name=name)
        other = job_subject(cluster_id="alpha", namespace="ns.x", kind_key="pytorchjob", name=name + "x")
        await js.publish(subject, b"{}")
        await js.publish(other, b"{}")
        sub = await js.pull_subscribe(subject, durable="exact")
        messages = await sub.fetch(5, timeout=2)
        assert [m.subject for m in messages] == [subject]  # the name did not act as a wildcard
        await messages[0].ack_sync()
    finally:
        await client.close()


async def test_the_jobs_duplicate_window_is_a_setting_every_ensure_streams_applies(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await nats.connect(nats_url)
    try:
        js = client.jetstream()
        await ensure_streams(js)
        assert (await js.stream_info("JOBS")).config.duplicate_window == 15 * 60
        monkeypatch.setenv("TRAINWATCH_JOBS_DUPLICATE_WINDOW_SECONDS", "20")
        await ensure_streams(js)  # an existing stream is brought to the setting
        assert (await js.stream_info("JOBS")).config.duplicate_window == 20
        assert (await js.stream_info("CLUSTERS")).config.duplicate_window == 15 * 60
    finally:
        await client.close()
