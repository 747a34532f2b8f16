"""A notifier that dies between sending and acking: never lost, and never said twice unless the
send's outcome could not be known (then it is resent, marked as a resend under the same key)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from nats.js import JetStreamContext
from notifier_chat_sinks import WEBHOOK_SECRET, ChatSinks
from notifier_support import (
    all_acked,
    consumer_with_ack_wait,
    consuming,
    delivery_marker,
    feishu_rules,
    kill,
    make_event,
    notifier_process,
    publish,
    running,
    settings_for,
)
from redis.asyncio import Redis

from trainwatch_common.testing import eventually
from trainwatch_notifier.app import Notifier
from trainwatch_notifier.deadletter import REASON_HEADER
from trainwatch_notifier.sink import FeishuSink


async def short_ack_wait_consumer(js: JetStreamContext) -> None:
    """The durable consumer as production has it, but redelivering after 1 s instead of 60 s."""
    await consumer_with_ack_wait(js, 1.0)


async def test_cancelled_after_the_send_is_recorded_and_before_the_ack(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    await short_ack_wait_consumer(js)
    rules = rules_path(feishu_rules(feishu_sink.url("ml")))
    reached = asyncio.Event()

    async def stall_before_ack(event_ids: list[str]) -> None:
        reached.set()
        await asyncio.Event().wait()  # never returns: the crash comes first

    first = Notifier(
        settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules), after_sent=stall_before_ack
    )
    stop = asyncio.Event()
    task = asyncio.create_task(first.run(stop), name="doomed-notifier")
    await asyncio.wait_for(first.ready.wait(), 20)
    await publish(js, make_event())
    await asyncio.wait_for(reached.wait(), 10)
    assert len(feishu_sink.received) == 1
    task.cancel()  # dies holding the unacked message
    with pytest.raises(asyncio.CancelledError):
        await task

    second = Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))
    async with running(second):
        await eventually(lambda: all_acked(js), timeout=15, message="the redelivered event is acked")
    assert len(feishu_sink.received) == 1


@pytest.mark.parametrize(
    ("bot_answers", "policy"),
    [(False, "default"), (True, "default"), (False, "deadletter")],
    ids=["killed-before-the-answer", "killed-after-the-answer", "killed-before-the-answer-deadletter"],
)
async def test_killed_process_between_send_and_ack(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
    tmp_path: Path,
    bot_answers: bool,
    policy: str,
) -> None:
    """Issue 13 (a rare lost card in the chaos run: an ``unconfirmed-send`` dead letter after a
    kill -9 mid-request). Whether the bot got a request whose sender died is unknown; by default
    it is sent again, with the same idempotency key and marked as a resend, never dead-lettered."""
    await short_ack_wait_consumer(js)
    rules = rules_path(feishu_rules(feishu_sink.url("ml")))
    if not bot_answers:
        feishu_sink.release.clear()  # the bot has the message; the notifier never hears back
    env = {
        **os.environ,
        "TRAINWATCH_NATS_URL": nats_url,
        "TRAINWATCH_REDIS_URL": redis_url,
        "TRAINWATCH_RULES_FILE": str(rules),
        "TRAINWATCH_HTTP_PORT": "0",
        "TRAINWATCH_UNCONFIRMED_AFTER_SECONDS": "1",
        "TRAINWATCH_LOG_FORMAT": "text",
    }
    env["TRAINWATCH_NOTIFIER_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'notifier.db'}"
    log = (tmp_path / "notifier.log").open("wb")
    command = [sys.executable, "-m", "trainwatch_notifier"]
    process = subprocess.Popen(command, env=env, stdout=log, stderr=log)  # noqa: ASYNC220 - the process under test
    try:
        await eventually(
            lambda: consuming(tmp_path / "notifier.log"), timeout=60, message="the subprocess is consuming"
        )
        await publish(js, make_event())
        await eventually(lambda: len(feishu_sink.received) == 1, timeout=20, message="the bot received it")
        process.send_signal(signal.SIGKILL)
        await asyncio.to_thread(process.wait, 10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()
        feishu_sink.release.set()

    chosen = {"unconfirmed_policy": policy} if policy != "default" else {}
    settings = settings_for(
        nats_url=nats_url, redis_url=redis_url, rules_file=rules, unconfirmed_after_seconds=1.0, **chosen
    )
    async with running(Notifier(settings)):
        await eventually(lambda: all_acked(js), timeout=20, message="the redelivered event is settled")
    received = feishu_sink.received
    first = received[0]
    if policy == "deadletter":  # chosen by the operator: never twice, so a human gets a dead letter
        assert len(received) == 1
        subscription = await js.pull_subscribe("deadletter.v1.notifier.>", stream="DEADLETTER")
        [letter] = await subscription.fetch(1, timeout=5)
        assert letter.headers is not None
        assert letter.headers[REASON_HEADER] == "unconfirmed-send"
        return
    assert (await js.stream_info("DEADLETTER")).state.messages == 0  # nothing given up
    assert first.idempotency_key is not None
    assert not first.resend
    if not bot_answers:  # the outcome was unknown: sent again, saying so, under the same key
        assert len(received) == 2, (tmp_path / "notifier.log").read_text()[-3000:]
        assert (received[1].idempotency_key, received[1].resend) == (first.idempotency_key, True)
    else:  # "sent" was recorded, or (killed just before) the resend says what it is
        assert all(r.resend and r.idempotency_key == first.idempotency_key for r in received[1:])


async def test_killed_while_waiting_on_the_rate_limit_is_sent_after_the_restart(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    redis: Redis,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    await short_ack_wait_consumer(js)
    # one message per 8 s: the second event waits for its token, with nothing on the wire
    limits = "    rate_limits: [{count: 1, per_seconds: 8}]\n    digest: {enabled: false}"
    rules = rules_path(feishu_rules(feishu_sink.url("ml"), channel_extra=limits))
    env = {
        "TRAINWATCH_NATS_URL": nats_url,
        "TRAINWATCH_REDIS_URL": redis_url,
        "TRAINWATCH_RULES_FILE": str(rules),
        "TRAINWATCH_HTTP_PORT": "0",
        "TRAINWATCH_UNCONFIRMED_AFTER_SECONDS": "1",
        "TRAINWATCH_LOG_FORMAT": "text",
    }
    process = notifier_process(env, tmp_path / "notifier.log")
    second = make_event(name="second", sequence=4)
    try:
        await eventually(
            lambda: consuming(tmp_path / "notifier.log"), timeout=60, message="the subprocess is consuming"
        )
        await publish(js, make_event(name="first"))
        await eventually(lambda: len(feishu_sink.received) == 1, timeout=20, message="the first is sent")
        await publish(js, second)
        await eventually(
            lambda: delivery_marker(js, second.event_id),
            timeout=10,
            message="the second is taken and waiting",
        )
        kill(process)  # well before its token comes back: the second was never sent
    finally:
        if process.poll() is None:
            kill(process)
    assert len(feishu_sink.received) == 1

    settings = settings_for(
        nats_url=nats_url, redis_url=redis_url, rules_file=rules, unconfirmed_after_seconds=1.0
    )
    async with running(Notifier(settings)):
        await eventually(lambda: all_acked(js), timeout=30, message="the second is settled")
    assert (await js.stream_info("DEADLETTER")).state.messages == 0  # not "unconfirmed-send"
    assert len(feishu_sink.received) == 2
    assert "second" in feishu_sink.received[1].body["card"]["header"]["title"]["content"]


async def test_killed_while_backing_off_from_an_outage_is_sent_after_the_restart(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    sinks: ChatSinks,
    rules_path: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    await short_ack_wait_consumer(js)
    sinks.script.extend([(503, "down for maintenance", {})] * 1000)  # the bot is down
    url = sinks.url("/hook")
    rules = rules_path(
        f"channels: {{audit: {{type: webhook, url: '{url}', secret: {WEBHOOK_SECRET}}}}}\n"
        "rules: [{name: all, channels: [audit]}]\n"
    )
    log_path = tmp_path / "notifier.log"
    env = {
        "TRAINWATCH_NATS_URL": nats_url,
        "TRAINWATCH_REDIS_URL": redis_url,
        "TRAINWATCH_RULES_FILE": str(rules),
        "TRAINWATCH_HTTP_PORT": "0",
        "TRAINWATCH_UNCONFIRMED_AFTER_SECONDS": "1",
        "TRAINWATCH_RETRY_BASE_SECONDS": "20",  # a long back-off: the kill lands in it
        "TRAINWATCH_LOG_FORMAT": "text",
    }
    process = notifier_process(env, log_path)
    try:
        await eventually(lambda: consuming(log_path), timeout=60, message="the subprocess is consuming")
        await publish(js, make_event())
        await eventually(
            lambda: "send failed, retrying" in log_path.read_text(),
            timeout=20,
            message="the first attempt failed and the notifier backs off",
        )
        kill(process)
    finally:
        if process.poll() is None:
            kill(process)
    sinks.script.clear()  # the bot is back

    settings = settings_for(
        nats_url=nats_url, redis_url=redis_url, rules_file=rules, unconfirmed_after_seconds=1.0
    )
    async with running(Notifier(settings)):
        await eventually(lambda: all_acked(js), timeout=30, message="the event is settled")
    assert (await js.stream_info("DEADLETTER")).state.messages == 0  # not "unconfirmed-send"
    assert len(sinks.accepted.get("webhook", [])) == 1  # sent once, after the restart


async def test_killed_after_an_unanswered_attempt_then_a_refusal_is_resent_as_a_resend(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    rules_path: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    """Attempt 1 reaches the bot but its answer never comes (read timeout); attempt 2 is refused
    (11232). The refusal says nothing about attempt 1: the marker must stay "sending", so the copy
    after a kill -9 is posted as a resend of an unconfirmed send (the bot may show it twice, and
    the repeat says what it is), never as a first send and never dead-lettered."""
    await short_ack_wait_consumer(js)
    sink = FeishuSink(secret="demo", rate_limits=((1, 5.0),))  # attempt 1 counted: 2 is refused
    await sink.start()
    try:
        sink.release.clear()  # the bot takes the request but does not answer
        rules = rules_path(
            feishu_rules(
                sink.url("ml"),
                channel_extra="    timeout_seconds: 0.5\n    rate_limits: []\n    digest: {enabled: false}",
            )
        )
        log_path = tmp_path / "notifier.log"
        env = {
            "TRAINWATCH_NATS_URL": nats_url,
            "TRAINWATCH_REDIS_URL": redis_url,
            "TRAINWATCH_RULES_FILE": str(rules),
            "TRAINWATCH_HTTP_PORT": "0",
            "TRAINWATCH_UNCONFIRMED_AFTER_SECONDS": "1",
            "TRAINWATCH_RETRY_BASE_SECONDS": "0.1",
            "TRAINWATCH_RETRY_CAP_SECONDS": "20",
            "TRAINWATCH_LOG_FORMAT": "text",
        }
        process = notifier_process(env, log_path)
        try:
            await eventually(lambda: consuming(log_path), timeout=60, message="the subprocess is consuming")
            await publish(js, make_event())
            await eventually(
                lambda: "reason=feishu-rate-limited" in log_path.read_text(),
                timeout=20,
                message="attempt 1 got no answer, attempt 2 was refused",
            )
            kill(process)
        finally:
            if process.poll() is None:
                kill(process)
        sink.release.set()
        assert len(sink.received) == 1

        settings = settings_for(
            nats_url=nats_url,
            redis_url=redis_url,
            rules_file=rules,
            unconfirmed_after_seconds=1.0,
            retry_max_seconds=30.0,  # the resend may meet the bot's 5 s window (11232) first
        )
        async with running(Notifier(settings)):
            await eventually(lambda: all_acked(js), timeout=30, message="the event is settled")
        assert (await js.stream_info("DEADLETTER")).state.messages == 0
        first, again = sink.received  # attempt 1, then the copy's resend
        assert not first.resend
        assert (again.idempotency_key, again.resend) == (first.idempotency_key, True)
    finally:
        await sink.stop()
