"""A bot's limits hold through Redis faults: the sink (which counts like Feishu) never answers
11232, whether Redis lost the spent tokens or a token was taken long before its request went out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from nats.js import JetStreamContext
from notifier_support import (
    all_acked,
    delivery_marker,
    feishu_rules,
    make_event,
    publish,
    running,
    settings_for,
)
from redis.asyncio import Redis

from trainwatch_common.testing import RedisServer, eventually
from trainwatch_notifier.app import Notifier
from trainwatch_notifier.sink import FeishuSink


@pytest.fixture
async def strict_sink() -> AsyncIterator[FeishuSink]:
    """A bot allowing one message per 3 s (counted as Feishu does: when a request arrives)."""
    sink = FeishuSink(secret="demo", rate_limits=((1, 3.0),))
    await sink.start()
    yield sink
    await sink.stop()


LIMITS = "    rate_limits: [{count: 1, per_seconds: 3}]\n    digest: {enabled: false}"


async def test_the_limits_hold_when_redis_loses_the_spent_tokens(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    redis: Redis,
    strict_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    rules = rules_path(feishu_rules(strict_sink.url("ml"), channel_extra=LIMITS))
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))
    async with running(notifier):
        await publish(js, make_event(name="first"))
        await eventually(lambda: len(strict_sink.received) == 1, message="the bot's token spent")
        await eventually(lambda: all_acked(js), message="and acked")
        await redis.flushall()  # the shared bucket forgets it: this process has not
        await publish(js, make_event(name="second"))
        await eventually(lambda: len(strict_sink.received) == 2, timeout=20, message="the second told")
    assert strict_sink.answers[11232] == 0


async def test_a_token_counts_from_when_its_request_was_answered(
    nats_url: str,
    redis_process: RedisServer,
    js: JetStreamContext,
    strict_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    """The token of "second" is taken while Redis is away, and its request waits for Redis (the
    send cannot be marked) longer than the window: "third" must wait for the window after
    "second" went out, not after its token was taken."""
    rules = rules_path(feishu_rules(strict_sink.url("ml"), channel_extra=LIMITS))
    settings = settings_for(nats_url=nats_url, redis_url=redis_process.url, rules_file=rules)
    redis = Redis.from_url(redis_process.url)
    try:
        async with running(Notifier(settings)):
            await publish(js, make_event(name="first"))
            await eventually(lambda: len(strict_sink.received) == 1, message="the bot's token spent")
            second, third = make_event(name="second"), make_event(name="third")
            await publish(js, second)
            await publish(js, third)
            await eventually(
                lambda: delivery_marker(js, second.event_id),
                message="the second is taken and waits for a token",
            )
            await asyncio.to_thread(redis_process.stop)
            await asyncio.sleep(4.0)  # the outage itself: longer than the 3 s window
            await asyncio.to_thread(redis_process.start)
            await eventually(lambda: len(strict_sink.received) == 3, timeout=30, message="all told")
            await eventually(lambda: all_acked(js), timeout=10, message="and acked")
    finally:
        await redis.aclose()
    assert strict_sink.answers[11232] == 0
