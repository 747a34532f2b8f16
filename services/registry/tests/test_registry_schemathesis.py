"""Schemathesis against the published OpenAPI document: no input makes the registry answer 5xx.

Bounded: a few examples per operation, no shrinking, with an admin token (so requests get past
auth and reach validation and the database). Runs in-process over ASGI on SQLite.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from conftest import TOKENS, make_settings
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error

from trainwatch_common.testing.servers import RedisServer
from trainwatch_registry import openapi
from trainwatch_registry.app import create_app

_spec = json.loads(openapi.PUBLISHED.read_text())


class _RunningApp:
    """The app with its lifespan running on a loop in a background thread (schemathesis is sync)."""

    def __init__(self, database_url: str, redis_url: str) -> None:
        from trainwatch_registry.crypto import Encryptor

        self.settings = make_settings(
            database_url=database_url,
            nats_url="nats://127.0.0.1:1",  # no NATS: the outbox keeps the events; the API must not care
            encryption_key=Encryptor.generate_key(),
            registry_health_consumer_enabled=False,
            redis_url=redis_url,  # the watchers' leases, which /connection checks
        )
        self.app = create_app(self.settings, tokens=TOKENS)
        self.loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, name="schemathesis-app", daemon=True)

    def __enter__(self) -> _RunningApp:
        self._thread.start()
        started = threading.Event()

        async def hold() -> None:
            self._stop = asyncio.Event()
            async with self.app.router.lifespan_context(self.app):
                started.set()
                await self._stop.wait()

        self._held = asyncio.run_coroutine_threadsafe(hold(), self.loop)
        if not started.wait(30):
            raise RuntimeError(f"app did not start: {self._held.exception(0)}")
        return self

    def __exit__(self, *_: object) -> None:
        assert self._stop is not None
        self.loop.call_soon_threadsafe(self._stop.set)
        self._held.result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def running_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_RunningApp]:
    workdir = Path(tmp_path_factory.mktemp("schemathesis"))
    url = os.environ.get(
        "REGISTRY_SCHEMATHESIS_DATABASE_URL", f"sqlite+aiosqlite:///{workdir / 'registry.db'}"
    )
    redis = RedisServer(workdir=workdir / "redis")
    redis.workdir.mkdir()
    redis.start()
    try:
        with _RunningApp(url, redis.url) as running:
            yield running
    finally:
        redis.close()


schema = schemathesis.openapi.from_dict(_spec)


@pytest.fixture
def asgi_app(running_app: _RunningApp):  # type: ignore[no-untyped-def]
    return running_app


@schema.parametrize()
@settings(
    max_examples=int(os.environ.get("REGISTRY_SCHEMATHESIS_EXAMPLES", "15")),  # more for a deeper run
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_input_makes_the_registry_fail(case: schemathesis.Case, running_app: _RunningApp) -> None:
    case.headers = {**(case.headers or {}), "Authorization": "Bearer admin-token"}
    if case.path.endswith("/connection"):
        case.headers["Authorization"] = "Bearer watcher-token"
    response = _call(case, running_app)
    case.validate_response(response, checks=[not_a_server_error])


def _call(case: schemathesis.Case, running_app: _RunningApp):  # type: ignore[no-untyped-def]
    import httpx

    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=running_app.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://registry") as client:
            kwargs = case.as_transport_kwargs(base_url="http://registry")
            kwargs.pop("cookies", None)  # the API reads no cookies
            if isinstance(kwargs.get("data"), (bytes, str)):  # raw bodies go as content in httpx
                kwargs["content"] = kwargs.pop("data")
            unknown = set(kwargs) - _HTTPX_ARGS
            assert not unknown, f"unexpected transport arguments {unknown}"
            return await client.request(**kwargs)

    return asyncio.run_coroutine_threadsafe(send(), running_app.loop).result(30)


_HTTPX_ARGS = {"method", "url", "headers", "params", "json", "content", "data", "files", "cookies"}
