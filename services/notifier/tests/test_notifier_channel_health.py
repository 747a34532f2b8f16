"""A bot that refuses a channel outright (issue 18 item 6): the notifier is not ready, says which
channel and why, logs one line a minute instead of one per message, and is ready again once the
channel is fixed."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from nats.js import JetStreamContext
from notifier_support import feishu_rules, make_event, publish, running, settings_for

from trainwatch_common.testing import eventually
from trainwatch_notifier.app import Notifier
from trainwatch_notifier.channel_health import ChannelHealth
from trainwatch_notifier.sink import FeishuSink

BAD_SECRET = "not-the-bot-secret-at-all"


def test_refusals_are_logged_once_a_minute_with_a_count_and_cleared_by_an_accepted_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    health = ChannelHealth(clock=lambda: now[0], wall_clock=lambda: 1_764_590_400.0)
    caplog.set_level(logging.INFO, logger="trainwatch_notifier.channel_health")
    for _ in range(50):
        health.refused("ml-feishu", "feishu-bad-signature", "19021 sign match fail")
        now[0] += 1.0  # 50 refusals in 50 s: one line
    assert [r.getMessage() for r in caplog.records].count(
        "the bot refuses every request of this channel: fix its configuration"
    ) == 1
    assert health.check() == (
        "channel ml-feishu refused by its bot: feishu-bad-signature (50 since 2025-12-01T12:00:00Z)"
    )
    now[0] += 10.0  # a minute after the first line: the next refusal says how many came since
    health.refused("ml-feishu", "feishu-bad-signature", "19021 sign match fail")
    lines = [r for r in caplog.records if r.getMessage().startswith("the bot refuses")]
    assert len(lines) == 2
    assert (lines[1].refusals, lines[1].since_last_line) == (51, 50)  # type: ignore[attr-defined]
    health.accepted("ml-feishu")
    assert health.check() == "ok"


def test_a_channel_the_rules_changed_or_removed_is_forgotten() -> None:
    health = ChannelHealth()
    health.refused("a", "wecom-invalid-key", "93000 invalid webhook url")
    health.refused("b", "http-404", "no_service")
    health.forget(keep={"b"})
    assert health.check().startswith("channel b refused by its bot: http-404")
    health.forget(keep=set())
    assert health.check() == "ok"


async def test_a_wrong_bot_secret_makes_the_notifier_not_ready_and_logs_once_not_per_message(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    url = feishu_sink.url("ml")
    one_card_each = "    digest: {enabled: false}"  # every event its own request
    rules = rules_path(feishu_rules(url, secret=BAD_SECRET, channel_extra=one_card_each))
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))
    async with running(notifier), httpx.AsyncClient() as http:
        readyz = f"http://127.0.0.1:{notifier.health_port}/readyz"
        assert (await http.get(readyz)).status_code == 200
        for n in range(10):
            await publish(js, make_event(name=f"train-{n}"))
        await eventually(lambda: sum(feishu_sink.answers.values()) == 10, message="10 refusals")

        answer = await http.get(readyz)
        assert answer.status_code == 503, answer.text
        check = answer.json()["checks"]["channels"]
        expected = "channel ml-feishu refused by its bot: feishu-bad-signature (10 since "
        assert check.startswith(expected), check
        assert BAD_SECRET not in answer.text
        assert "/hook/" not in answer.text  # nor the webhook URL, a credential
        messages = [r.getMessage() for r in caplog.records]
        assert messages.count("the bot refuses every request of this channel: fix its configuration") == 1
        assert messages.count("notification dead-lettered") == 0  # was one warning per message
        assert not any(BAD_SECRET in r.getMessage() or BAD_SECRET in str(r.__dict__) for r in caplog.records)

        # Fixed in the rules file (hot-reloaded): ready again, and the next card goes out.
        rules.write_text(feishu_rules(url, channel_extra=one_card_each))
        await eventually(_ready(http, readyz), timeout=15, message="ready once the secret is fixed")
        await publish(js, make_event(name="after-the-fix"))
        await eventually(lambda: feishu_sink.answers.get(0) == 1, message="the next card accepted")
        assert (await http.get(readyz)).status_code == 200


def _ready(http: httpx.AsyncClient, url: str) -> Callable[[], object]:
    async def ready() -> bool:
        return (await http.get(url)).status_code == 200

    return ready
