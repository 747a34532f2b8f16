"""Leases on a Sentinel-managed Redis when a failover loses the master's last writes (issue 17, 4).

Real processes: a master, two replicas and three sentinels on loopback (``redis_sentinel_group``).
The replicas are cut off from the master (each pointed at a port nobody listens on, as a network
partition would), so whatever the master accepts from then on exists nowhere else; then the
master gets SIGKILL and the sentinels promote a replica that never saw those writes.

Two ``ClaimLoop`` replicas are ticked by hand, so the test decides who acts when. "Emitting" is
what the informers' publish path checks before every publish (``fence`` -> ``ClaimLoop.holds``,
``LeaseNotProven`` otherwise): the test asserts that no two replicas ever pass that check for one
cluster at once, and that the epoch a cluster is started with after the failover is greater than
every epoch any replica started it with before.

Why it needs ``lease_replicas`` (WAIT): without it, the partitioned master hands ``w1`` the lease
of ``c1`` with the next epoch; the failover loses both; ``w2`` then acquires ``c1`` on the new
master with the *same* epoch while ``w1`` still proves its lost lease for 2/3 of the TTL.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from redis.asyncio import Redis

from trainwatch_common.leases import replica_of
from trainwatch_common.redis_connection import redis_client
from trainwatch_common.settings import ServiceSettings
from trainwatch_common.testing import RedisSentinelGroup, eventually, free_port
from trainwatch_watcher.claims import ClaimLoop, ClaimSettings

TTL_MS = 6000  # lease proven for 4 s: long enough that the failover happens inside it


@dataclass
class Starts:
    """Every (cluster, epoch) a replica started, i.e. began to publish under."""

    by_replica: dict[str, list[tuple[str, int]]] = field(default_factory=dict)

    def epochs(self, cluster_id: str) -> list[int]:
        return [e for starts in self.by_replica.values() for c, e in starts if c == cluster_id]


def make_loop(
    group: RedisSentinelGroup, replica_id: str, starts: Starts, lease_replicas: int
) -> tuple[ClaimLoop, Redis]:
    settings = ServiceSettings(redis_sentinels=group.sentinels)
    redis = redis_client(settings, max_connections=4, socket_timeout=1.0, socket_connect_timeout=1.0)
    running: dict[str, int] = {}
    starts.by_replica[replica_id] = []

    async def start(cluster_id: str, epoch: int) -> None:
        running[cluster_id] = epoch
        starts.by_replica[replica_id].append((cluster_id, epoch))

    async def stop(cluster_id: str, reason: str) -> None:
        running.pop(cluster_id, None)

    loop = ClaimLoop(
        redis, replica_id=replica_id, start_cluster=start, stop_cluster=stop,
        ttl_ms=TTL_MS, lease_replicas=lease_replicas,
    )  # fmt: skip
    return loop, redis


async def partition_replicas(group: RedisSentinelGroup) -> None:
    """Each replica replicates from a port nobody listens on: it keeps its data, gets nothing new."""
    nowhere = free_port()
    for replica in group.replicas:
        client = Redis(port=replica.port)
        try:
            await client.replicaof("127.0.0.1", nowhere)
        finally:
            await client.aclose()


async def promoted_with_a_replica(group: RedisSentinelGroup, old_port: int) -> int:
    """The sentinels' new master, once it accepts writes and a replica follows it again."""

    async def ready() -> int | None:
        port = await asyncio.to_thread(group.master_port)
        if port is None or port == old_port:
            return None
        client = Redis(port=port, socket_timeout=1)
        try:
            info = await client.info("replication")
        finally:
            await client.aclose()
        online = [v for k, v in info.items() if k.startswith("slave") and v.get("state") == "online"]
        return port if info["role"] == "master" and online else None

    port: int = await eventually(ready, timeout=30, interval=0.1, message="a replica promoted and followed")
    return port


@pytest.fixture
async def loops(
    redis_sentinel_group: RedisSentinelGroup, lease_replicas: int
) -> AsyncIterator[tuple[ClaimLoop, ClaimLoop, Starts]]:
    starts = Starts()
    w1, redis1 = make_loop(redis_sentinel_group, "w1", starts, lease_replicas)
    w2, redis2 = make_loop(redis_sentinel_group, "w2", starts, lease_replicas)
    try:
        yield w1, w2, starts
    finally:
        await redis1.aclose()
        await redis2.aclose()


