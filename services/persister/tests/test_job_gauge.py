"""trainwatch_persister_jobs{cluster, kind, phase}: how many jobs are in each phase, per cluster
and kind, read from the stored current state and served on /metrics."""

from __future__ import annotations

import httpx
from persister_factories import jetstream, make_event, publish, running_persister

from trainwatch_common import Phase
from trainwatch_common.testing import eventually


def _sample(text: str, cluster: str, kind: str, phase: str) -> float | None:
    prefix = f'trainwatch_persister_jobs{{cluster="{cluster}",kind="{kind}",phase="{phase}"}} '
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    return None


async def test_jobs_by_phase_gauge(sqlite_url: str, nats_url: str) -> None:
    async with (
        jetstream(nats_url) as js,
        running_persister(database_url=sqlite_url, nats_url=nats_url, jobs_gauge_interval_seconds=0.1) as app,
    ):
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://persister")
        try:
            for uid in ("a", "b", "c"):
                await publish(js, make_event(cluster="alpha", uid=uid, phase=Phase.RUNNING))
            await publish(js, make_event(cluster="beta", uid="d", kind_key="mpijob", phase=Phase.PENDING))

            async def metrics() -> str:
                return (await client.get("/metrics")).text

            async def counted() -> bool:
                text = await metrics()
                return (
                    _sample(text, "alpha", "pytorchjob", "Running") == 3
                    and _sample(text, "beta", "mpijob", "Pending") == 1
                )

            await eventually(counted, timeout=20, message="3 running in alpha, 1 pending in beta")

            await publish(js, make_event(cluster="alpha", uid="a", sequence=1, phase=Phase.SUCCEEDED))
            await publish(
                js, make_event(cluster="beta", uid="d", kind_key="mpijob", sequence=1, phase=Phase.RUNNING)
            )

            async def moved() -> bool:
                text = await metrics()
                return (
                    _sample(text, "alpha", "pytorchjob", "Running") == 2
                    and _sample(text, "alpha", "pytorchjob", "Succeeded") == 1
                    and _sample(text, "beta", "mpijob", "Running") == 1
                    and _sample(text, "beta", "mpijob", "Pending") is None  # no such jobs left: absent
                )

            await eventually(moved, timeout=20, message="the gauge follows the transitions")
            await eventually(
                lambda: _pending_zero(client), timeout=20, message="trainwatch_persister_consumer_pending 0"
            )
        finally:
            await client.aclose()


async def _pending_zero(client: httpx.AsyncClient) -> bool:
    text = (await client.get("/metrics")).text
    return "trainwatch_persister_consumer_pending 0.0" in text.splitlines()
