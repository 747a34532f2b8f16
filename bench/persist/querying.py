"""List-endpoint latency: the real API (``python -m trainwatch_persister``, queries only) over HTTP."""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import httpx
import sqlalchemy as sa

from trainwatch_common.testing import free_port
from trainwatch_persister.api import pagination
from trainwatch_persister.database import make_engine
from trainwatch_persister.filters import JobFilters, SortField, SortOrder
from trainwatch_persister.tables import jobs

TOKEN = "bench-viewer-token-0123456789"  # the service refuses tokens under 16 characters


@dataclass(frozen=True)
class Latency:
    scenario: str
    total: int
    samples: list[float]

    def percentile(self, p: float) -> float:
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] * 1000

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples) * 1000


async def deep_cursor(database_url: str, *, filters: JobFilters, where: list[Any], offset: int) -> str:
    """The cursor a client would hold after paging ``offset`` rows in (found in SQL, not by paging)."""
    engine = make_engine(database_url)
    try:
        order = [jobs.c.updated_at.desc(), jobs.c.cluster_id.desc(), jobs.c.uid.desc()]
        statement = sa.select(jobs.c.updated_at, jobs.c.cluster_id, jobs.c.uid).where(*where)
        async with engine.connect() as conn:
            row = (await conn.execute(statement.order_by(*order).offset(offset).limit(1))).one()
    finally:
        await engine.dispose()
    return pagination.encode_cursor(
        sort=SortField.UPDATED_AT, order=SortOrder.DESC, filters=filters, position=(row[0], row[1], row[2])
    )


class ApiProcess:
    def __init__(self, database_url: str, *, pythonpath: str | None = None) -> None:
        self.port = free_port()
        self.database_url = database_url
        self.pythonpath = pythonpath  # another ref's persister source (a same-run baseline)
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ApiProcess:
        env = {
            **os.environ,
            "TRAINWATCH_DATABASE_URL": self.database_url,
            "TRAINWATCH_HTTP_PORT": str(self.port),
            "TRAINWATCH_CONSUME": "false",
            "TRAINWATCH_MIGRATE_ON_START": "false",
            "TRAINWATCH_RETENTION_DAYS": "0",
            "TRAINWATCH_VIEWER_TOKENS": TOKEN,
            "TRAINWATCH_LOG_LEVEL": "WARNING",
        }
        if self.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [self.pythonpath, env.get("PYTHONPATH")]))
        self._process = subprocess.Popen([sys.executable, "-m", "trainwatch_persister"], env=env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"the persister API exited with {self._process.returncode}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the persister API did not become ready")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *_: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(10)


async def measure(
    client: httpx.AsyncClient, scenario: str, params: dict[str, Any], *, requests: int, warmup: int = 10
) -> Latency:
    samples: list[float] = []
    total = 0
    for n in range(warmup + requests):
        started = time.perf_counter()
        response = await client.get("/v1/jobs", params=params)
        elapsed = time.perf_counter() - started
        response.raise_for_status()
        if n >= warmup:
            samples.append(elapsed)
        total = response.json()["total"]
    return Latency(scenario, total, samples)


async def run_scenarios(database_url: str, *, requests: int, jobs_count: int) -> list[Latency]:
    cluster_phase = JobFilters(clusters=("cluster-3",), phases=("Running",))
    deep_offset = jobs_count // 2
    deep_all = await deep_cursor(database_url, filters=JobFilters(), where=[], offset=deep_offset)
    filtered_rows = [jobs.c.cluster_id == "cluster-3", jobs.c.phase == "Running"]
    filtered_offset = jobs_count // 20 * 3 // 10 * 2 // 3  # two thirds into the filtered list
    deep_filtered = await deep_cursor(
        database_url, filters=cluster_phase, where=filtered_rows, offset=filtered_offset
    )
    scenarios: list[tuple[str, dict[str, Any]]] = [
        ("first page, no filter", {}),
        ("first page, cluster + phase", {"cluster": "cluster-3", "phase": "Running"}),
        ("first page, label + terminal", {"label": "team=team-5", "terminal": "false"}),
        ("first page, namespace + kind, by name", {"namespace": "ns-7", "kind": "mpijob", "sort": "name"}),
        ("first page, owner, by created_at", {"owner": "user-42", "sort": "created_at"}),
        ("first page, name search", {"name": "train-4242"}),
        ("first page, created in a 6 h range",
         {"created_after": "2026-10-01T00:00:00Z", "created_before": "2026-10-01T06:00:00Z"}),
        (f"deep page (row {deep_offset:,}), no filter", {"cursor": deep_all}),
        (f"deep page (row {filtered_offset:,}), cluster + phase",
         {"cluster": "cluster-3", "phase": "Running", "cursor": deep_filtered}),
    ]  # fmt: skip
    results = []
    with ApiProcess(database_url) as api:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=api.url, headers=headers, timeout=30) as client:
            for scenario, params in scenarios:
                result = await measure(client, scenario, {"limit": 50, **params}, requests=requests)
                print(f"    {scenario}: p99 {result.percentile(99):.1f} ms", flush=True)
                results.append(result)
                await asyncio.sleep(0)
    return results


# The jobs page's filters (trainwatch_dashboard.presenters.JOB_FILTERS), one at a time, as the
# dashboard sends them: deleted=false unless "show deleted" is ticked; and the combination the
# issue measured (Running and not terminal).
DASHBOARD_SCENARIOS: list[tuple[str, dict[str, Any]]] = [
    ("no filter", {"deleted": "false"}),
    ("cluster", {"cluster": "cluster-3", "deleted": "false"}),
    ("namespace", {"namespace": "ns-7", "deleted": "false"}),
    ("kind", {"kind": "mpijob", "deleted": "false"}),
    ("phase", {"phase": "Running", "deleted": "false"}),
    ("diagnosis", {"diagnosis": "OOMKilled", "deleted": "false"}),
    ("terminal=false (Active)", {"terminal": "false", "deleted": "false"}),
    ("terminal=true (Finished)", {"terminal": "true", "deleted": "false"}),
    ("phase=Running & terminal=false", {"phase": "Running", "terminal": "false", "deleted": "false"}),
    ("terminal=false, deleted included", {"terminal": "false"}),
    ("owner", {"owner": "user-42", "deleted": "false"}),
    ("label", {"label": "team=team-5", "deleted": "false"}),
    ("name", {"name": "train-4242", "deleted": "false"}),
    ("deleted included", {}),
]


async def run_dashboard_scenarios(
    database_url: str, *, requests: int, pythonpath: str | None = None
) -> list[Latency]:
    """Each of the jobs page's filters, first page of 50 with the exact total, over HTTP."""
    results = []
    with ApiProcess(database_url, pythonpath=pythonpath) as api:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=api.url, headers=headers, timeout=30) as client:
            for scenario, params in DASHBOARD_SCENARIOS:
                result = await measure(client, scenario, {"limit": 50, **params}, requests=requests)
                print(
                    f"    {scenario}: total {result.total:,} p99 {result.percentile(99):.1f} ms", flush=True
                )
                results.append(result)
    return results
