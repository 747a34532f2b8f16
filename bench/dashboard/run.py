"""Dashboard first-page load with 100k jobs (the embedded default: SQLite behind the persister).

Starts nats-server, the persister and the dashboard as processes (as `make run` does), publishes
N jobs' events to JetStream, waits until the persister has stored them, then times:

- the query API's first page alone (GET /v1/jobs?limit=50): the baseline;
- the dashboard's jobs page (GET /jobs: the query API call, the clusters call and rendering);
- the same two with a filter (cluster + phase) and a name search, and the 20th page by cursor;
- with TRAINWATCH_CHROMIUM (default /usr/bin/chromium) present, the browser's load event for /jobs.

Usage: uv run python bench/dashboard/run.py [--jobs 100000] [--rounds 30]
Loopback only; bounded by --timeout. Prints a table and writes results.json beside this file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import nats

from trainwatch_common import JobRef, JobStatusEvent, Phase, ReplicaCounts, ensure_streams, job_subject
from trainwatch_common.events.envelope import wrap_job_event
from trainwatch_common.testing.servers import NatsServer, free_port

HERE = Path(__file__).resolve().parent
VIEWER = "bench-viewer"
KINDS = [
    ("pytorchjob", "PyTorchJob", "kubeflow.org/v1"),
    ("mpijob", "MPIJob", "kubeflow.org/v2beta1"),
    ("tfjob", "TFJob", "kubeflow.org/v1"),
    ("job", "Job", "batch/v1"),
    ("rayjob", "RayJob", "ray.io/v1"),
]
PHASES = [Phase.RUNNING] * 3 + [Phase.SUCCEEDED] * 4 + [Phase.FAILED, Phase.PENDING, Phase.RESTARTING]
MODELS = ["resnet", "bert", "llama", "gpt", "vit", "t5"]


def event(n: int, start: datetime) -> JobStatusEvent:
    kind_key, kind, api_version = KINDS[n % len(KINDS)]
    phase = PHASES[(n // 3) % len(PHASES)]
    cluster = f"cluster-{n % 3}"
    uid = f"uid-{n:06d}"
    return JobStatusEvent(
        event_id=JobStatusEvent.expected_event_id(cluster, uid, 0),
        change="created",
        sequence=0,
        epoch=1,
        job=JobRef(
            cluster_id=cluster,
            api_version=api_version,
            kind=kind,
            kind_key=kind_key,
            namespace=f"team-{n % 20}",
            name=f"train-{MODELS[n % 6]}-{n}",
            uid=uid,
            resource_version=str(1000 + n),
        ),
        phase=phase,
        terminal=phase in (Phase.SUCCEEDED, Phase.FAILED),
        reason=f"{kind}{phase.value}",
        message=f"{kind} train-{n} is {phase.value.lower()}.",
        replicas={"Worker": ReplicaCounts(desired=4, active=4)},
        created_at=start + timedelta(seconds=2 * n),
        observed_at=start + timedelta(seconds=2 * n),
        owner=f"user-{n % 200}",
    )


async def publish(nats_url: str, jobs: int) -> float:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream(publish_async_max_pending=4000)
        await ensure_streams(js)
        start = datetime(2026, 10, 1, tzinfo=UTC)
        began = time.perf_counter()
        for n in range(jobs):
            e = event(n, start)
            subject = job_subject(
                cluster_id=e.job.cluster_id,
                namespace=e.job.namespace,
                kind_key=e.job.kind_key,
                name=e.job.name,
            )
            await js.publish_async(subject, wrap_job_event(e).to_json(), headers={"Nats-Msg-Id": e.event_id})
        await asyncio.wait_for(js.publish_async_completed(), 120)
        return time.perf_counter() - began
    finally:
        await nc.close()


async def wait_for(client: httpx.AsyncClient, url: str, check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            response = await client.get(url)
            if response.status_code == 200 and check(response):
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.5)
    raise TimeoutError(f"{url} not ready within {timeout}s")


def summary(samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)
    return {
        "p50_ms": statistics.median(samples),
        "p99_ms": samples[min(len(samples) - 1, int(0.99 * len(samples)))],
    }


async def timed_pair(
    client: httpx.AsyncClient, query: str, dashboard: str, params: dict[str, Any], rounds: int
) -> dict[str, dict[str, float]]:
    """The query API alone and the dashboard page, interleaved so both see the same background load."""
    api, page, backends, render = [], [], [], []
    for i in range(rounds + 3):  # 3 warm-up rounds: connections, SQLite page cache, templates
        began = time.perf_counter()
        (await client.get(f"{query}/v1/jobs", params={**params, "limit": 50})).raise_for_status()
        middle = time.perf_counter()
        response = await client.get(f"{dashboard}/jobs", params=params)
        response.raise_for_status()
        ended = time.perf_counter()
        if i < 3:
            continue
        api.append((middle - began) * 1000)
        page.append((ended - middle) * 1000)
        timing = dict(part.strip().split(";dur=") for part in response.headers["server-timing"].split(","))
        backends.append(float(timing["backends"]))
        render.append(float(timing["render"]))
    return {
        "query_api": summary(api),
        "dashboard": summary(page),
        "dashboard_backends": summary(backends),
        "dashboard_render": summary(render),
    }


async def deep_cursor(client: httpx.AsyncClient, query: str, pages: int) -> str:
    cursor = None
    for _ in range(pages - 1):
        body = (
            await client.get(
                f"{query}/v1/jobs", params={"limit": 50, **({"cursor": cursor} if cursor else {})}
            )
        ).json()
        cursor = body["next_cursor"]
    assert cursor
    return str(cursor)


async def browser_load(url: str, rounds: int) -> dict[str, float] | None:
    chromium = Path(os.environ.get("TRAINWATCH_CHROMIUM", "/usr/bin/chromium"))
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        return None
    if not chromium.exists():
        return None
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ]
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(chromium), args=flags)
        page = await browser.new_page()
        samples: dict[str, list[float]] = {"response": [], "dom_ready": [], "load": []}
        for i in range(rounds + 2):
            await page.goto(url, wait_until="load")
            timing = await page.evaluate(
                "() => { const t = performance.getEntriesByType('navigation')[0];"
                " return {response: t.responseEnd - t.startTime,"
                " dom_ready: t.domContentLoadedEventEnd - t.startTime, load: t.loadEventEnd - t.startTime}; }"
            )
            if i >= 2:  # two warm-up navigations
                for key, value in timing.items():
                    samples[key].append(value)
        await browser.close()
    return {f"{key}_p50_ms": statistics.median(values) for key, values in samples.items()}


def start_services(
    work: Path, env: dict[str, str], ports: dict[str, int], query: str
) -> list[subprocess.Popen[bytes]]:
    persister = {
        "TRAINWATCH_HTTP_PORT": str(ports["persister"]),
        "TRAINWATCH_DATABASE_URL": f"sqlite+aiosqlite:///{work / 'jobs.db'}",
    }
    # No registry: the jobs page's cluster list is optional and falls back to a text filter.
    dashboard = {
        "TRAINWATCH_HTTP_PORT": str(ports["dashboard"]),
        "TRAINWATCH_QUERY_URL": query,
        "TRAINWATCH_REGISTRY_URL": "http://127.0.0.1:9",
        "TRAINWATCH_DASHBOARD_API_TOKEN": VIEWER,
    }
    return [
        subprocess.Popen([sys.executable, "-m", "trainwatch_persister"], cwd=work, env={**env, **persister}),
        subprocess.Popen([sys.executable, "-m", "trainwatch_dashboard"], cwd=work, env={**env, **dashboard}),
    ]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--timeout", type=float, default=480)
    args = parser.parse_args()

    # SIGTERM (e.g. from `timeout`) cancels the run, so the finally below still stops the children.
    main_task = asyncio.current_task()
    assert main_task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)

    with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as tmp:
        work = Path(tmp)
        nats_server = NatsServer(workdir=work / "nats")
        nats_server.workdir.mkdir()
        nats_server.start()
        ports = {"persister": free_port(), "dashboard": free_port()}
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("TRAINWATCH_")},
            "TRAINWATCH_NATS_URL": nats_server.url,
            "TRAINWATCH_VIEWER_TOKENS": VIEWER,
            "TRAINWATCH_LOG_LEVEL": "WARNING",
        }
        query = f"http://127.0.0.1:{ports['persister']}"
        dashboard = f"http://127.0.0.1:{ports['dashboard']}"
        processes = start_services(work, env, ports, query)
        results: dict[str, Any] = {"jobs": args.jobs, "database": "sqlite", "rounds": args.rounds}
        try:
            async with httpx.AsyncClient(timeout=30, headers={"Authorization": f"Bearer {VIEWER}"}) as client:
                await wait_for(client, f"{query}/healthz", lambda r: True, 60)
                await wait_for(client, f"{dashboard}/healthz", lambda r: True, 60)
                results["publish_s"] = round(await publish(nats_server.url, args.jobs), 1)
                began = time.perf_counter()
                await wait_for(
                    client, f"{query}/v1/stats", lambda r: r.json()["total"] >= args.jobs, args.timeout
                )
                results["ingest_s"] = round(time.perf_counter() - began, 1)
                cursor = await deep_cursor(client, query, 20)
                cases = {
                    "first page": {},
                    "cluster+phase filter": {"cluster": "cluster-1", "phase": "Failed"},
                    "name search": {"name": "llama-77"},
                }
                cases["20th page (cursor)"] = {"cursor": cursor}
                results["http"] = {
                    label: await timed_pair(client, query, dashboard, params, args.rounds)
                    for label, params in cases.items()
                }
                results["browser_load_first_page"] = await browser_load(f"{dashboard}/jobs", 10)
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            nats_server.close()

    published, stored = results["publish_s"], results["ingest_s"]
    print(f"\n{args.jobs} jobs in SQLite: published in {published} s, then stored in {stored} s")
    print(
        f"{'case':22} {'query API p50/p99':>18} {'dashboard p50/p99':>18} {'ratio':>6}"
        f" {'of which backends / render p50':>31}"
    )
    for label, v in results["http"].items():
        a, p, b, r = v["query_api"], v["dashboard"], v["dashboard_backends"], v["dashboard_render"]
        print(
            f"{label:22} {a['p50_ms']:>8.1f} / {a['p99_ms']:<7.1f} {p['p50_ms']:>8.1f} / {p['p99_ms']:<7.1f}"
            f" {p['p50_ms'] / a['p50_ms']:>5.2f}x {b['p50_ms']:>17.1f} / {r['p50_ms']:.1f} ms"
        )
    if results["browser_load_first_page"]:
        b = results["browser_load_first_page"]
        print(
            f"in Chromium, first page (p50): response complete {b['response_p50_ms']:.0f} ms,"
            f" DOM ready {b['dom_ready_p50_ms']:.0f} ms, load event {b['load_p50_ms']:.0f} ms"
        )
    (HERE / "results.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    random.seed(0)
    asyncio.run(main())
