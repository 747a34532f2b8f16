"""trainwatch_watcher_clusters_unowned: registered clusters nobody holds a lease on (issue 17),
read from real Redis leases, by a running watcher and by the reader alone."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from redis.asyncio import Redis
from watcher_harness import FakeRegistry, RunningWatcher

import kubesim
from trainwatch_common.leases import LeaseManager
from trainwatch_common.testing import eventually
from trainwatch_watcher.membership import Membership
from trainwatch_watcher.unowned import UnownedClusters

UNOWNED = "trainwatch_watcher_clusters_unowned"
OWNED = "trainwatch_watcher_owned_clusters"


def _reader(redis: Redis, desired: set[str] | None, registry: CollectorRegistry) -> UnownedClusters:
    leases = LeaseManager(redis, prefix="unowned-test")
    return UnownedClusters(
        redis, desired=lambda: desired, lease_key=leases.lease_key, interval=1.0, registry=registry
    )


async def test_counts_desired_clusters_without_a_lease(redis: Redis) -> None:
    leases = LeaseManager(redis, prefix="unowned-test")
    await redis.delete(*(leases.lease_key(c) for c in ("a", "b", "c", "d")))
    assert await leases.acquire("a", "replica-1") is not None
    assert await leases.acquire("b", "replica-2") is not None
    assert await leases.acquire("d", "replica-1") is not None  # held, but not registered: not counted
    registry = CollectorRegistry()
    reader = _reader(redis, {"a", "b", "c"}, registry)
    assert await reader.refresh() == 1
    assert registry.get_sample_value(UNOWNED) == 1
    await redis.delete(leases.lease_key("b"))  # its holder died and the lease expired
    assert await reader.refresh() == 2
    assert registry.get_sample_value(UNOWNED) == 2


async def test_absent_until_the_desired_set_is_known(redis: Redis) -> None:
    registry = CollectorRegistry()
    assert await _reader(redis, None, registry).refresh() is None
    assert registry.get_sample_value(UNOWNED) is None
    assert await _reader(redis, set(), registry).refresh() == 0


async def test_redis_down_reports_nothing() -> None:
    registry = CollectorRegistry()
    unreachable = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    try:
        assert await _reader(unreachable, {"a"}, registry).refresh() is None
    finally:
        await unreachable.aclose()
    assert registry.get_sample_value(UNOWNED) is None


async def test_a_running_watcher_reports_what_no_replica_holds(
    sim: kubesim.Simulator, registry: FakeRegistry, watcher: RunningWatcher, redis: Redis
) -> None:
    """A second replica that heartbeats but never claims (hung) leaves its share unowned; once it
    leaves, the watcher takes everything and the count falls to 0."""
    prefix = watcher.settings.redis_prefix
    hung = Membership(redis, replica_id="hung-replica", prefix=prefix, ttl_ms=60_000)
    await hung.heartbeat()
    try:
        for name in ("alpha", "beta"):
            await registry.add(await sim.add_cluster(name))
        app = await watcher.start()
        metrics = app.metrics.registry
        await eventually(lambda: metrics.get_sample_value(OWNED) == 1, timeout=15)
        await eventually(lambda: metrics.get_sample_value(UNOWNED) == 1, timeout=15)
    finally:
        await hung.leave()
    await eventually(lambda: metrics.get_sample_value(OWNED) == 2, timeout=15)
    await eventually(lambda: metrics.get_sample_value(UNOWNED) == 0, timeout=15)
