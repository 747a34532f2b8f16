"""The registry's background tasks: one bad health report never stops the consumer, and a task
that does crash shows in /readyz (named), is logged, and comes back."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from conftest import Bus, Harness
from nats.aio.msg import Msg
from registry_kubeconfigs import VIEWER, create_body

from trainwatch_common import ClusterHealth, cluster_health_subject, wrap_cluster_health
from trainwatch_common.testing import eventually
from trainwatch_registry.health_consumer import HealthConsumer

CONSUMER_TASK = "registry-health-consumer"


async def report(bus: Bus, cluster_id: str, seq: int, **fields: Any) -> None:
    health = ClusterHealth(cluster_id=cluster_id, reachable=True, observed_at=datetime.now(UTC), **fields)
    event = wrap_cluster_health(health, event_id=f"health.{cluster_id}.{seq}")
    await bus.js.publish(cluster_health_subject(cluster_id), event.to_json())


async def health_shown(registry: Harness, cluster_id: str) -> dict[str, Any] | None:
    response = await registry.client.get(f"/v1/clusters/{cluster_id}/health", headers=VIEWER)
    shown: dict[str, Any] | None = response.json()
    return shown


async def test_a_report_the_database_refuses_is_counted_and_the_next_one_is_recorded(
    registry_on: Harness, bus: Bus
) -> None:
    registry = registry_on  # SQLite and PostgreSQL refuse the value differently; both are one bad report
    await registry.create(create_body("gpu-east"))
    await registry.create(create_body("gpu-west"))
    await eventually(lambda: registry.app.state.bus.connected, message="registry connected to NATS")
    # A valid ClusterHealth the database cannot store: the epoch does not fit a 64-bit column.
    await report(bus, "gpu-east", 1, epoch=2**63)
    await report(bus, "gpu-west", 1, owner="watcher-1", epoch=1)
    shown = await eventually(lambda: health_shown(registry, "gpu-west"), message="the next report recorded")
    assert shown["owner"] == "watcher-1"
    assert await health_shown(registry, "gpu-east") is None
    metrics = (await registry.client.get("/metrics")).text
    assert 'trainwatch_registry_health_reports_total{outcome="failed"}' in metrics
    ready = await registry.client.get("/readyz")
    assert ready.status_code == 200, ready.text


async def test_a_crashed_health_consumer_shows_in_readyz_and_is_restarted(
    registry: Harness, bus: Bus, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug that escapes the consumer's own error handling (simulated by making ``handle`` raise
    once) must not leave a registry that looks ready and records nothing."""
    await registry.create(create_body("gpu-east"))
    await eventually(lambda: registry.app.state.bus.connected, message="registry connected to NATS")
    assert (await registry.client.get("/readyz")).status_code == 200
    original = HealthConsumer.handle
    crashed = False

    async def handle_with_a_bug(self: HealthConsumer, messages: list[Msg]) -> None:
        nonlocal crashed
        if not crashed:
            crashed = True
            raise RuntimeError("a bug in the health consumer")
        await original(self, messages)

    monkeypatch.setattr(HealthConsumer, "handle", handle_with_a_bug)
    with caplog.at_level(logging.ERROR):
        await report(bus, "gpu-east", 1, owner="watcher-1", epoch=1)

        async def not_ready() -> dict[str, Any] | None:
            response = await registry.client.get("/readyz")
            body: dict[str, Any] = response.json()
            return body if response.status_code == 503 else None

        body = await eventually(not_ready, message="/readyz reports the crash")
    assert body["tasks"][CONSUMER_TASK] == "restarting"
    assert body["tasks"]["registry-nats"] == "running"
    crash_logs = [r for r in caplog.records if getattr(r, "task", None) == CONSUMER_TASK]
    assert crash_logs, "the crash was not logged with the task's name"
    error = crash_logs[0].exc_info[1] if crash_logs[0].exc_info else None
    assert isinstance(error, RuntimeError)
    assert str(error) == "a bug in the health consumer"

    # Restarted with back-off: ready again, and reports are recorded again.
    await eventually(lambda: _status(registry), timeout=15, message="/readyz ready again after the restart")
    await report(bus, "gpu-east", 2, owner="watcher-2", epoch=2)
    shown = await eventually(
        lambda: _owner_is(registry, "gpu-east", "watcher-2"), timeout=15, message="recorded after restart"
    )
    assert shown


async def _status(registry: Harness) -> bool:
    return (await registry.client.get("/readyz")).status_code == 200


async def _owner_is(registry: Harness, cluster_id: str, owner: str) -> bool:
    shown = await health_shown(registry, cluster_id)
    return shown is not None and shown["owner"] == owner
