"""A digest's link opens a dashboard view of exactly the jobs it digested (issue 18 item 5): the
notifier records each digest's jobs in SQL and serves them; with SQL away the digest still goes
out at once, linking the dashboard."""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from nats.js import JetStreamContext
from notifier_support import covered, feishu_rules, make_event, publish, running, settings_for

from trainwatch_common.testing import eventually
from trainwatch_notifier.app import Notifier
from trainwatch_notifier.sink import FeishuSink

VIEWER = "viewer-token-for-digest-view-tests"
DIGEST = "    digest: {threshold: 2, window_seconds: 60, hold_seconds: 1.0, max_listed: 3}"
DIGEST_LINK = re.compile(r"^https://dash\.example\.com/digests/([0-9a-f]{32})$")


@pytest.fixture(autouse=True)
def _tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWATCH_VIEWER_TOKENS", VIEWER)


def open_link(card: dict[str, Any]) -> str:
    buttons = [e for e in card["body"]["elements"] if e["tag"] == "button"]
    return str(buttons[0]["behaviors"][0]["default_url"])


def digest_cards(sink: FeishuSink) -> list[dict[str, Any]]:
    return [
        r.body["card"] for r in sink.received if "job updates" in r.body["card"]["header"]["title"]["content"]
    ]


async def test_each_digest_links_a_view_of_exactly_its_jobs(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    rules = rules_path(feishu_rules(feishu_sink.url("ml"), channel_extra=DIGEST))
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))
    async with (
        running(notifier),
        httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{notifier.health_port}", headers={"Authorization": f"Bearer {VIEWER}"}
        ) as api,
    ):
        names = [f"burst-{index:02d}" for index in range(40)]
        for name in names:
            await publish(js, make_event(name=name))
        await eventually(lambda: covered(feishu_sink) == 40, timeout=20, message="all 40 told")

        digested: list[str] = []
        cards = digest_cards(feishu_sink)
        assert cards, "the burst made no digest"
        for card in cards:
            match = DIGEST_LINK.match(open_link(card))
            assert match, open_link(card)
            view = await api.get(f"/v1/digests/{match.group(1)}")
            assert view.status_code == 200, view.text
            items = view.json()["items"]
            count = int(card["header"]["title"]["content"].split()[0])
            assert len(items) == count  # all of them, not only the 3 the card lists
            assert {i["phase"] for i in items} == {"Failed"}
            digested += [i["name"] for i in items]
        single = [
            r.body["card"]["header"]["title"]["content"].split("/")[1].split()[0]
            for r in feishu_sink.received
            if "job updates" not in r.body["card"]["header"]["title"]["content"]
        ]
        assert sorted(digested + single) == names  # every job once: in one digest, or on its own card
        assert (await api.get("/v1/digests/" + "0" * 32)).status_code == 404
        assert (await api.get("/v1/digests/not-an-id")).status_code == 422
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{notifier.health_port}") as anonymous:
            assert (await anonymous.get(f"/v1/digests/{'0' * 32}")).status_code == 401


async def test_a_digest_goes_out_at_once_linking_the_dashboard_when_sql_fails(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    database = tmp_path / "notifier.db"
    rules = rules_path(feishu_rules(feishu_sink.url("ml"), channel_extra=DIGEST))
    settings = settings_for(
        nats_url=nats_url, redis_url=redis_url, rules_file=rules,
        notifier_database_url=f"sqlite+aiosqlite:///{database}",
    )  # fmt: skip
    async with running(Notifier(settings)):
        with sqlite3.connect(database) as db:  # the table gone: every insert fails
            db.execute("DROP TABLE digest_jobs")
        for index in range(10):
            await publish(js, make_event(name=f"burst-{index:02d}"))
        await eventually(lambda: covered(feishu_sink) == 10, timeout=20, message="all 10 told")
    cards = digest_cards(feishu_sink)
    assert cards
    assert {open_link(card) for card in cards} == {"https://dash.example.com"}
    fallbacks = [
        r for r in caplog.records if r.getMessage() == "digest not recorded; its link opens the dashboard"
    ]
    assert fallbacks
    assert {r.levelno for r in fallbacks} == {logging.WARNING}
