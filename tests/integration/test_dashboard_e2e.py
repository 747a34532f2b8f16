"""End to end in a real browser: the whole system as processes, the dashboard driven by Chromium.

Started as `make run` starts them (each service is `python -m <package>` with TRAINWATCH_*
settings): nats-server with JetStream and Redis (the test plugin's fixtures), kubesim running the
demo scenario, the registry, the persister, one watcher and the dashboard. Debian's chromium is
driven by Playwright (system browser only: no browser download). The flow is the issue's:

1. sign in as an admin, and see a bad kubeconfig refused with the registry's reason;
2. add the kubesim cluster through the form (pick the context, test the connection, save);
3. see its jobs appear and change phase live, without a reload;
4. filter; open a job's timeline; switch the language;
5. and the other admin forms: change labels, rotate credentials, remove the cluster.

Screenshots go to .artifacts/e2e/ (and, with TRAINWATCH_README_SCREENSHOT=1, the jobs page to
docs/img/dashboard.png); each process's log goes to .artifacts/e2e/logs/.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from trainwatch_common.testing import eventually

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / ".artifacts" / "e2e"
CHROMIUM = Path(os.environ.get("TRAINWATCH_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Long enough for the services' start-up check (placeholders and short tokens are refused).
ADMIN, VIEWER, WATCHER = "e2e-admin-token-0123456789", "e2e-viewer-token-0123456789", "e2e-watcher-token-0123"
SERVICES = (
    "trainwatch_registry",
    "trainwatch_persister",
    "trainwatch_watcher",
    "trainwatch_dashboard",
    "kubesim",
)

BAD_KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: shady
  cluster:
    server: https://10.1.2.3:6443
    insecure-skip-tls-verify: true
users:
- name: someone
  user:
    token: abc123
contexts:
- name: shady
  context: {cluster: shady, user: someone}
current-context: shady
"""


def _missing_prerequisites() -> list[str]:
    import importlib.util

    missing = [f"module {name}" for name in SERVICES if importlib.util.find_spec(f"{name}.__main__") is None]
    if importlib.util.find_spec("playwright") is None:
        missing.append("the playwright package")
    if not CHROMIUM.exists():
        missing.append(f"{CHROMIUM} (apt-get install -y chromium)")
    return missing


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Stack:
    """The system's processes; stopped with SIGTERM (then SIGKILL) in reverse order of start."""

    workdir: Path
    env: dict[str, str]
    processes: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def start(
        self, name: str, module: str, args: list[str] | None = None, **env: str
    ) -> subprocess.Popen[bytes]:
        logs = ARTIFACTS / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        # kubesim prints "<name> <url> <kubeconfig>" per cluster on stdout: read through a pipe.
        with (logs / f"{name}.log").open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", module, *(args or [])],
                cwd=self.workdir,
                env={**self.env, **env},
                stdout=subprocess.PIPE if name == "kubesim" else log,
                stderr=log if name == "kubesim" else subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append((name, process))
        return process

    def check_alive(self) -> None:
        for name, process in self.processes:
            if process.poll() is not None:
                raise AssertionError(
                    f"{name} exited with {process.returncode}; see .artifacts/e2e/logs/{name}.log"
                )

    def stop(self) -> None:
        for _, process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for name, process in reversed(self.processes):
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                print(f"{name} did not stop on SIGTERM within 10 s; killed")
            if process.stdout:
                process.stdout.close()


async def wait_healthy(stack: Stack, url: str, *, timeout: float = 60) -> None:
    async with httpx.AsyncClient(timeout=2) as client:

        async def healthy() -> bool:
            stack.check_alive()
            try:
                return (await client.get(url)).status_code == 200
            except httpx.TransportError:
                return False

        await eventually(healthy, timeout=timeout, message=f"{url} answers")


@dataclass(frozen=True)
class System:
    dashboard: str
    registry: str
    query: str
    kubeconfig: Path
    cluster_name: str


