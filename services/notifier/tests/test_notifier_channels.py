"""Every channel's bodies and signatures against local sinks, and how their answers are read."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import httpx
import pytest
from notifier_chat_sinks import DINGTALK_SECRET, DINGTALK_TOKEN, WEBHOOK_SECRET, WECOM_KEY, ChatSinks
from notifier_support import make_event

from trainwatch_notifier.channels import build_channel
from trainwatch_notifier.channels.base import PermanentSendError, RetryableSendError
from trainwatch_notifier.channels.feishu import FeishuChannel
from trainwatch_notifier.render.facts import JobFacts, Mention, job_link
from trainwatch_notifier.ruleset import ChannelConfig
from trainwatch_notifier.sink import FeishuSink


def facts(mention: Mention | None = None) -> JobFacts:
    event = make_event(owner="alice")
    return JobFacts(event, "alpha", job_link("https://dash", event), "en", mention)


def config(**values: object) -> ChannelConfig:
    return ChannelConfig.model_validate(values)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as http:
        yield http


@pytest.mark.parametrize("body_format", ["card", "card-v1", "post", "text"])
async def test_feishu_signed_bodies_are_accepted(
    feishu_sink: FeishuSink, client: httpx.AsyncClient, body_format: str
) -> None:
    channel = build_channel(
        "f", config(type="feishu", url=feishu_sink.url("t1"), secret="demo", format=body_format), client
    )
    await channel.post(channel.render(facts(Mention("Alice", "ou_alice"))))
    [received] = feishu_sink.received
    expected = {"card": "interactive", "card-v1": "interactive", "post": "post", "text": "text"}
    assert received.body["msg_type"] == expected[body_format]
    assert abs(int(received.body["timestamp"]) - time.time()) < 5
    assert feishu_sink.answers == {0: 1}


@pytest.mark.parametrize(
    ("secret", "clock_offset", "reason"),
    [
        ("wrong", 0, "feishu-bad-signature"),
        ("demo", -7200, "feishu-bad-signature"),
        (None, 0, "feishu-bad-signature"),
    ],
)
async def test_feishu_signature_failures_are_permanent(
    feishu_sink: FeishuSink, client: httpx.AsyncClient, secret: str | None, clock_offset: float, reason: str
) -> None:
    channel = FeishuChannel(
        "f",
        config(type="feishu", url=feishu_sink.url(), secret=secret),
        client,
        clock=lambda: time.time() + clock_offset,
    )
    with pytest.raises(PermanentSendError) as failed:
        await channel.post(channel.render(facts()))
    assert failed.value.reason == reason
    assert feishu_sink.answers == {19021: 1}
    assert not feishu_sink.received


async def test_feishu_codes_other_than_zero_are_errors_even_with_http_200(client: httpx.AsyncClient) -> None:
    sink = FeishuSink(secret="demo", keywords=["trainwatch"], tokens=["good"])
    await sink.start()
    try:
        keyworded = build_channel("f", config(type="feishu", url=sink.url("good"), secret="demo"), client)
        with pytest.raises(PermanentSendError, match="feishu-keyword-not-found"):
            await keyworded.post(keyworded.render(facts()))
        unknown = build_channel("f", config(type="feishu", url=sink.url("gone"), secret="demo"), client)
        with pytest.raises(PermanentSendError, match="feishu-invalid-token"):
            await unknown.post(unknown.render(facts()))
        with pytest.raises(PermanentSendError, match="feishu-bad-request"):
            await keyworded.post({"msg_type": "text", "content": {}})
        sink.keywords = ()
        for _ in range(5):
            await keyworded.post(keyworded.render(facts()))
        with pytest.raises(RetryableSendError, match="feishu-rate-limited"):  # the sixth in one second
            await keyworded.post(keyworded.render(facts()))
        assert sink.answers == {19024: 1, 19001: 1, 9499: 1, 0: 5, 11232: 1}
    finally:
        await sink.stop()


async def test_dingtalk_markdown_with_signature_in_the_query(
    sinks: ChatSinks, client: httpx.AsyncClient
) -> None:
    url = sinks.url(f"/robot/send?access_token={DINGTALK_TOKEN}")
    channel = build_channel("d", config(type="dingtalk", url=url, secret=DINGTALK_SECRET), client)
    await channel.post(channel.render(facts(Mention("Alice", "alice-id", mobile="13800000000"))))
    [request] = sinks.accepted["dingtalk"]
    body = request.json()
    assert body["msgtype"] == "markdown"
    assert body["markdown"]["title"] == "❌ PyTorchJob team-a/train-1 Failed"
    assert body["at"] == {"atMobiles": ["13800000000"], "atUserIds": ["alice-id"], "isAtAll": False}
    assert "@13800000000" in body["markdown"]["text"]
    unsigned = build_channel("d", config(type="dingtalk", url=url, secret="SECwrong"), client)
    with pytest.raises(PermanentSendError, match="dingtalk-security-check"):
        await unsigned.post(unsigned.render(facts()))
    sinks.script.append((200, '{"errcode":130101,"errmsg":"send too fast, exceed 20 times per minute"}', {}))
    with pytest.raises(RetryableSendError) as throttled:
        await channel.post(channel.render(facts()))
    assert throttled.value.retry_after == 60.0


@pytest.mark.parametrize("body_format", ["markdown", "text"])
async def test_wecom_bodies_and_mentions(
    sinks: ChatSinks, client: httpx.AsyncClient, body_format: str
) -> None:
    url = sinks.url(f"/cgi-bin/webhook/send?key={WECOM_KEY}")
    channel = build_channel("w", config(type="wecom", url=url, format=body_format), client)
    big = facts(Mention("Alice", "alice"))
    big = JobFacts(make_event(message="长消息" * 3000), big.cluster_name, big.link, "zh-CN", big.mention)
    await channel.post(channel.render(big))
    body = sinks.accepted["wecom"][0].json()
    if body_format == "markdown":
        assert "<@alice>" in body["markdown"]["content"]
        assert len(body["markdown"]["content"].encode()) <= 4096
    else:
        assert body["text"]["mentioned_list"] == ["alice"]
        assert len(body["text"]["content"].encode()) <= 2048
    bad_key = build_channel(
        "w", config(type="wecom", url=sinks.url("/cgi-bin/webhook/send?key=nope")), client
    )
    with pytest.raises(PermanentSendError, match="wecom-invalid-key"):
        await bad_key.post(bad_key.render(facts()))
    sinks.script.append((200, '{"errcode":45009,"errmsg":"api freq out of limit"}', {}))
    with pytest.raises(RetryableSendError, match="wecom-rate-limited"):
        await channel.post(channel.render(facts()))


async def test_slack_ok_429_and_configuration_errors(sinks: ChatSinks, client: httpx.AsyncClient) -> None:
    channel = build_channel("s", config(type="slack", url=sinks.url("/services/T0/B0/slack")), client)
    await channel.post(channel.render(facts(Mention("Alice", "U_ALICE"))))
    body = sinks.accepted["slack"][0].json()
    assert "<@U_ALICE>" in body["text"]
    assert [block["type"] for block in body["blocks"]] == ["header", "section", "actions"]
    sinks.script.append((429, "rate_limited", {"Retry-After": "3"}))
    with pytest.raises(RetryableSendError) as limited:
        await channel.post(channel.render(facts()))
    assert limited.value.retry_after == 3.0
    sinks.script.append((503, "service unavailable", {}))
    with pytest.raises(RetryableSendError, match="http-503"):
        await channel.post(channel.render(facts()))
    sinks.script.append((404, "no_service", {}))
    with pytest.raises(PermanentSendError, match="no_service"):
        await channel.post(channel.render(facts()))


async def test_generic_webhook_gets_a_signed_cloudevent(sinks: ChatSinks, client: httpx.AsyncClient) -> None:
    channel = build_channel(
        "h", config(type="webhook", url=sinks.url("/hook"), secret=WEBHOOK_SECRET), client
    )
    await channel.post(channel.render(facts(Mention("alice", None))))
    [request] = sinks.accepted["webhook"]
    assert request.headers["Content-Type"] == "application/cloudevents+json"
    event = request.json()
    assert event["specversion"] == "1.0"
    assert event["type"] == "io.trainwatch.job.status.v1"
    assert event["id"] == "job.alpha.uid-train-1.0"
    assert event["data"]["phase"] == "Failed"
    assert event["trainwatchowner"] == "alice"
    assert event["trainwatchlink"] == "https://dash/jobs/alpha/uid-train-1"
    wrong = build_channel("h", config(type="webhook", url=sinks.url("/hook"), secret="nope"), client)
    with pytest.raises(PermanentSendError, match="http-401"):
        await wrong.post(wrong.render(facts()))


async def test_transport_errors_are_retryable(client: httpx.AsyncClient) -> None:
    channel = build_channel("s", config(type="slack", url="http://127.0.0.1:9/nothing-listens"), client)
    with pytest.raises(RetryableSendError, match="transport"):
        await channel.post(channel.render(facts()))
