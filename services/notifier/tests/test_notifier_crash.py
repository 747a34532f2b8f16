"""A notifier that dies between sending and acking never makes the bot say it twice."""

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
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from notifier_support import feishu_rules, make_event, publish, running, settings_for

from trainwatch_common import ensure_streams
from trainwatch_common.testing import eventually
from trainwatch_notifier.app import Notifier
from trainwatch_notifier.deadletter import REASON_HEADER
from trainwatch_notifier.sink import FeishuSink


async def short_ack_wait_consumer(js: JetStreamContext) -> None:
    """The durable consumer as production has it, but redelivering after 1 s instead of 60 s."""
    await ensure_streams(js)
    await js.add_consumer(
        "JOBS",
        config=ConsumerConfig(
            durable_name="notifier",
            deliver_policy=DeliverPolicy.NEW,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=1.0,
            max_ack_pending=1000,
        ),
    )


async def all_acked(js: JetStreamContext) -> bool:
    info = await js.consumer_info("JOBS", "notifier")
    return info.num_ack_pending == 0 and info.num_pending == 0


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
    "bot_answers", [False, True], ids=["killed-before-the-answer", "killed-after-the-answer"]
)
async def test_killed_process_between_send_and_ack(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
    tmp_path: Path,
    bot_answers: bool,
) -> None:
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
    log = (tmp_path / "notifier.log").open("wb")
    command = [sys.executable, "-m", "trainwatch_notifier"]
    process = subprocess.Popen(command, env=env, stdout=log, stderr=log)  # noqa: ASYNC220 - the process under test
    try:
        await eventually(
            lambda: all_acked(js), timeout=20, message="the subprocess is consuming"
        )  # consumer exists and is idle
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

    settings = settings_for(
        nats_url=nats_url, redis_url=redis_url, rules_file=rules, unconfirmed_after_seconds=1.0
    )
    async with running(Notifier(settings)):
        await eventually(lambda: all_acked(js), timeout=20, message="the redelivered event is settled")
    assert len(feishu_sink.received) == 1, (tmp_path / "notifier.log").read_text()[-3000:]
    if not bot_answers:
        # nobody can know whether that send worked: it is dead-lettered for a human, never resent
        subscription = await js.pull_subscribe("deadletter.v1.notifier.>", stream="DEADLETTER")
        [letter] = await subscription.fetch(1, timeout=5)
        assert letter.headers is not None
        assert letter.headers[REASON_HEADER] == "unconfirmed-send"