@pytest.fixture
async def system(nats_url: str, redis_url: str, tmp_path: Path) -> AsyncIterator[System]:
    async with start_system(nats_url, redis_url, tmp_path) as started:
        yield started


@contextlib.asynccontextmanager
async def start_system(
    nats_url: str, redis_url: str, tmp_path: Path, **dashboard_env: str
) -> AsyncIterator[System]:
    """Every process of the system; ``dashboard_env`` adds TRAINWATCH_* settings of the dashboard."""
    missing = _missing_prerequisites()
    if missing:
        pytest.skip(f"the end-to-end test needs: {', '.join(missing)}")
    from cryptography.fernet import Fernet

    shutil.rmtree(ARTIFACTS / "logs", ignore_errors=True)
    ports = {name: free_port() for name in ("registry", "persister", "watcher", "dashboard")}
    registry, query = f"http://127.0.0.1:{ports['registry']}", f"http://127.0.0.1:{ports['persister']}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TRAINWATCH_")},
        "PYTHONUNBUFFERED": "1",
        "TRAINWATCH_NATS_URL": nats_url,
        "TRAINWATCH_REDIS_URL": redis_url,
        "TRAINWATCH_LOG_FORMAT": "text",
        "TRAINWATCH_ADMIN_TOKENS": ADMIN,
        "TRAINWATCH_VIEWER_TOKENS": VIEWER,
        "TRAINWATCH_WATCHER_TOKENS": WATCHER,
        "TRAINWATCH_REGISTRY_URL": registry,
        "TRAINWATCH_QUERY_URL": query,
    }
    stack = Stack(workdir=tmp_path, env=env)
    try:
        kubesim = stack.start(
            "kubesim", "kubesim",
            ["--clusters", "1", "--scenario", "demo", "--rate", "1", "--concurrency", "6",
             "--name-prefix", "sim", "--kubeconfig-dir", str(tmp_path / "kube")],
        )  # fmt: skip
        assert kubesim.stdout is not None
        cluster_name, _, kubeconfig = (
            kubesim.stdout.readline().decode().split()
        )  # "<name> <url> <kubeconfig>"
        stack.start(
            "registry", "trainwatch_registry",
            TRAINWATCH_HTTP_PORT=str(ports["registry"]),
            TRAINWATCH_REGISTRY_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'registry.db'}",
            TRAINWATCH_REGISTRY_ENCRYPTION_KEYS=Fernet.generate_key().decode(),
            TRAINWATCH_ALLOW_LOOPBACK_SERVERS="true",
        )  # fmt: skip
        stack.start(
            "persister", "trainwatch_persister",
            TRAINWATCH_HTTP_PORT=str(ports["persister"]),
            TRAINWATCH_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}",
            TRAINWATCH_BATCH_MAX_WAIT_MS="50",
        )  # fmt: skip
        stack.start(
            "watcher", "trainwatch_watcher",
            TRAINWATCH_HTTP_PORT=str(ports["watcher"]),
            TRAINWATCH_WATCHER_TOKEN=WATCHER,
            TRAINWATCH_HEALTH_INTERVAL="2",
            TRAINWATCH_INSTANCE_ID="watcher-e2e",
            TRAINWATCH_ALLOW_LOOPBACK_SERVERS="true",
        )  # fmt: skip
        dashboard = f"http://127.0.0.1:{ports['dashboard']}"
        stack.start(
            "dashboard", "trainwatch_dashboard",
            TRAINWATCH_HTTP_PORT=str(ports["dashboard"]),
            TRAINWATCH_DASHBOARD_API_TOKEN=VIEWER,
            **dashboard_env,
        )  # fmt: skip
        for url in (f"{registry}/healthz", f"{query}/healthz", f"{dashboard}/readyz"):
            await wait_healthy(stack, url)
        yield System(dashboard, registry, query, Path(kubeconfig), cluster_name)
    finally:
        stack.stop()


