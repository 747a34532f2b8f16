"""The registry's background tasks: one bad health report never stops the consumer, and a task
that does crash shows in /readyz (named), is logged, and comes back."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from conftest import Bus, Harness
from registry_kubeconfigs import VIEWER, create_body

from trainwatch_common import ClusterHealth, cluster_health_subject, wrap_cluster_health
from trainwatch_common.testing import eventually


async def report(bus: Bus, cluster_id: str, seq: int, **fields: Any) -> None:
    health = ClusterHealth(cluster_id=cluster_id, reachable=True, observed_at=datetime.now(UTC), **fields)
    event = wrap_cluster_health(health, event_id=f"health.{cluster_id}.{seq}")
    await bus.js.publish(cluster_health_subject(cluster_id), event.to_json())


async def health_shown(registry: Harness, cluster_id: str) -> dict[str, Any] | None:
    response = await registry.client.get(f"/v1/clusters/{cluster_id}/health", headers=VIEWER)
    shown: dict[str, Any] | None = response.json()
    return shown


async def test_a_report_the_database_refuses_is_counted_and_the_next_one_is_recorded(
    registry: Harness, bus: Bus
) -> None:
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
