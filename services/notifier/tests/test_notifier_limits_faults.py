"""A bot's limits hold through Redis faults: the sink (which counts like Feishu) never answers
11232, whether Redis lost the spent tokens or a token was taken long before its request went out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import nats
import orjson
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

from trainwatch_common.streams import NOTIFIER_SENDS_BUCKET, ensure_bucket
from trainwatch_common.testing import RedisServer, eventually
from trainwatch_notifier.app import Notifier
from trainwatch_notifier.limits import SendWindows, TokenBucket
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


async def test_a_restarted_notifier_counts_its_predecessors_sends_when_redis_lost_them(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    redis: Redis,
    rules_path: Callable[[str], Path],
) -> None:
    """Issue 13 (11232 a few times per chaos run): a notifier starts again, and Redis loses its
    data within the bot's window. The new process's own bucket is empty and so is Redis's: only
    the sends its predecessor recorded in NATS say the bot's window is full."""
    sink = FeishuSink(secret="demo", rate_limits=((1, 6.0),))
    await sink.start()
    try:
        limits = "    rate_limits: [{count: 1, per_seconds: 6}]\n    digest: {enabled: false}"
        rules = rules_path(feishu_rules(sink.url("ml"), channel_extra=limits))
        settings = settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules)
        async with running(Notifier(settings)):
            await publish(js, make_event(name="first"))
            await eventually(lambda: len(sink.received) == 1, message="the bot's token spent")
            await eventually(lambda: all_acked(js), message="and acked")
        await redis.flushall()  # the shared bucket forgets it, and the new process never knew it
        async with running(Notifier(settings)):
            await publish(js, make_event(name="second"))
            await eventually(lambda: len(sink.received) == 2, timeout=20, message="the second told")
            await eventually(lambda: all_acked(js), timeout=10, message="and acked")
        assert sink.answers[11232] == 0
    finally:
        await sink.stop()


async def test_an_11232_is_retried_and_the_card_told_once(
    nats_url: str, redis_url: str, js: JetStreamContext, rules_path: Callable[[str], Path]
) -> None:
    """Whatever the notifier counted, a rate-limit refusal loses nothing and repeats nothing: the
    attempt did not go out, its marker is "held" again, and it is sent after a back-off."""
    sink = FeishuSink(secret="demo", rate_limits=((1, 2.0),))
    await sink.start()
    try:  # the channel counts no limits: the bot's refusal is the only thing that holds it back
        rules = rules_path(
            feishu_rules(sink.url("ml"), channel_extra="    rate_limits: []\n    digest: {enabled: false}")
        )
        settings = settings_for(
            nats_url=nats_url, redis_url=redis_url, rules_file=rules, retry_max_seconds=30.0
        )
        async with running(Notifier(settings)):
            await publish(js, make_event(name="first"))
            await publish(js, make_event(name="second"))
            await eventually(lambda: len(sink.received) == 2, timeout=20, message="both told")
            await eventually(lambda: all_acked(js), timeout=10, message="and acked")
        assert sink.answers[11232] >= 1  # the second was refused at least once
        assert sorted(r.idempotency_key or "" for r in sink.received) == sorted(
            f"ml-feishu.{make_event(name=n).event_id}" for n in ("first", "second")
        )
        assert not any(r.resend for r in sink.received)  # a refusal is not an unknown outcome
        assert (await js.stream_info("DEADLETTER")).state.messages == 0
    finally:
        await sink.stop()


async def test_a_refusal_counts_the_other_notifiers_recorded_sends_once(js: JetStreamContext) -> None:
    """The sends other processes recorded are added to this process's bucket at its first use and
    again when the bot refuses (a replica's sends after Redis lost its sets), each only once."""
    kv = await ensure_bucket(js, NOTIFIER_SENDS_BUCKET)
    now = [1000.0]
    other = SendWindows(kv, "bot", process="a", longest_seconds=60.0, clock=lambda: now[0])
    mine = SendWindows(kv, "bot", process="b", longest_seconds=60.0, clock=lambda: now[0])
    bucket = TokenBucket([(2, 60.0)], clock=lambda: now[0])
    await other.spent(now[0])
    assert await mine.seed(bucket)
    assert bucket.wait_time() == 0  # one of two spent
    await other.spent(now[0])
    assert await mine.seed(bucket)  # what a refusal does: the new send counts, the old one not again
    assert bucket.wait_time() > 50
    await mine.spent(bucket.take())
    assert await other.seed(TokenBucket([(2, 60.0)], clock=lambda: now[0]))  # b's key has only b's send
    assert orjson.loads((await kv.get("bot.b")).value or b"") == [pytest.approx(time.time(), abs=5)]


async def test_a_seed_cut_short_by_its_timeout_leaves_no_subscription_to_hang_shutdown(nats_url: str) -> None:
    """A seed whose timeout fires while it lists the bucket's keys (NATS slow: a node killed, a
    leader being elected) must leave nothing subscribed behind. nats-py's ``kv.keys()`` opens a
    watcher it never stops when cancelled; such a watcher's callback then waits on a set-up that
    never completes, and ``drain()`` at SIGTERM waited for it until its own 30 s timeout (the
    chaos ha run: the notifier killed after 20 s of a rolling restart's grace)."""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        kv = await ensure_bucket(js, NOTIFIER_SENDS_BUCKET)
        for process in range(300):  # enough keys that listing them outlasts the timeout below
            await kv.put(f"bot.p{process}", b"[]")
        now = [1000.0]
        baseline = len(nc._subs)
        for attempt in range(20):
            windows = SendWindows(
                kv,
                "bot",
                process="me",
                longest_seconds=60.0,
                clock=lambda: now[0],
                timeout_seconds=0.001 * attempt,
            )
            await windows.seed(TokenBucket([(2, 60.0)], clock=lambda: now[0]))
        assert len(nc._subs) == baseline  # nothing left subscribed (private, but it is what drain waits on)
        began = time.monotonic()
        await asyncio.wait_for(nc.drain(), timeout=10)
        assert time.monotonic() - began < 5
    finally:
        if not nc.is_closed:
            await nc.close()
