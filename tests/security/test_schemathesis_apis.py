"""Schemathesis against the persister's query API and the dashboard: no input makes either answer 5xx.

(The registry's run is services/registry/tests/test_registry_schemathesis.py.) Bounded: a few
examples per operation, no shrinking, derandomized, so `make test` stays well under a minute.
The services are the real ones, running their lifespans on one event loop in a background
thread (schemathesis calls are synchronous): a registry and a persister on SQLite, and a
dashboard that asks that registry who is signed in and reads that persister's jobs.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from security_support import ADMIN, DASHBOARD_HOST, TOKENS, VIEWER, registry_app, serving

from trainwatch_common.testing import NatsServer
from trainwatch_dashboard.app import create_app as create_dashboard
from trainwatch_dashboard.settings import DashboardSettings
from trainwatch_persister.app import create_app as create_persister
from trainwatch_persister.settings import PersisterSettings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("TRAINWATCH_SCHEMATHESIS_EXAMPLES", "10"))  # more for a deeper run
_HTTPX_ARGS = {"method", "url", "headers", "params", "json", "content", "data", "files", "cookies"}


class _Stack:
    """The three services on one loop in a thread; ``call`` sends a case to one of them over ASGI."""

    def __init__(self, workdir: Path, nats_url: str) -> None:
        self.workdir = workdir
        self.nats_url = nats_url
        self.loop = asyncio.new_event_loop()
        self.apps: dict[str, FastAPI] = {}
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, name="schemathesis-apps", daemon=True)

    async def _hold(self, started: threading.Event) -> None:
        self._stop = asyncio.Event()
        async with AsyncExitStack() as stack:
            registry = registry_app(self.workdir, nats_url=self.nats_url)  # it creates the streams
            registry_url = await stack.enter_async_context(serving(registry))
            persister = create_persister(
                PersisterSettings(
                    _env_file=None,  # type: ignore[call-arg]
                    database_url=f"sqlite+aiosqlite:///{self.workdir / 'jobs.db'}",
                    consume=False,  # the query API only: no NATS needed
                ),
                tokens=TOKENS,
            )
            query_url = await stack.enter_async_context(serving(persister))
            dashboard = create_dashboard(
                DashboardSettings(
                    _env_file=None,  # type: ignore[call-arg]
                    nats_url=self.nats_url,
                    registry_url=registry_url,
                    query_url=query_url,
                    dashboard_api_token=VIEWER,  # type: ignore[arg-type]
                    dashboard_allowed_hosts=DASHBOARD_HOST,
                )
            )
            await stack.enter_async_context(_lifespan(dashboard))
            # Subscribed before any case runs: a live feed still retrying draws random jitter,
            # which Hypothesis reports as randomness inside its strategies.
            await asyncio.wait_for(dashboard.state.live.subscribed.wait(), 30)
            self.apps = {"persister": persister, "dashboard": dashboard}
            started.set()
            await self._stop.wait()

    def __enter__(self) -> _Stack:
        self._thread.start()
        started = threading.Event()
        self._held = asyncio.run_coroutine_threadsafe(self._hold(started), self.loop)
        if not started.wait(60):
            raise RuntimeError(f"services did not start: {self._held.exception(0)}")
        return self

    def __exit__(self, *_: object) -> None:
        assert self._stop is not None
        self.loop.call_soon_threadsafe(self._stop.set)
        self._held.result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def call(self, service: str, case: schemathesis.Case, headers: dict[str, str]) -> httpx.Response:
        base_url = f"https://{DASHBOARD_HOST}" if service == "dashboard" else "http://persister"

        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.apps[service])
            async with httpx.AsyncClient(transport=transport, base_url=base_url) as client:
                kwargs = case.as_transport_kwargs(base_url=base_url)
                kwargs["headers"] = {**(kwargs.get("headers") or {}), **headers}
                kwargs.pop("cookies", None)  # ours are in the headers
                if isinstance(kwargs.get("data"), (bytes, str)):  # raw bodies go as content in httpx
                    kwargs["content"] = kwargs.pop("data")
                unknown = set(kwargs) - _HTTPX_ARGS
                assert not unknown, f"unexpected transport arguments {unknown}"
                return await client.request(**kwargs)

        return asyncio.run_coroutine_threadsafe(send(), self.loop).result(30)


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with app.router.lifespan_context(app):
        yield


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Stack]:
    workdir = Path(tmp_path_factory.mktemp("schemathesis-apis"))
    with NatsServer() as nats, _Stack(workdir, nats.url) as running:
        yield running


_BOUNDED = settings(
    max_examples=EXAMPLES,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)

persister_schema = schemathesis.openapi.from_dict(
    json.loads((ROOT / "docs/openapi/persister.json").read_text())
)


def _dashboard_document() -> dict[str, Any]:
    app = create_dashboard(DashboardSettings(_env_file=None))  # type: ignore[call-arg]
    return app.openapi()


dashboard_schema = schemathesis.openapi.from_dict(_dashboard_document())


@persister_schema.parametrize()
@_BOUNDED
def test_no_input_makes_the_persister_fail(case: schemathesis.Case, stack: _Stack) -> None:
    response = stack.call("persister", case, {"Authorization": f"Bearer {VIEWER}"})
    case.validate_response(response, checks=[not_a_server_error])


@dashboard_schema.parametrize()
@_BOUNDED
def test_no_input_makes_the_dashboard_fail(case: schemathesis.Case, stack: _Stack) -> None:
    # A signed-in admin from the dashboard's own page: the requests reach the forms and the
    # registry behind them, not only the sign-in and origin checks.
    headers = {"Cookie": f"tw_admin={ADMIN}", "Origin": f"https://{DASHBOARD_HOST}"}
    response = stack.call("dashboard", case, headers)
    case.validate_response(response, checks=[not_a_server_error])