@pytest.fixture
async def page(system: System) -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        context = await browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-US")
        page = await context.new_page()
        page.set_default_timeout(20_000)
        try:
            yield page
        finally:
            with contextlib.suppress(Exception):
                await page.screenshot(path=str(ARTIFACTS / "last.png"), full_page=True)
            await context.close()
            await browser.close()


async def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


async def test_dashboard_end_to_end(system: System, page: Any) -> None:
    from playwright.async_api import expect

    base = system.dashboard

    # -- 1. sign in as an admin; a bad kubeconfig is refused with its reason -----------------
    await page.goto(f"{base}/clusters/new")
    assert "/admin/signin" in page.url
    await page.fill("#admin-token", ADMIN)
    await page.click("#signin-form button[type=submit]")
    await page.wait_for_url(f"{base}/clusters/new")
    await page.fill("#cluster-id", "shady")
    await page.fill("#add-kubeconfig", BAD_KUBECONFIG)
    await expect(page.locator("#add-context option")).to_have_text(["shady"])
    await page.click("#test-button")
    refusal = page.locator("#add-result.alert-error")
    await expect(refusal).to_contain_text("insecure-skip-tls-verify")
    await shot(page, "01-bad-kubeconfig-refused")
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {VIEWER}"}) as api:
        assert (await api.get(f"{system.registry}/v1/clusters/shady")).status_code == 404  # nothing stored

    # -- 2. add the kubesim cluster: paste, pick the context, test, save --------------------
    await page.goto(f"{base}/clusters/new")
    await page.fill("#cluster-id", system.cluster_name)
    await page.fill("#cluster-name", "Simulated cluster")
    await page.fill("textarea[name=labels]", "env=demo\nsite=e2e")
    await page.set_input_files("#add-file", str(system.kubeconfig))  # the upload path of the form
    await expect(page.locator("#add-context")).to_have_value(system.cluster_name)
    await page.click("#test-button")
    await expect(page.locator("#add-result.alert-ok")).to_contain_text("pytorchjob", timeout=30_000)
    await shot(page, "02-connection-tested")
    await page.click("#save-button")
    await page.wait_for_url(f"{base}/clusters?added={system.cluster_name}")
    card = page.locator(f"#cluster-{system.cluster_name}")
    await expect(card).to_be_visible()
    await expect(card.locator("[data-field=reachable]")).to_have_text("Reachable", timeout=30_000)
    await expect(card.locator("[data-field=owner]")).to_contain_text("watcher-e2e")
    await shot(page, "03-cluster-added")

    # -- 2b. change its labels, then rotate its credentials (the same kubeconfig, re-sent) ------
    edit_url = f"{base}/clusters/{system.cluster_name}/edit"
    await card.locator("a.edit-link").click()
    await page.wait_for_url(edit_url)
    await page.fill("#edit-labels", "env=demo\nsite=e2e\nteam=ml-platform")
    await page.click("#save-changes")
    await page.wait_for_url(f"{base}/clusters?updated={system.cluster_name}")
    await expect(card).to_contain_text("team=ml-platform")
    await page.goto(edit_url)
    await page.set_input_files("#rotate-file", str(system.kubeconfig))
    await expect(page.locator("#rotate-context")).to_have_value(system.cluster_name)
    await page.click("#rotate-form button[type=submit]")
    await page.wait_for_url(f"{base}/clusters?updated={system.cluster_name}")

    # -- 3. its jobs appear and change phase live, without a reload --------------------------
    await page.goto(f"{base}/jobs?cluster={system.cluster_name}")
    await page.evaluate("window.__notReloaded = true")
    rows = page.locator("#jobs-table tbody tr")
    await expect(rows.first).to_be_visible(timeout=45_000)
    before = await phases_by_row(page)
    await page.wait_for_function(
        """(before) => {
            const now = {};
            document.querySelectorAll('#jobs-table tbody tr').forEach(
                (tr) => { now[tr.dataset.key] = tr.querySelector('.phase').dataset.phase; });
            return Object.keys(before).some((k) => now[k] && now[k] !== before[k]);
        }""",
        arg=before,
        timeout=60_000,
    )
    assert await page.evaluate("window.__notReloaded === true")
    await expect(page.locator("#live-status")).to_have_class("live-status on")
    await shot(page, "04-jobs-live")
    if os.environ.get("TRAINWATCH_README_SCREENSHOT") == "1":
        (ROOT / "docs" / "img").mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(ROOT / "docs" / "img" / "dashboard.png"))

    # -- 4. filter ------------------------------------------------------------------------------
    await page.reload()
    kind = (await rows.first.locator("td").nth(3).inner_text()).strip()
    await page.select_option("select[name=kind]", kind)
    await page.click("#filter-apply")
    await page.wait_for_url(lambda url: f"kind={kind}" in url)
    kinds = await page.locator("#jobs-table tbody tr td:nth-child(4)").all_inner_texts()
    assert kinds
    assert {k.strip() for k in kinds} == {kind}
    await shot(page, "05-filtered")

    # -- 5. one job's timeline -----------------------------------------------------------------
    await rows.first.locator("a.job-link").click()
    await page.wait_for_url(lambda url: f"/jobs/{system.cluster_name}/" in url)
    await expect(page.locator("#timeline li").first).to_be_visible()
    await expect(page.locator("h2", has_text="Timeline")).to_be_visible()
    await shot(page, "06-job-timeline")

    # -- 5b. the timeline grows live: open unfinished jobs until one moves while we watch ---------
    assert await live_transition_seen(page, f"{base}/jobs?cluster={system.cluster_name}&terminal=false")
    await shot(page, "06b-job-timeline-live")

    # -- 6. switch the language -------------------------------------------------------------------
    await page.click("#lang-switch")
    await expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    await expect(page.locator("h2", has_text="状态时间线")).to_be_visible()
    await page.click("#back-to-jobs")
    await expect(page.locator("h1")).to_have_text("任务")  # the choice is remembered
    await shot(page, "07-zh-CN")

    # -- 7. remove the cluster (typing its id to confirm) -------------------------------------------
    await page.goto(f"{base}/clusters/{system.cluster_name}/edit")
    await page.fill("#remove-form input[name=confirm]", system.cluster_name)
    await page.click("#remove-form button[type=submit]")
    await page.wait_for_url(f"{base}/clusters?removed={system.cluster_name}")
    await expect(page.locator(f"#cluster-{system.cluster_name}")).to_have_count(0)
    await expect(page.locator("#notice")).to_contain_text(system.cluster_name)


