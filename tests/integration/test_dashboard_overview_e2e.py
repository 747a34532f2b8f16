"""Issue 19 in a real browser: the overview, the jobs list's new columns and limits, the clusters
page's watch state and a removed cluster's jobs, in English and in Chinese.

The whole system runs as processes (test_dashboard_e2e's stack: kubesim's demo scenario, registry,
persister on SQLite, one watcher, the dashboard with a page size of 10 so the live cap is reached in
seconds). Chromium runs in Asia/Shanghai, so local times differ from UTC. Screenshots of every page
in both languages go to .artifacts/e2e/overview/ (with TRAINWATCH_README_SCREENSHOT=1 the overview
also to docs/img/overview.png, the README's picture).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_dashboard_e2e import ADMIN, ARTIFACTS, CHROMIUM, CHROMIUM_FLAGS, ROOT, VIEWER, System, start_system

from trainwatch_common.testing import eventually

pytestmark = pytest.mark.slow

PAGE_SIZE = 10
SHOTS = ARTIFACTS / "overview"


@pytest.fixture
async def system(nats_url: str, redis_url: str, tmp_path: Path) -> AsyncIterator[System]:
    async with start_system(nats_url, redis_url, tmp_path, TRAINWATCH_PAGE_SIZE=str(PAGE_SIZE)) as started:
        yield started


@pytest.fixture
async def page(system: System) -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        context = await browser.new_context(
            viewport={"width": 1400, "height": 900}, locale="en-US", timezone_id="Asia/Shanghai",
            accept_downloads=True,
        )  # fmt: skip
        page = await context.new_page()
        page.set_default_timeout(20_000)
        try:
            yield page
        finally:
            with contextlib.suppress(Exception):
                await page.screenshot(path=str(SHOTS / "last.png"), full_page=True)
            await context.close()
            await browser.close()


async def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


async def both_languages(page: Any, name: str, zh_heading: str) -> None:
    """A screenshot in English, then in Chinese (checking a heading), then back to English."""
    from playwright.async_api import expect

    await shot(page, f"{name}-en")
    url = page.url
    await page.goto(url + ("&" if "?" in url else "?") + "lang=zh-CN")
    await expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    await expect(page.locator("h1").first).to_have_text(zh_heading)
    await settle(page)
    await shot(page, f"{name}-zh-CN")
    await page.goto(url + ("&" if "?" in url else "?") + "lang=en")


async def settle(page: Any) -> None:
    await page.wait_for_load_state("networkidle")


async def add_cluster(system: System) -> None:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30) as api:
        created = await api.post(
            f"{system.registry}/v1/clusters",
            json={
                "id": system.cluster_name,
                "name": "Simulated cluster",
                "kubeconfig": system.kubeconfig.read_text(),
            },
        )
        assert created.status_code in (200, 201), created.text


async def wait_for_jobs(system: System, at_least: int) -> None:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {VIEWER}"}, timeout=10) as api:

        async def enough() -> bool:
            body = (await api.get(f"{system.query}/v1/stats")).json()
            return int(body.get("total", 0)) >= at_least

        await eventually(enough, timeout=90, message=f"{at_least} jobs stored")


async def test_overview_jobs_and_clusters_pages(system: System, page: Any) -> None:
    from playwright.async_api import expect

    base = system.dashboard
    await add_cluster(system)
    await wait_for_jobs(system, PAGE_SIZE + 5)

    # sign in with a viewer token: read pages need one
    await page.goto(f"{base}/")
    await page.fill("#admin-token", VIEWER)
    await page.click("#signin-form button[type=submit]")
    await page.wait_for_url(f"{base}/overview")  # the landing page is the overview

    # -- the overview: counts and five charts drawn by the vendored Chart.js ---------------------
    await expect(page.locator("h1")).to_have_text("Overview")
    counts = await page.locator("#counts-phase .tile").evaluate_all(
        "(tiles) => tiles.reduce((sum, t) => sum + Number(t.dataset.count), 0)"
    )
    assert counts >= PAGE_SIZE  # live jobs: a few of the stored ones were deleted
    await expect(page.locator(f"#counts-cluster tr[data-cluster={system.cluster_name}]")).to_be_visible()
    for chart in ("failures", "running", "queue-wait", "run-time", "reasons"):
        await expect(page.locator(f"#chart-{chart}")).to_have_attribute("data-drawn", "yes")
    running = await page.evaluate("window.__overviewCharts['chart-running'].data.datasets[0].data")
    assert len(running) == 24
    assert running[-1] >= 1  # jobs run right now
    await settle(page)
    if os.environ.get("TRAINWATCH_README_SCREENSHOT") == "1":
        (ROOT / "docs" / "img").mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(ROOT / "docs" / "img" / "overview.png"))
    await both_languages(page, "01-overview", "概览")

    # -- the jobs list: columns, local times, live rows capped at the page size ------------------
    await page.goto(f"{base}/jobs?cluster={system.cluster_name}")
    headers = await page.locator("#jobs-table thead th").all_inner_texts()
    for column in ("Ready", "Restarts", "Failing since", "Age", "Duration", "Updated"):
        assert column in headers
    cells = await page.locator("#jobs-table tbody tr").first.locator("td").count()
    assert cells == len(headers)
    first_time = page.locator("#jobs-table tbody time.local-time").first
    await expect(first_time).to_have_attribute("data-localized", "yes")
    shown, utc_title = await first_time.inner_text(), await first_time.get_attribute("title")
    assert utc_title is not None
    assert utc_title.endswith(" UTC")
    assert shown.replace("/", "-") != utc_title.removesuffix(" UTC")  # Shanghai is UTC+8
    await expect(page.locator("#times-note")).to_contain_text("Asia/Shanghai")
    # Issue 19: 50 → 71 rows in 8 s. New jobs keep coming (one a second); the page stays at its
    # size and counts them in the "N newer" marker instead.
    rows = page.locator("#jobs-table tbody tr")
    assert await rows.count() == PAGE_SIZE
    await page.evaluate("window.__notReloaded = true")
    await expect(page.locator("#jobs-newer")).to_be_visible(timeout=30_000)
    await asyncio.sleep(8)
    assert await rows.count() <= PAGE_SIZE  # fewer when a shown job was deleted meanwhile (hidden)
    assert await page.evaluate("window.__notReloaded === true")
    await expect(page.locator("#jobs-newer a")).to_contain_text("newer jobs")
    await both_languages(page, "02-jobs", "任务")

    # -- export what the filter shows -------------------------------------------------------------
    await page.goto(f"{base}/jobs?cluster={system.cluster_name}&phase=Running")
    async with page.expect_download() as download_info:
        await page.click("#export-csv")
    download = await download_info.value
    text = Path(await download.path()).read_text(encoding="utf-8-sig")
    lines = text.strip().splitlines()
    assert lines[0].startswith("cluster_id,namespace,kind_key,name")
    assert all(",Running," in line for line in lines[1:])

    # -- a saved "my jobs" view ---------------------------------------------------------------------
    await page.click("#save-my-jobs")
    await expect(page.locator("#save-my-jobs")).to_have_text("Saved as my jobs")
    await page.goto(f"{base}/jobs")
    mine = page.locator("#my-jobs")
    await expect(mine).to_be_visible()
    await mine.click()
    await page.wait_for_url(lambda url: "phase=Running" in url and f"cluster={system.cluster_name}" in url)
    assert await page.locator("#filter-deleted").is_checked() is False  # deleted jobs hidden by default

    # -- clusters: the watch is up to date, not "N s" since the last event --------------------------
    await page.goto(f"{base}/clusters")
    lag = page.locator(f"#cluster-{system.cluster_name} [data-field=lag]")
    await expect(lag).to_have_attribute("data-state", "up_to_date", timeout=30_000)
    await expect(lag).to_contain_text("Up to date")
    await both_languages(page, "03-clusters", "集群")
    await expect(lag).to_contain_text("Up to date")  # and after live health reports too
    await asyncio.sleep(3)  # the watcher reports every 2 s: the live path keeps the state
    await expect(lag).to_have_attribute("data-state", "up_to_date")

    # -- a removed cluster's unfinished jobs are no longer tracked, not "Running" forever -----------
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {ADMIN}"}) as api:
        removed = await api.delete(f"{system.registry}/v1/clusters/{system.cluster_name}")
        assert removed.status_code in (200, 204), removed.text
    await page.goto(f"{base}/jobs?cluster={system.cluster_name}&terminal=false")
    phases = await page.locator("#jobs-table tbody .cell-phase .phase").evaluate_all(
        "(badges) => badges.map((b) => b.dataset.phase)"
    )
    assert phases
    assert set(phases) == {"untracked"}
    await expect(page.locator("#jobs-table tbody tr").first).to_contain_text("No longer tracked")
    await both_languages(page, "04-untracked-jobs", "任务")
    await page.goto(f"{base}/clusters")
    await expect(page.locator("#removed-clusters")).to_be_visible()
    await expect(page.locator(f".removed-list li[data-cluster={system.cluster_name}]")).to_be_visible()
    await both_languages(page, "05-removed-cluster", "集群")
