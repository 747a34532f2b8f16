"""Watcher replicas on a Sentinel-managed Redis while the master is killed (issue 17, item 4).

Real processes on loopback: nats-server, a Redis master with two replicas, three sentinels
(``redis_sentinel_group``, quorum 2, the master down after 1 s of silence) and two
``python -m trainwatch_watcher`` processes (lease TTL 2 s, and 15 s) finding the master through the
sentinels, owning six kubesim clusters whose jobs change all the time. The master gets SIGKILL;
the sentinels promote a replica and point the other one at it. Measured and checked:

- the failover time: SIGKILL until the sentinels name a new master that accepts writes and has
  a replica in sync again (what a lease acquisition waits for: ``WAIT 1``);
- every cluster's lease held again within TTL + that failover time (+ 1 s for the claim ticks and
  the test's 20 ms poll), and streaming again under its owner;
- never two owners emitting for one cluster: each (cluster, epoch) on the JOBS stream comes from
  one watcher, and per cluster the epochs' emission intervals (``observed_at``) do not overlap;
- nothing lost, nothing stored twice (``assert_exactly_once``: per job, the stored transitions
  are kubesim's truth), and the checkpoints on the new master agree with the stream;
- the Redis nodes' and the sentinels' passwords (both set) appear in no watcher's log.

Two replicas, not one: a lease counts only once a replica confirmed it (``lease_replicas`` 1, the
default under Sentinel), and after the failover only the second replica can confirm anything.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr
from redis.asyncio import Redis
from replica_harness import (
    Fleet,
    Scenarios,
    StreamLog,
    add_clusters,
    assert_checkpoints_agree,
    assert_exactly_once,
    observing,
    wait_ready,
)

import kubesim
from trainwatch_common.settings import ServiceSettings
from trainwatch_common.testing import RedisSentinelGroup, eventually

# The Redis nodes and the sentinels each have a password; neither may appear in any log.
NODE_SECRET = "node-secret-4f1c"
SENTINEL_SECRET = "sentinel-secret-9b2e"
GROUP = {"replicas": 2, "password": NODE_SECRET, "sentinel_password": SENTINEL_SECRET}


def sentinel_settings(group: RedisSentinelGroup) -> dict[str, str]:
    return {
        "TRAINWATCH_REDIS_SENTINELS": group.sentinels,
        "TRAINWATCH_REDIS_PASSWORD": NODE_SECRET,
        "TRAINWATCH_REDIS_SENTINEL_PASSWORD": SENTINEL_SECRET,
    }


@pytest.fixture
def make_fleet(tmp_path: Path) -> Iterator[Callable[..., Fleet]]:
    fleets: list[Fleet] = []

    def make(nats_url: str, group: RedisSentinelGroup, clusters: list[kubesim.Cluster], ttl_ms: int) -> Fleet:
        folder = tmp_path / "kubeconfigs"
        for cluster in clusters:
            cluster.write_kubeconfig(folder / f"{cluster.name}.yaml")
        log_dir = tmp_path / "logs"
        log_dir.mkdir()
        fleet = Fleet(
            nats_url,
            "redis://127.0.0.1:1/0",  # not used: the sentinels name the master
            folder,
            log_dir,
            ttl_ms=ttl_ms,
            extra_env=sentinel_settings(group),
        )
        fleets.append(fleet)
        return fleet

    try:
        yield make
    finally:
        for fleet in fleets:
            fleet.kill_all()


@pytest.fixture
async def sim() -> AsyncIterator[kubesim.Simulator]:
    async with kubesim.Simulator() as simulator:
        yield simulator


async def writable_master_with_a_replica(group: RedisSentinelGroup, old_port: int) -> bool:
    port = await asyncio.to_thread(group.master_port)
    if port is None or port == old_port:
        return False
    client = Redis(port=port, password=NODE_SECRET, socket_timeout=1)
    try:
        info = await client.info("replication")
        await client.set("trainwatch:test:probe", "1")
    finally:
        await client.aclose()
    return any(k.startswith("slave") and v.get("state") == "online" for k, v in info.items())


def overlapping_owners(stream: StreamLog) -> list[str]:
    """Per cluster: two watchers under one epoch, or one epoch emitting after a later one began."""
    spans: dict[tuple[str, int], list[float]] = {}
    watchers: dict[tuple[str, int], set[str | None]] = {}
    for stored in stream.stored():
        event = stored.event
        key = (event.job.cluster_id, event.epoch)
        when = event.observed_at.timestamp()
        span = spans.setdefault(key, [when, when])
        span[0], span[1] = min(span[0], when), max(span[1], when)
        watchers.setdefault(key, set()).add(event.watcher_id)
    problems = [f"{key}: {sorted(map(str, ids))}" for key, ids in watchers.items() if len(ids) > 1]
    for (cluster_id, epoch), (_, last) in spans.items():
        for (other_cluster, later_epoch), (first, _) in spans.items():
            if other_cluster == cluster_id and later_epoch > epoch and first < last:
                problems.append(
                    f"{cluster_id}: epoch {epoch} emitted until {last}, epoch {later_epoch} from {first}"
                )
    return problems


@pytest.mark.parametrize("redis_sentinel_group", [GROUP], indirect=True, ids=["2-replicas"])
@pytest.mark.parametrize("ttl_ms", [2000, 15_000], ids=["ttl-2s", "ttl-15s"])
async def test_kill_9_of_the_redis_master_recovers_every_lease_within_ttl_plus_failover_losing_nothing(
    sim: kubesim.Simulator,
    nats_url: str,
    redis_sentinel_group: RedisSentinelGroup,
    make_fleet: Callable[..., Fleet],
    ttl_ms: int,
) -> None:
    """TTL 2 s: the failover outlasts what a lease can be proven for, so every cluster stops and
    is taken again on the new master under a new epoch. TTL 15 s: a lease is renewed every 5 s and
    proven for 10 s after, which outlasts the failover and the next tick: the owners keep their
    clusters under the same epoch (their leases were replicated)."""
    group = redis_sentinel_group
    ttl = ttl_ms / 1000
    clusters = await add_clusters(sim, 6)
    cluster_ids = [c.name for c in clusters]
    everything = set(cluster_ids)
    fleet = make_fleet(nats_url, group, clusters, ttl_ms)
    redis_target = ServiceSettings(
        redis_sentinels=group.sentinels,
        redis_password=SecretStr(NODE_SECRET),
        redis_sentinel_password=SecretStr(SENTINEL_SECRET),
    )
    async with observing(nats_url, redis_target, cluster_ids) as (_, leases, health, stream):
        for n in range(2):
            fleet.start(f"w{n}")
        await wait_ready(fleet, leases, health, shares={3})
        scenarios = Scenarios(clusters, rate=10, concurrency=2, seed=1700)
        scenarios.start()
        try:
            await eventually(lambda: stream.count(everything) >= 30, timeout=20, message="streaming")
            epochs_before = {c: leases.epoch(c) for c in cluster_ids}
            old_port = group.first_master.port

            await asyncio.to_thread(group.first_master.kill)
            killed_at = time.monotonic()
            await eventually(
                lambda: writable_master_with_a_replica(group, old_port),
                timeout=30, interval=0.05, message="a replica promoted, writable, and followed",
            )  # fmt: skip
            failover = time.monotonic() - killed_at

            live = {r.id for r in fleet.live}
            await eventually(
                lambda: all(leases.owner(c) in live for c in cluster_ids),
                timeout=ttl + failover + 10, interval=0.02, message="every lease held again",
            )  # fmt: skip
            leases_back = time.monotonic() - killed_at
            at_recovery = {c: leases.epoch(c) for c in cluster_ids}
            await wait_ready(fleet, leases, health, shares={3})
            streaming_back = time.monotonic() - killed_at
            counted = stream.count(everything, min_epoch=at_recovery)
            await eventually(
                lambda: stream.count(everything, min_epoch=at_recovery) >= counted + 20,
                timeout=20, message="events flowing after the failover",
            )  # fmt: skip
        finally:
            await scenarios.finish()
        moved = sum(1 for c in cluster_ids if at_recovery[c] != epochs_before[c])
        print(
            f"sentinel failover: new master in {failover:.2f}s, every lease held again after "
            f"{leases_back:.2f}s (TTL {ttl:.0f}s), every cluster streaming after {streaming_back:.2f}s; "
            f"{moved}/6 clusters under a new epoch; {len(scenarios.truth)} true transitions"
        )
        assert leases_back <= ttl + failover + 1.0, fleet.logs()
        # Proven 2/3 TTL after a renewal sent at most TTL/3 before the kill: long enough for the
        # failover and the next claim tick (1 s).
        if failover + 1.5 < ttl / 3:
            assert at_recovery == epochs_before, "a lease replicated before the failover was lost"
        assert overlapping_owners(stream) == []
        await assert_exactly_once(stream, scenarios.truth)
        await assert_checkpoints_agree(redis_target, stream)
        logs = "".join(path.read_text(errors="replace") for path in fleet.log_dir.glob("*.log"))
        assert "sentinel master 'trainwatch' via" in logs  # what the watchers log of their Redis
        assert NODE_SECRET not in logs
        assert SENTINEL_SECRET not in logs
