"""The real services for the attack cases: a registry on SQLite served by uvicorn, and a dashboard
that asks it who may sign in. Nothing here stands in for our own infrastructure."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from pydantic import SecretStr

from trainwatch_common.auth import ApiTokens
from trainwatch_dashboard.app import create_app as create_dashboard
from trainwatch_dashboard.settings import DashboardSettings
from trainwatch_registry.app import create_app as create_registry
from trainwatch_registry.crypto import Encryptor
from trainwatch_registry.settings import RegistrySettings

ADMIN = "sec-admin-0123456789abcdefghij"
VIEWER = "sec-viewer-0123456789abcdefghij"
WATCHER = "sec-watcher-0123456789abcdefghij"
TOKENS = ApiTokens(
    admin_tokens=SecretStr(ADMIN), viewer_tokens=SecretStr(VIEWER), watcher_tokens=SecretStr(WATCHER)
)
DASHBOARD_HOST = "dashboard.example.com"

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.0.0.1:6443"}}]
users: [{name: u, user: {token: very-secret-token-0123456789}}]
contexts:
- name: first
  context: {cluster: c, user: u}
current-context: first
"""


def registry_app(workdir: Path, **overrides: Any) -> FastAPI:
    values: dict[str, Any] = {
        "registry_database_url": f"sqlite+aiosqlite:///{workdir / 'registry.db'}",
        "nats_url": "nats://127.0.0.1:1",  # no NATS: the outbox keeps the events, the API does not care
        "registry_encryption_keys": SecretStr(Encryptor.generate_key()),
        "registry_health_consumer_enabled": False,
    }
    values.update(overrides)
    settings = RegistrySettings(_env_file=None, **values)  # type: ignore[call-arg]
    return create_registry(settings, tokens=TOKENS)


@contextlib.asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[str]:
    """Run ``app`` (lifespan included) under uvicorn on 127.0.0.1:<free port>; yield its base URL."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_config=None, access_log=False, timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(), name="security test server")
    try:
        while not server.started:  # uvicorn offers no start event; this polls its own flag
            if task.done():
                await task
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@contextlib.asynccontextmanager
async def dashboard(registry_url: str, **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The dashboard in-process over ASGI, answering to DASHBOARD_HOST, its registry the real one."""
    values: dict[str, Any] = {
        "nats_url": "nats://127.0.0.1:1",
        "registry_url": registry_url,
        "query_url": registry_url.rsplit(":", 1)[0] + ":9",  # jobs: not needed by these cases
        "dashboard_api_token": SecretStr(VIEWER),
        "dashboard_allowed_hosts": DASHBOARD_HOST,
        "backend_timeout_seconds": 5.0,
    }
    values.update(overrides)
    app = create_dashboard(DashboardSettings(_env_file=None, **values))  # type: ignore[call-arg]
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url=f"https://{DASHBOARD_HOST}") as client:
            yield client


async def sign_in(client: httpx.AsyncClient, token: str, *, next_path: str = "/jobs") -> httpx.Response:
    return await client.post(
        "/admin/signin",
        content=f"token={token}&next={next_path}",
        headers={
            "content-type": "application/x-www-form-urlencoded",
            "origin": str(client.base_url).rstrip("/"),
        },
    )
