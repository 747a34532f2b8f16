"""The admin forms against the real registry (SQLite, a real nats-server), served in-process:
the registry's refusal of an API server registered already, or of a rotation onto another one,
reaches the form with its reason and the type the "anyway" checkbox answers; the checkbox sends
force=true and the registry goes ahead (issue 20)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from dashboard_support import serving
from fastapi import FastAPI
from pydantic import SecretStr

from trainwatch_common.auth import ApiTokens
from trainwatch_dashboard.app import create_app
from trainwatch_dashboard.settings import DashboardSettings
from trainwatch_registry.app import create_app as create_registry
from trainwatch_registry.crypto import Encryptor
from trainwatch_registry.settings import RegistrySettings

ADMIN = "admin-token"
VIEWER = "viewer-token"  # the dashboard's own token for reading pages


def kubeconfig(server: str, token: str = "dashboard-test-token") -> str:
    return f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}"}}}}]
users: [{{name: u, user: {{token: {token}}}}}]
contexts: [{{name: main, context: {{cluster: c, user: u}}}}]
current-context: main
"""


class RegistryOnly(httpx.AsyncBaseTransport):
    """The dashboard's network: the registry app for http://registry, nothing else."""

    def __init__(self, registry: httpx.ASGITransport) -> None:
        self.registry = registry

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host == "registry":
            return await self.registry.handle_async_request(request)
        return httpx.Response(503, json={"detail": "no query API in this test"})


@contextlib.asynccontextmanager
async def _dashboard_app(sqlite_url: str, nats_url: str, allowed_hosts: str) -> AsyncIterator[FastAPI]:
    """The dashboard app (lifespan not entered) in front of the real registry app (entered)."""
    registry_settings = RegistrySettings(  # type: ignore[call-arg]
        _env_file=None,
        registry_database_url=sqlite_url,
        nats_url=nats_url,
        registry_encryption_keys=SecretStr(Encryptor.generate_key()),
        registry_connect_timeout_seconds=1.0,
    )
    registry = create_registry(
        registry_settings, tokens=ApiTokens(admin_tokens=SecretStr(ADMIN), viewer_tokens=SecretStr(VIEWER))
    )
    settings = DashboardSettings(
        nats_url="nats://127.0.0.1:1",
        registry_url="http://registry",
        query_url="http://query",
        dashboard_api_token=VIEWER,  # type: ignore[arg-type]
        dashboard_allowed_hosts=allowed_hosts,
    )
    async with registry.router.lifespan_context(registry):
        yield create_app(settings, transport=RegistryOnly(httpx.ASGITransport(app=registry)))


@pytest.fixture
async def dashboard(sqlite_url: str, nats_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with _dashboard_app(sqlite_url, nats_url, "dash") as app, app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://dash", timeout=30) as client:
            client.cookies.set("tw_admin", ADMIN)
            yield client


async def test_the_add_form_shows_a_duplicate_api_server_and_registers_it_only_when_forced(
    dashboard: httpx.AsyncClient,
) -> None:
    page = await dashboard.get("/clusters/new")
    assert page.status_code == 200
    assert 'name="force"' in page.text  # the checkbox the script reveals on such a refusal

    first = {"id": "gpu-a", "kubeconfig": kubeconfig("https://gpu.example.com:6443")}
    created = await dashboard.post("/admin/clusters", json=first)
    assert created.json() == {"ok": True, "result": {"redirect": "/clusters?added=gpu-a"}}

    again = {"id": "gpu-a-again", "kubeconfig": kubeconfig("https://GPU.example.com:6443/")}
    for url in ("/admin/clusters/test", "/admin/clusters"):  # the test (a dry run) says it first
        refused = await dashboard.post(url, json=again)
        assert refused.status_code == 409, refused.text
        answer = refused.json()
        assert answer["ok"] is False
        assert answer["overridable"] == "cluster.duplicate_server"
        assert any("already registered as gpu-a" in problem for problem in answer["problems"])

    forced = await dashboard.post("/admin/clusters", json={**again, "force": "true"})
    assert forced.json() == {"ok": True, "result": {"redirect": "/clusters?added=gpu-a-again"}}
    clusters = await dashboard.get("/clusters")
    assert "gpu-a-again" in clusters.text


async def test_the_rotate_form_refuses_another_api_server_until_forced(dashboard: httpx.AsyncClient) -> None:
    created = await dashboard.post(
        "/admin/clusters", json={"id": "gpu-a", "kubeconfig": kubeconfig("https://gpu.example.com:6443")}
    )
    assert created.json()["ok"] is True, created.text
    edit = await dashboard.get("/clusters/gpu-a/edit")
    assert 'id="rotate-force"' in edit.text

    renewed = await dashboard.post(
        "/admin/clusters/gpu-a/rotate", json={"kubeconfig": kubeconfig("https://gpu.example.com:6443", "new")}
    )
    assert renewed.json()["ok"] is True, renewed.text  # new credentials, same server: no question

    moved = {"kubeconfig": kubeconfig("https://moved.example.com:6443")}
    refused = await dashboard.post("/admin/clusters/gpu-a/rotate", json=moved)
    assert refused.status_code == 409, refused.text
    assert refused.json()["overridable"] == "cluster.server_changed"
    assert any("rotating would make gpu-a another cluster" in p for p in refused.json()["problems"])
    assert "https://gpu.example.com:6443" in (await dashboard.get("/clusters")).text

    forced = await dashboard.post("/admin/clusters/gpu-a/rotate", json={**moved, "force": "true"})
    assert forced.json() == {"ok": True, "result": {"redirect": "/clusters?updated=gpu-a"}}
    assert "https://moved.example.com:6443" in (await dashboard.get("/clusters")).text


CHROMIUM = Path(os.environ.get("TRAINWATCH_CHROMIUM", "/usr/bin/chromium"))


@pytest.mark.slow
@pytest.mark.skipif(
    not CHROMIUM.exists() or importlib.util.find_spec("playwright") is None,
    reason="needs Chromium (TRAINWATCH_CHROMIUM) and playwright",
)
async def test_in_a_browser_the_add_form_offers_register_anyway_after_the_refusal(
    sqlite_url: str, nats_url: str
) -> None:
    from playwright.async_api import async_playwright, expect

    async with (
        _dashboard_app(sqlite_url, nats_url, "127.0.0.1") as app,
        serving(app) as base,
        async_playwright() as playwright,
    ):
        async with httpx.AsyncClient(base_url=base, cookies={"tw_admin": ADMIN}, timeout=30) as client:
            first = {"id": "gpu-a", "kubeconfig": kubeconfig("https://gpu.example.com:6443")}
            assert (await client.post("/admin/clusters", json=first)).json()["ok"] is True
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            context = await browser.new_context(locale="en-US")
            await context.add_cookies([{"name": "tw_admin", "value": ADMIN, "url": base}])
            page = await context.new_page()
            page.set_default_timeout(20_000)
            await page.goto(f"{base}/clusters/new")
            force = page.locator("#add-force")
            await expect(force).to_be_hidden()
            await page.fill("#cluster-id", "gpu-a-again")
            await page.fill("#add-kubeconfig", kubeconfig("https://gpu.example.com:6443"))
            await page.click("#save-button")
            await expect(page.locator("#add-result")).to_contain_text("already registered as gpu-a")
            await expect(force).to_be_visible()
            await force.check()
            await page.click("#save-button")
            await page.wait_for_url("**/clusters?added=gpu-a-again")
            await expect(page.locator("body")).to_contain_text("gpu-a-again")
        finally:
            await browser.close()
