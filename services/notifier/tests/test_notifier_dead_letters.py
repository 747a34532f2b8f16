"""Dead letters you can act on (issue 18 item 6): listed with their reason and job, replayed
through their channel once it is fixed, each delivered exactly once and then gone from the list."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from nats.js import JetStreamContext
from notifier_support import all_acked, feishu_rules, make_event, publish, running, settings_for

from trainwatch_common.testing import eventually
from trainwatch_notifier.app import Notifier
from trainwatch_notifier.sink import FeishuSink

ADMIN = "admin-token-for-dead-letter-tests-01"
VIEWER = "viewer-token-for-dead-letter-tests-1"
ONE_CARD_EACH = "    digest: {enabled: false}"


@pytest.fixture(autouse=True)
def _tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWATCH_ADMIN_TOKENS", ADMIN)
    monkeypatch.setenv("TRAINWATCH_VIEWER_TOKENS", VIEWER)


def api(notifier: Notifier, token: str = ADMIN) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{notifier.health_port}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


async def letters(http: httpx.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    answer = await http.get("/v1/dead-letters", params=params)
    assert answer.status_code == 200, answer.text
    items: list[dict[str, Any]] = answer.json()["items"]
    return items


async def test_dead_letters_are_listed_and_a_replay_after_the_fix_sends_each_once(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    url = feishu_sink.url("ml")
    rules = rules_path(feishu_rules(url, secret="the-wrong-secret-for-this-bot", channel_extra=ONE_CARD_EACH))
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))
    async with running(notifier), api(notifier, VIEWER) as viewer, api(notifier) as admin:
        for n in range(3):
            await publish(js, make_event(name=f"train-{n}"))
        await eventually(lambda: all_acked(js), message="all dead-lettered and acked")
        await js.publish("jobs.v1.alpha.team-a.pytorchjob.garbage", b"{not json")
        await eventually(lambda: all_acked(js), message="the malformed one too")

        listed = await letters(viewer)
        assert [(d["reason"], d["channel"]) for d in listed] == [
            ("feishu-bad-signature", "ml-feishu")
        ] * 3 + [("malformed", "-")]
        assert [d["job"]["name"] for d in listed[:3]] == ["train-0", "train-1", "train-2"]
        assert listed[3]["job"] is None
        assert [d["seq"] for d in await letters(viewer, reason="malformed")] == [listed[3]["seq"]]
        assert (await letters(viewer, after=listed[1]["seq"], limit=1))[0]["seq"] == listed[2]["seq"]
        first, second, third, malformed = (d["seq"] for d in listed)

        assert (await viewer.post(f"/v1/dead-letters/{first}/replay")).status_code == 403
        refused = await admin.post(f"/v1/dead-letters/{first}/replay")  # not fixed yet
        assert refused.status_code == 200, refused.text
        assert refused.json()["outcome"] == "refused-again"
        assert refused.json()["detail"] == "feishu-bad-signature"
        assert len(await letters(viewer)) == 4  # kept: nothing was delivered

        rules.write_text(feishu_rules(url, channel_extra=ONE_CARD_EACH))  # fixed, reloaded
        await eventually(lambda: _channel_ready(admin), message="the fixed channel loaded")
        sent = await admin.post(f"/v1/dead-letters/{first}/replay")
        assert sent.json()["outcome"] == "sent", sent.text
        assert [r.body["card"]["header"]["title"]["content"] for r in feishu_sink.received] == [
            "❌ PyTorchJob team-a/train-0 Failed"
        ]
        assert [d["seq"] for d in await letters(viewer)] == [second, third, malformed]
        assert (await admin.post(f"/v1/dead-letters/{first}/replay")).status_code == 404

        # Two people replay the same letter at once: one card.
        both = await asyncio.gather(*(admin.post(f"/v1/dead-letters/{second}/replay") for _ in range(2)))
        outcomes = sorted(b.json().get("outcome", b.status_code) for b in both if b.status_code == 200)
        assert "sent" in outcomes, [b.text for b in both]
        titles = [r.body["card"]["header"]["title"]["content"] for r in feishu_sink.received]
        assert titles.count("❌ PyTorchJob team-a/train-1 Failed") == 1
        await eventually(
            lambda: _seqs(viewer, [third, malformed]), message="the replayed letter gone from the list"
        )

        unreadable = await admin.post(f"/v1/dead-letters/{malformed}/replay")
        assert unreadable.status_code == 409
        assert "names no channel" in unreadable.json()["detail"]


async def _channel_ready(http: httpx.AsyncClient) -> bool:
    answer = await http.get("/readyz")
    return answer.status_code == 200


async def _seqs(http: httpx.AsyncClient, expected: list[int]) -> bool:
    return [d["seq"] for d in await letters(http)] == expected


async def test_the_cli_lists_and_replays_dead_letters(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    from typer.testing import CliRunner

    from trainwatch_registry.cli import app as cli

    url = feishu_sink.url("ml")
    rules = rules_path(feishu_rules(url, secret="the-wrong-secret-for-this-bot", channel_extra=ONE_CARD_EACH))
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))
    runner = CliRunner()

    async def trainwatch(*args: str, token: str = ADMIN) -> Any:
        env = {
            "TRAINWATCH_NOTIFIER_URL": f"http://127.0.0.1:{notifier.health_port}",
            "TRAINWATCH_API_TOKEN": token,
        }
        return await asyncio.to_thread(runner.invoke, cli, ["notifications", "dead-letters", *args], env=env)

    async with running(notifier), api(notifier) as admin:
        await publish(js, make_event(name="train-cli"))
        await eventually(lambda: all_acked(js), message="dead-lettered and acked")
        listed = await trainwatch("list", token=VIEWER)
        assert listed.exit_code == 0, listed.output
        assert "feishu-bad-signature" in listed.output
        assert "team-a/train-cli" in listed.output
        seq = json.loads((await trainwatch("list", "-o", "json", token=VIEWER)).output)[0]["seq"]

        rules.write_text(feishu_rules(url, channel_extra=ONE_CARD_EACH))
        await eventually(lambda: _channel_ready(admin), message="the fixed channel loaded")
        replayed = await trainwatch("replay", str(seq))
        assert replayed.exit_code == 0, replayed.output
        assert f"{seq} alpha team-a/train-cli (PyTorchJob) Failed -> sent" in replayed.output
        assert len(feishu_sink.received) == 1
        again = await trainwatch("replay", str(seq))
        assert again.exit_code == 1
        assert "404" in again.output