@pytest.fixture
def lease_replicas() -> int:
    return 1  # what the watcher takes with TRAINWATCH_REDIS_SENTINELS (ClaimSettings)


@pytest.mark.parametrize("redis_sentinel_group", [2], indirect=True)
async def test_a_failover_that_loses_the_last_writes_gives_no_two_owners_and_no_epoch_twice(
    redis_sentinel_group: RedisSentinelGroup, loops: tuple[ClaimLoop, ClaimLoop, Starts]
) -> None:
    group = redis_sentinel_group
    w1, w2, starts = loops

    # Before the partition: w1 holds c0, replicated.
    w1.set_desired(["c0"])
    await w1.tick()
    assert w1.holds("c0")
    [(_, c0_epoch)] = starts.by_replica["w1"]

    # The replicas are cut off; w1 now also wants c1. The master takes the acquisition, but no
    # replica confirms it: w1 must not count it (it would be lost with the master).
    await partition_replicas(group)
    old_port = group.first_master.port
    master = Redis(port=old_port)
    w1.set_desired(["c0", "c1"])
    try:
        await w1.tick()
        assert int(await master.get(w1.leases.epoch_key("c1")) or 0) >= 1, "the master took an acquisition"
    finally:
        await master.aclose()
    lost_epochs = {"c1": starts.epochs("c1")}

    # The master dies with that write; the sentinels promote a replica that never saw it.
    await asyncio.to_thread(group.first_master.kill)
    await promoted_with_a_replica(group, old_port)

    # w2 takes what is free on the new master, while w1 still has the state it had.
    w2.set_desired(["c0", "c1"])
    await eventually(lambda: _tick_until_held(w2, "c1"), timeout=15, message="w2 holds c1")
    for cluster_id in ("c0", "c1"):
        emitting = [w.replica_id for w in (w1, w2) if w.holds(cluster_id)]
        assert len(emitting) <= 1, f"{cluster_id}: {emitting} all pass the publish fence at once"
    c1_epoch = w2.owned()["c1"]
    assert all(c1_epoch > used for used in lost_epochs["c1"]), (
        f"c1 started at epoch {c1_epoch} after the failover, but a replica used {lost_epochs['c1']} before"
    )

    holder = await w2.leases.holder_of("c0")
    assert holder is not None
    assert (replica_of(holder[0]), holder[1]) == ("w1", c0_epoch), "c0's lease was replicated"


async def _tick_until_held(loop: ClaimLoop, cluster_id: str) -> bool:
    await loop.tick()
    return loop.holds(cluster_id)


def test_leases_wait_for_one_replica_under_sentinel_and_for_none_with_a_url() -> None:
    assert ClaimSettings(redis_sentinels="127.0.0.1:26379").lease_replicas_required() == 1
    assert ClaimSettings(redis_url="redis://r:6379/0").lease_replicas_required() == 0
    assert ClaimSettings(redis_sentinels="127.0.0.1:26379", lease_replicas=2).lease_replicas_required() == 2


async def test_a_redis_without_the_required_replica_gives_no_lease_and_says_why(redis_url: str) -> None:
    """One Redis, no replica, ``lease_replicas`` 1: nothing is acquired or started, /readyz's
    ``redis_ok`` is false, and the unconfirmed acquisitions are counted; the lease is given back."""
    redis = Redis.from_url(redis_url)
    started: list[str] = []

    async def start(cluster_id: str, epoch: int) -> None:
        started.append(cluster_id)

    async def stop(cluster_id: str, reason: str) -> None:
        pass

    loop = ClaimLoop(
        redis, replica_id="w1", start_cluster=start, stop_cluster=stop, ttl_ms=3000, lease_replicas=1
    )
    try:
        loop.set_desired(["c1"])
        await loop.tick()
        assert started == []
        assert loop.owned() == {}
        assert not loop.redis_ok
        assert loop.metrics.lease_unconfirmed.labels("acquire")._value.get() == 1
        assert await loop.leases.holder_of("c1") is None
    finally:
        await redis.aclose()
