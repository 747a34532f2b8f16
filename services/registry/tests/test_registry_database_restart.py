"""PostgreSQL restarts under a running registry (issue 17): the work waits, nothing is dropped.

A graceful restart (SIGTERM, then start on the same port) drops every pooled connection. The
registry must keep serving once the server is back: a change made just before is published, a
health report sent during the outage is recorded, the API answers 503 (not 500) while the
database is away, and the first request after the restart succeeds (the pool pre-pings).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import nats
from conftest import make_settings, running_registry
from registry_kubeconfigs import ADMIN, VIEWER, create_body

from trainwatch_common import ClusterHealth, cluster_health_subject, wrap_cluster_health
from trainwatch_common.sql_engine import async_url
from trainwatch_common.testing import PostgresServer, eventually


async def test_postgres_restart_only_delays_the_registry(
    postgres_process: PostgresServer, nats_url: str, redis_url: str, encryption_key: str
) -> None:
    settings = make_settings(
        database_url=async_url(postgres_process.url),
        nats_url=nats_url,
        encryption_key=encryption_key,
        redis_url=redis_url,
    )
    client = await nats.connect(nats_url)
    try:
        async with running_registry(settings) as registry:
            await eventually(lambda: registry.app.state.bus.connected, message="registry on NATS")
            await registry.create(create_body("before"))
            await eventually(_published(registry, 1), message="the first change published")

            postgres_process.stop()  # graceful: every pooled connection is closed by the server
            health = ClusterHealth(
                cluster_id="before", reachable=True, owner="watcher-1", epoch=1, observed_at=datetime.now(UTC)
            )
            event = wrap_cluster_health(health, event_id="health.before.1")
            await client.jetstream().publish(cluster_health_subject("before"), event.to_json())
            await asyncio.sleep(1.0)  # the health consumer fetches it and meets the database away
            during = await registry.client.get("/v1/clusters", headers=VIEWER)
            assert during.status_code == 503, during.text
            not_ready = await registry.client.get("/readyz")
            assert not_ready.status_code == 503
            # Says which dependency and why, and nothing of its DSN (issue 17).
            reason = not_ready.json()["checks"]["database"]
            assert reason.startswith(("failing (", "no answer within")), not_ready.text
            assert not_ready.json()["checks"]["nats"] == "ok", not_ready.text
            assert postgres_process.url.split("@")[0] not in not_ready.text

            postgres_process.start()
            restarted = time.monotonic()
            first = await registry.client.get("/v1/clusters", headers=VIEWER)
            assert first.status_code == 200, f"first request after the restart: {first.text}"
            created = await registry.client.post("/v1/clusters", json=create_body("after"), headers=ADMIN)
            assert created.status_code == 201, created.text
            await eventually(_published(registry, 2), timeout=30, message="the change after the restart")

            async def recorded() -> bool:
                answer = await registry.client.get("/v1/clusters/before/health", headers=VIEWER)
                return bool(answer.status_code == 200 and answer.json() and answer.json()["owner"])

            await eventually(recorded, timeout=30, message="the report sent during the outage recorded")
            delay = time.monotonic() - restarted
            print(f"registry: work resumed {delay:.2f}s after PostgreSQL was back")
            # Not the consumer's 30 s ack wait: the report was held and retried, not given up.
            assert delay < 10, f"the health report waited {delay:.1f}s"
            ready = await registry.client.get("/readyz")
            assert ready.status_code == 200
            assert set(ready.json()["checks"].values()) == {"ok"}, ready.text
            tasks = registry.app.state.tasks
            assert {name: tasks.crashes(name) for name in tasks.states()} == dict.fromkeys(
                tasks.states(), 0
            ), "no background task crashed"
    finally:
        await client.close()


def _published(registry, count: int):  # type: ignore[no-untyped-def]
    async def check() -> bool:
        rows = await registry.outbox_rows()
        return len(rows) >= count and all(row.sent_at is not None for row in rows)

    return check


async def test_registry_waits_for_postgres_at_start(
    postgres_process: PostgresServer, nats_url: str, redis_url: str, encryption_key: str
) -> None:
    """Compose and Kubernetes start everything at once: a registry whose database is not up yet
    waits for it (migrations retried with back-off) instead of exiting."""
    settings = make_settings(
        database_url=async_url(postgres_process.url),
        nats_url=nats_url,
        encryption_key=encryption_key,
        redis_url=redis_url,
    )
    postgres_process.stop()

    def start_later() -> None:
        time.sleep(1.5)
        postgres_process.start()

    starting = asyncio.get_running_loop().run_in_executor(None, start_later)
    async with running_registry(settings) as registry:
        await starting
        await registry.create(create_body("late"))
        assert (await registry.client.get("/v1/clusters", headers=VIEWER)).status_code == 200
