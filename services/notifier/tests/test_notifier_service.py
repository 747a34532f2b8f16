"""The notifier end to end: real nats-server and Redis, the local Feishu sink."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
from nats.js import JetStreamContext
from notifier_chat_sinks import WEBHOOK_SECRET, ChatSinks
from notifier_support import feishu_rules, make_event, publish, running, settings_for
from redis.asyncio import Redis

from trainwatch_common import ClusterSpec, Phase
from trainwatch_common.streams import ensure_clusters_bucket
from trainwatch_common.testing import eventually
from trainwatch_notifier.app import Notifier
from trainwatch_notifier.deadletter import REASON_HEADER
from trainwatch_notifier.sink import FeishuSink


async def consumer_acked(js: JetStreamContext) -> tuple[int, int]:
    info = await js.consumer_info("JOBS", "notifier")
    return info.num_ack_pending, info.num_pending


async def all_acked(js: JetStreamContext) -> bool:
    return await consumer_acked(js) == (0, 0)


async def test_failed_job_reaches_feishu_once_and_is_acked(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    rules = rules_path(feishu_rules(feishu_sink.url("ml")))
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))
    async with running(notifier):
        event = make_event(owner="alice")
        await publish(js, event)
        await eventually(lambda: len(feishu_sink.received) == 1, message="the card arrives")
        card = feishu_sink.received[0].body["card"]
        assert "<at id=ou_alice></at>" in card["body"]["elements"][0]["content"]
        await eventually(lambda: all_acked(js), message="the event is acked")
        # a replay of the same event (another Msg-Id, e.g. a re-published stream) is not sent again
        await publish(js, event, msg_id="replayed")
        await publish(js, make_event(name="train-2"))
        await eventually(lambda: len(feishu_sink.received) == 2, message="the second job arrives")
        await eventually(lambda: all_acked(js), message="everything acked")
        names = [r.body["card"]["header"]["title"]["content"] for r in feishu_sink.received]
        assert names == ["❌ PyTorchJob team-a/train-1 Failed", "❌ PyTorchJob team-a/train-2 Failed"]
        async with httpx.AsyncClient() as http:
            ready = await http.get(f"http://127.0.0.1:{notifier.health_port}/readyz")
            metrics = (await http.get(f"http://127.0.0.1:{notifier.health_port}/metrics")).text
        assert ready.status_code == 200
        assert 'trainwatch_notifier_deliveries_total{channel="ml-feishu",outcome="duplicate"}' in metrics


async def test_an_event_from_a_fenced_out_owner_is_still_notified(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    redis: Redis,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    # The lease moved (epoch 5) after the old owner published its event (epoch 4). The new owner's
    # copy has the same event id, so JetStream drops it: the old owner's copy is the only one.
    await redis.set("trainwatch:epoch:alpha", 5)
    rules = rules_path(feishu_rules(feishu_sink.url("ml")))
    async with running(Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))):
        await publish(js, make_event(name="from-old-owner", phase=Phase.SUCCEEDED, epoch=4))
        await publish(js, make_event(name="from-new-owner", epoch=5))
        await eventually(lambda: len(feishu_sink.received) == 2, message="both events notified")
        await eventually(lambda: all_acked(js), message="both acked")
    titles = [r.body["card"]["header"]["title"]["content"] for r in feishu_sink.received]
    assert titles == [
        "✅ PyTorchJob team-a/from-old-owner Succeeded",
        "❌ PyTorchJob team-a/from-new-owner Failed",
    ]


async def test_cluster_labels_from_the_registry_bucket_route_events(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    bucket = await ensure_clusters_bucket(js)
    spec = ClusterSpec(
        id="alpha", name="Alpha GPU", labels={"env": "prod"}, revision=1, connection_fingerprint="x"
    )
    await bucket.put("alpha", spec.model_dump_json().encode())
    rules = rules_path(
        f"""
channels:
  prod: {{type: feishu, url: "{feishu_sink.url("prod")}", secret: demo}}
  dev: {{type: feishu, url: "{feishu_sink.url("dev")}", secret: demo}}
rules:
  - {{name: prod, match: {{cluster_labels: {{env: prod}}}}, channels: [prod]}}
  - {{name: dev, match: {{cluster_labels: {{env: dev}}}}, channels: [dev]}}
