"""A burst becomes digests, within the bot's documented rate limits, and every event is acked."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from nats.js import JetStreamContext
from notifier_support import covered, feishu_rules, make_event, publish, running, settings_for

from trainwatch_common import Phase
from trainwatch_common.testing import eventually
from trainwatch_notifier.app import Notifier
from trainwatch_notifier.sink import FeishuSink


def max_in_window(times: list[float], window: float) -> int:
    return max(sum(1 for t in times if start <= t < start + window) for start in times)


async def test_two_hundred_failures_in_a_minute_become_digests(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    # The sink enforces Feishu's 5/s and 100/min: any excess would be answered with 11232.
    digest = "    digest: {threshold: 10, window_seconds: 60, hold_seconds: 1.0, max_listed: 10}"
    rules = rules_path(feishu_rules(feishu_sink.url("ml"), channel_extra=digest))
    async with running(Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))):
        await publish(js, make_event(name="first"))
        await eventually(lambda: len(feishu_sink.received) == 1, message="the first failure, on its own")
        for index in range(200):
            await publish(js, make_event(name=f"flood-{index:03d}", uid=f"uid-{index}"))

        await eventually(lambda: covered(feishu_sink) == 201, timeout=20, message="all 201 failures told")

        async def acked() -> bool:
            info = await js.consumer_info("JOBS", "notifier")
            return info.num_ack_pending == 0 and info.num_pending == 0

        await eventually(acked, message="every event acked")
    titles = [r.body["card"]["header"]["title"]["content"] for r in feishu_sink.received]
    digests = [t for t in titles if "job updates" in t]
    assert 1 <= len(digests) <= 10, titles  # typically 1 (a loaded machine publishes slower)
    assert len(titles) <= 20, titles  # instead of 201 messages (typically 6)
    assert feishu_sink.answers.get(11232, 0) == 0  # never over the bot's limits
    times = [r.received_at for r in feishu_sink.received]
    assert max_in_window(times, 1.0) <= 5
    digest_markdown = next(
        r.body["card"]["body"]["elements"][0]["content"]
        for r in feishu_sink.received
        if "job updates" in r.body["card"]["header"]["title"]["content"]
    )
    assert "alpha: " in digest_markdown
    assert "Failed" in digest_markdown
    assert "more" in digest_markdown


async def test_a_quiet_channel_sends_one_message_per_event(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    rules = rules_path(feishu_rules(feishu_sink.url("ml")))
    async with running(Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))):
        for index, phase in enumerate((Phase.RESTARTING, Phase.SUSPENDED, Phase.SUCCEEDED)):
            await publish(js, make_event(phase=phase, sequence=index))
        await eventually(lambda: len(feishu_sink.received) == 3)
    colours = [r.body["card"]["header"]["template"] for r in feishu_sink.received]
    assert colours == ["orange", "grey", "green"]


async def test_a_burst_with_long_reasons_is_told_whole_within_the_body_limit(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    # 100 jobs listed one by one with 1,000-character reasons would be ~110 KB; Feishu takes 20 KB
    digest = "    digest: {threshold: 1, window_seconds: 60, hold_seconds: 1.0, max_listed: 100}"
    rules = rules_path(feishu_rules(feishu_sink.url("ml"), channel_extra=digest))
    async with running(Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))):
        await publish(js, make_event(name="first"))
        await eventually(lambda: len(feishu_sink.received) == 1, message="the first failure, on its own")
        for index in range(100):
            reason = "BackoffLimitExceeded/" + "E" * 1000
            await publish(js, make_event(name=f"long-{index:03d}", uid=f"uid-{index}", reason=reason))

        async def acked() -> bool:
            info = await js.consumer_info("JOBS", "notifier")
            return info.num_ack_pending == 0 and info.num_pending == 0

        await eventually(acked, timeout=20, message="every event settled")
    assert (await js.stream_info("DEADLETTER")).state.messages == 0  # no digest lost to its size
    assert covered(feishu_sink) == 101
    assert feishu_sink.answers.get(9499, 0) == 0  # the bot never refused a body as too big
    digest_markdown = next(
        r.body["card"]["body"]["elements"][0]["content"]
        for r in feishu_sink.received
        if "job updates" in r.body["card"]["header"]["title"]["content"]
    )
    assert "— BackoffLimitExceeded/EEE" in digest_markdown  # each listed job keeps a trimmed reason
    assert "E" * 1000 not in digest_markdown


async def test_a_burst_larger_than_the_redis_pool_waits_for_connections_not_for_an_outage(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """make run: a burst held back more events (each waiting for its job's turn) than redis-py's
    default pool holds connections (100); the rest failed with MaxConnectionsError, which the
    consumer logged and waited out as a Redis outage, hundreds of times. The pool now blocks
    until a connection is free."""
    digest = "    digest: {threshold: 10, window_seconds: 60, hold_seconds: 1.0, max_listed: 10}"
    rules = rules_path(feishu_rules(feishu_sink.url("ml"), channel_extra=digest))
    settings = settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules, redis_max_connections=4)
    caplog.set_level(logging.WARNING, logger="trainwatch_notifier")
    async with running(Notifier(settings)):
        # Five events each of 40 jobs: each job's later events are held back behind its earlier
        # ones, and every one held back asks Redis for its turn.
        for sequence in range(5):
            for index in range(40):
                event = make_event(name=f"burst-{index:03d}", uid=f"uid-{index}", sequence=sequence)
                await publish(js, event)

        async def acked() -> bool:
            info = await js.consumer_info("JOBS", "notifier")
            return info.num_ack_pending == 0 and info.num_pending == 0

        await eventually(acked, timeout=30, message="every event settled")
    outages = [r for r in caplog.records if "redis unavailable" in r.getMessage()]
    assert outages == [], f"{len(outages)} waits for a Redis that was up"
    assert (await js.stream_info("DEADLETTER")).state.messages == 0


async def test_a_burst_larger_than_the_in_flight_limit_is_told_without_waiting_a_hold_per_limit(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    """Issue 21: at 500 transitions/s the notifier told exactly ``max_in_flight`` (1,000) events per
    ``hold_seconds`` (15 s): a digest being collected holds its events unacked, the consumer
    stops fetching at the limit, and the digest still waits out its hold. A digest is sent at
    once when the held events reach the limit, so a burst of any size goes through."""
    digest = "    digest: {threshold: 5, window_seconds: 60, hold_seconds: 10.0, max_listed: 10}"
    rules = rules_path(feishu_rules(feishu_sink.url("ml"), channel_extra=digest))
    settings = settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules, max_in_flight=40)
    async with running(Notifier(settings)):
        burst = 400  # ten times the limit: ten holds, one after the other, before
        for index in range(burst):
            await publish(js, make_event(name=f"burst-{index:03d}", uid=f"uid-{index}"))

        # The last digest (under the limit) waits out its hold, 10 s; all ten holds would be 100 s.
        await eventually(lambda: covered(feishu_sink) == burst, timeout=30, message=f"all {burst} told")

        async def acked() -> bool:
            info = await js.consumer_info("JOBS", "notifier")
            return info.num_ack_pending == 0 and info.num_pending == 0

        await eventually(acked, timeout=5, message="every event acked")
    assert feishu_sink.answers.get(11232, 0) == 0  # still within the bot's limits
