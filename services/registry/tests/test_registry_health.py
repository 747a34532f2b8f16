"""The registry consumes the watchers' health reports and shows the last one and its owner."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from conftest import Bus, Harness
from registry_kubeconfigs import VIEWER, create_body

from trainwatch_common import ClusterHealth, cluster_health_subject, wrap_cluster_health
from trainwatch_common.testing import eventually


async def _report(bus: Bus, health: ClusterHealth, seq: int) -> None:
    event = wrap_cluster_health(health, event_id=f"health.{health.cluster_id}.{seq}")
    await bus.js.publish(cluster_health_subject(health.cluster_id), event.to_json())


async def test_last_health_and_owner_are_shown(registry: Harness, bus: Bus) -> None:
    await registry.create(create_body("gpu-east"))
    await eventually(lambda: registry.app.state.bus.connected, message="registry connected to NATS")
    now = datetime.now(UTC)
    first = ClusterHealth(
        cluster_id="gpu-east", reachable=True, owner="watcher-1", epoch=3, kinds_served=["pytorchjob"],
        informers_running=2, observed_at=now,
    )  # fmt: skip
    await _report(bus, first, 1)

    async def shown() -> dict | None:  # type: ignore[type-arg]
        cluster = (await registry.client.get("/v1/clusters/gpu-east", headers=VIEWER)).json()
        return cluster["health"]

    health = await eventually(shown, message="health shown")
    assert health["owner"] == "watcher-1"
    assert health["reachable"] is True
    assert health["epoch"] == 3
    assert health["kinds_served"] == ["pytorchjob"]

    # A newer report from a new owner replaces it; a late one from the old owner does not.
    await bus.js.publish("clusters.v1.health.gpu-east", b"{not a cloud event")  # dropped, counted
    new_owner = ClusterHealth(
        cluster_id="gpu-east", reachable=False, owner="watcher-2", epoch=4, last_error="connection refused",
        observed_at=now + timedelta(seconds=5),
    )  # fmt: skip
    late_old_owner = ClusterHealth(
        cluster_id="gpu-east",
        reachable=True,
        owner="watcher-1",
        epoch=3,
        observed_at=now + timedelta(seconds=9),
    )
    await _report(bus, new_owner, 2)
    await _report(bus, late_old_owner, 3)

    async def moved() -> bool:
        response = await registry.client.get("/v1/clusters/gpu-east/health", headers=VIEWER)
        return bool(response.json() and response.json()["owner"] == "watcher-2")

    await eventually(moved, message="new owner's report shown")
    listing = (await registry.client.get("/v1/clusters", headers=VIEWER)).json()
    assert listing["data"][0]["health"]["last_error"] == "connection refused"
    assert listing["data"][0]["health"]["reachable"] is False
    metrics = (await registry.client.get("/metrics")).text
    await eventually(lambda: _stale_counted(registry), message="the stale report was counted and ignored")
    assert "trainwatch_registry_health_reports_total" in metrics


async def _stale_counted(registry: Harness) -> bool:
    text = (await registry.client.get("/metrics")).text
    return 'trainwatch_registry_health_reports_total{outcome="stale"}' in text


async def test_no_health_before_any_report(registry: Harness) -> None:
    await registry.create(create_body("quiet"))
    assert (await registry.client.get("/v1/clusters/quiet/health", headers=VIEWER)).json() is None