async def live_transition_seen(page: Any, unfinished_jobs_url: str, tries: int = 4) -> bool:
    """Open an unfinished job and wait for a new timeline entry without reloading; a job may
    finish between the list and its page, so a few are tried."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    for attempt in range(tries):
        await page.goto(unfinished_jobs_url)
        links = page.locator("#jobs-table tbody tr a.job-link")
        await links.first.wait_for()
        await links.nth(min(attempt, await links.count() - 1)).click()
        await page.wait_for_url(lambda url: "/jobs/" in url and "?" not in url)
        await page.evaluate("window.__notReloaded = true")
        shown = await page.locator("#timeline li").count()
        try:
            await page.wait_for_function(
                "(shown) => document.querySelectorAll('#timeline li').length > shown",
                arg=shown,
                timeout=20_000,
            )
        except PlaywrightTimeout:
            continue
        return bool(await page.evaluate("window.__notReloaded === true"))
    return False


async def phases_by_row(page: Any) -> dict[str, str]:
    result: dict[str, str] = await page.evaluate(
        """() => {
            const out = {};
            document.querySelectorAll('#jobs-table tbody tr').forEach(
                (tr) => { out[tr.dataset.key] = tr.querySelector('.phase').dataset.phase; });
            return out;
        }"""
    )
    return result
