"""The notifier with the shipped defaults (issue 17): the example rules and an empty Feishu URL,
as docker-compose.yml and deploy/k8s/secrets.example.yaml give them until an operator has a bot.
An empty URL means "no Feishu route"; the notifier starts and answers ready."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from notifier_support import running, settings_for

from trainwatch_notifier.app import Notifier
from trainwatch_notifier.ruleset import parse_ruleset

SHIPPED_RULES = Path(__file__).resolve().parents[1] / "rules.example.yaml"


def test_an_empty_url_leaves_the_channel_and_its_rules_out() -> None:
    environ = {"TRAINWATCH_FEISHU_WEBHOOK": "", "TRAINWATCH_FEISHU_SECRET": ""}
    ruleset = parse_ruleset(SHIPPED_RULES.read_text(), environ)
    assert ruleset.unconfigured_channels == ["demo-feishu"]
    assert ruleset.channels == {}
    assert ruleset.rules == []
    configured = parse_ruleset(
        SHIPPED_RULES.read_text(), {**environ, "TRAINWATCH_FEISHU_WEBHOOK": "https://x.example/hook"}
    )
    assert list(configured.channels) == ["demo-feishu"]
    assert configured.unconfigured_channels == []


async def test_ready_with_the_shipped_rules_and_no_feishu_url(
    nats_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINWATCH_FEISHU_WEBHOOK", "")
    monkeypatch.setenv("TRAINWATCH_FEISHU_SECRET", "")
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=SHIPPED_RULES))
    async with running(notifier), httpx.AsyncClient() as http:
        ready = await http.get(f"http://127.0.0.1:{notifier.health_port}/readyz")
        assert ready.status_code == 200, ready.text
