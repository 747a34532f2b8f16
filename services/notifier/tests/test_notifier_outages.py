"""Back-pressure, not loss: while Redis is away nothing is sent (no idempotency key can be taken)
and nothing is acked; once it is back the event is delivered once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import nats
from nats.js import JetStreamContext
from notifier_support import all_acked, feishu_rules, make_event, publish, running, settings_for
from redis.asyncio import Redis

from trainwatch_common.testing import NatsServer, RedisServer, eventually
from trainwatch_notifier.app import Notifier
from trainwatch_notifier.sink import FeishuSink


async def test_redis_outage_delays_but_does_not_lose_or_repeat(
    nats_url: str,
    redis_process: RedisServer,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    rules = rules_path(feishu_rules(feishu_sink.url("ml")))
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_process.url, rules_file=rules))
    async with running(notifier):
        await publish(js, make_event(name="before"))
        await eventually(lambda: len(feishu_sink.received) == 1)
        await eventually(lambda: all_acked(js), message="the first is recorded as sent and acked")
        redis_process.stop()
        await publish(js, make_event(name="during"))

        async def held_unacked() -> bool:
            info = await js.consumer_info("JOBS", "notifier")
            return info.num_ack_pending + info.num_pending == 1

        await eventually(held_unacked, message="the event waits, unacked")
        assert len(feishu_sink.received) == 1
        redis_process.start()
        await eventually(
            lambda: len(feishu_sink.received) == 2, timeout=20, message="delivered after the outage"
        )

        await eventually(lambda: all_acked(js), timeout=10)
    assert len(feishu_sink.received) == 2


async def test_nats_restart_is_survived(
    nats_process: NatsServer, redis_url: str, feishu_sink: FeishuSink, rules_path: Callable[[str], Path]
) -> None:
    rules = rules_path(feishu_rules(feishu_sink.url("ml")))
    notifier = Notifier(settings_for(nats_url=nats_process.url, redis_url=redis_url, rules_file=rules))
    client = await nats.connect(nats_process.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        js = client.jetstream()
        async with running(notifier):
            await publish(js, make_event(name="before"))
            await eventually(lambda: len(feishu_sink.received) == 1)
            nats_process.restart()
            await eventually(lambda: client.is_connected, timeout=15, message="test client reconnected")

            async def published() -> bool:
                await publish(js, make_event(name="after"))
                return True

            await eventually(published, timeout=15, message="JetStream back")
            await eventually(
                lambda: len(feishu_sink.received) == 2, timeout=20, message="delivered after restart"
            )
    finally:
        await client.close()


async def test_a_card_sent_before_redis_lost_its_data_is_not_sent_again(
    nats_url: str,
    redis_process: RedisServer,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    """Issue 13 (chaos seed 31, a card sent twice around FLUSHALL / a fresh data dir): a copy of
    an event whose card already went out reaches the notifier after Redis lost its data (here a
    replay on the stream; in the chaos run an ack lost in the NATS restart, redelivered after the
    ack wait). The "sent" marker must outlive Redis's data: it is kept in NATS."""
    rules = rules_path(feishu_rules(feishu_sink.url("ml")))
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_process.url, rules_file=rules))
    event = make_event(name="once")
    async with running(notifier):
        await publish(js, event)
        await eventually(lambda: len(feishu_sink.received) == 1)
        await eventually(lambda: all_acked(js), message="recorded as sent and acked")
        redis = Redis.from_url(redis_process.url)
        try:
            await redis.flushall()
        finally:
            await redis.aclose()
        await publish(js, event, msg_id=f"{event.event_id}-replayed")  # the same event, again

        async def replay_acked() -> bool:
            info = await js.consumer_info("JOBS", "notifier")
            return info.delivered.stream_seq == 2 and await all_acked(js)

        await eventually(replay_acked, timeout=20, message="the replay is settled")
    assert len(feishu_sink.received) == 1