"""
    )
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))
    async with running(notifier):
        await publish(js, make_event(name="one"))
        await eventually(lambda: [r.token for r in feishu_sink.received] == ["prod"])
        title = feishu_sink.received[0].body["card"]["body"]["elements"][0]["content"]
        assert "Alpha GPU (alpha)" in title
        relabelled = spec.model_copy(update={"labels": {"env": "dev"}, "revision": 2})
        await bucket.put("alpha", relabelled.model_dump_json().encode())
        await eventually(
            lambda: notifier.clusters.labels("alpha") == {"env": "dev"}, message="KV change seen"
        )
        await publish(js, make_event(name="two"))
        await eventually(lambda: [r.token for r in feishu_sink.received] == ["prod", "dev"])


async def test_permanent_errors_are_dead_lettered_with_the_reason(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    rules = rules_path(feishu_rules(feishu_sink.url("ml"), secret="not-the-bot-secret"))
    async with running(Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))):
        event = make_event()
        await publish(js, event)
        await eventually(lambda: all_acked(js), message="the event is acked after dead-lettering")
        await js.publish("jobs.v1.alpha.team-a.pytorchjob.garbage", b"{not json")
        await eventually(lambda: all_acked(js), message="a malformed event is acked too")
    assert feishu_sink.answers == {19021: 1}  # refused once, not retried
    subscription = await js.pull_subscribe("deadletter.v1.notifier.>", stream="DEADLETTER")
    letters = await subscription.fetch(2, timeout=5)
    by_reason = {letter.headers[REASON_HEADER]: letter for letter in letters if letter.headers}
    assert set(by_reason) == {"feishu-bad-signature", "malformed"}
    signature = by_reason["feishu-bad-signature"]
    assert signature.subject == "deadletter.v1.notifier.feishu-bad-signature"
    assert signature.headers is not None
    assert signature.headers["Trainwatch-Event-Id"] == event.event_id
    assert signature.headers["Trainwatch-Channel"] == "ml-feishu"
    assert b'"phase":"Failed"' in signature.data


async def test_rate_limited_answers_are_retried_until_accepted(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    # the notifier believes there is no limit; the bot answers 11232 and the notifier backs off
    rules = rules_path(
        feishu_rules(feishu_sink.url("ml"), channel_extra="    rate_limits: []\n    digest: {enabled: false}")
    )
    settings = settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules, retry_max_seconds=60.0)
    async with running(Notifier(settings)):
        for index in range(8):
            await publish(js, make_event(name=f"job-{index}", phase=Phase.SUCCEEDED))
        await eventually(lambda: len(feishu_sink.received) == 8, timeout=15, message="all eight accepted")
        await eventually(lambda: all_acked(js))
    assert feishu_sink.answers[11232] >= 1
    titles = [r.body["card"]["header"]["title"]["content"] for r in feishu_sink.received]
    assert titles == [f"✅ PyTorchJob team-a/job-{i} Succeeded" for i in range(8)]  # in order


async def test_retries_exhausted_go_to_the_dead_letter_stream(
    nats_url: str, redis_url: str, js: JetStreamContext, sinks: ChatSinks, rules_path: Callable[[str], Path]
) -> None:
    # the receiver answers 503 for longer than the notifier keeps retrying (2 s in these settings)
    sinks.script.extend([(503, "down for maintenance", {})] * 1000)
    url = sinks.url("/hook")
    rules = rules_path(
        f"channels: {{audit: {{type: webhook, url: '{url}', secret: {WEBHOOK_SECRET}}}}}\n"
        "rules: [{name: all, channels: [audit]}]\n"
    )
    async with running(Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))):
        await publish(js, make_event())
        await eventually(lambda: all_acked(js), timeout=15, message="given up and acked")
        sinks.script.clear()
        await publish(js, make_event(name="after-the-outage"))
        await eventually(lambda: len(sinks.accepted.get("webhook", [])) == 1)
    subscription = await js.pull_subscribe("deadletter.v1.notifier.>", stream="DEADLETTER")
    [letter] = await subscription.fetch(1, timeout=5)
    assert letter.headers is not None
    assert letter.headers[REASON_HEADER] == "retries-exhausted"
    assert "http-503" in letter.headers["Trainwatch-Detail"]
