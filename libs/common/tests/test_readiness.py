"""/readyz says what is not ready (issue 17): each check's reason, the same shape at 200 and 503,
a dependency that hangs reported as such, and no exception message (it may hold a secret)."""

from __future__ import annotations

import asyncio

import httpx
import nats
import pytest

from trainwatch_common.observability import health
from trainwatch_common.observability.health import health_app, nats_status


async def _readyz(app: object) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.get("/readyz")


async def test_each_failing_check_is_named_with_its_reason() -> None:
    state = {"nats": "disconnected, reconnecting"}
    app = health_app({"nats": lambda: state["nats"], "postgres": lambda: True})
    down = await _readyz(app)
    assert down.status_code == 503
    assert down.json() == {"ready": False, "checks": {"nats": "disconnected, reconnecting", "postgres": "ok"}}
    state["nats"] = "ok"
    up = await _readyz(app)
    assert up.status_code == 200
    assert up.json() == {"ready": True, "checks": {"nats": "ok", "postgres": "ok"}}


async def test_a_raising_check_names_the_error_class_and_never_its_message() -> None:
    async def database() -> bool:
        raise ConnectionRefusedError("postgresql://trainwatch:hunter2-secret@db:5432/x refused")

    response = await _readyz(health_app({"database": database}))
    assert response.status_code == 503
    assert response.json()["checks"] == {"database": "failing (ConnectionRefusedError)"}
    assert "hunter2" not in response.text


async def test_a_hanging_check_is_reported_without_hanging_readyz(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health, "CHECK_TIMEOUT", 0.2)

    async def redis() -> bool:
        await asyncio.Event().wait()  # never answers
        return True

    async with asyncio.timeout(5):
        response = await _readyz(health_app({"redis": redis, "nats": lambda: True}))
    assert response.status_code == 503
    assert response.json()["checks"] == {"redis": "no answer within 0.2 s", "nats": "ok"}


async def test_nats_status_follows_the_connection(nats_url: str) -> None:
    assert nats_status(None) == "not connected yet"
    nc = await nats.connect(nats_url)
    assert nats_status(nc) == "ok"
    await nc.close()
    assert nats_status(nc) == "closed"
