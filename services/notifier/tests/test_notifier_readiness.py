"""/readyz names what is not ready (issue 17): Redis stopped and back, NATS and the rules fine;
the same shape when ready, and no Feishu secret in it."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from notifier_support import running, settings_for

from trainwatch_common.testing import RedisServer, eventually
from trainwatch_notifier.app import Notifier

SHIPPED_RULES = Path(__file__).resolve().parents[1] / "rules.example.yaml"
SECRET = "feishu-signing-secret-not-to-show"


async def test_readyz_says_redis_is_down_and_nothing_else(
    nats_url: str, redis_process: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINWATCH_FEISHU_WEBHOOK", "https://open.feishu.invalid/hook/x")
    monkeypatch.setenv("TRAINWATCH_FEISHU_SECRET", SECRET)
    settings = settings_for(nats_url=nats_url, redis_url=redis_process.url, rules_file=SHIPPED_RULES)
    notifier = Notifier(settings)
    async with running(notifier), httpx.AsyncClient() as http:
        url = f"http://127.0.0.1:{notifier.health_port}/readyz"
        ready = await http.get(url)
        assert ready.status_code == 200, ready.text
        checks = ready.json()["checks"]
        assert set(checks) >= {"nats", "redis", "rules", "clusters", "consuming", "tasks"}
        assert set(checks.values()) == {"ok"}, checks

        redis_process.stop()

        async def not_ready() -> bool:
            return (await http.get(url)).status_code == 503

        await eventually(not_ready, timeout=15, message="not ready without Redis")
        down = await http.get(url)
        assert down.json()["checks"]["redis"].startswith(("failing (", "no answer within")), down.text
        assert down.json()["checks"]["nats"] == "ok", down.text
        assert down.json()["checks"]["rules"] == "ok", down.text
        assert SECRET not in down.text
        assert "feishu.invalid" not in down.text
        redis_process.start()

        async def ready_again() -> bool:
            return (await http.get(url)).status_code == 200

        await eventually(ready_again, timeout=30, message="ready once Redis is back")
