"""ClaimLoops on real Redis: balance, scale events, crash, Redis restart, pause, graceful handoff."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import pytest
from redis.asyncio import Redis
from scaling_harness import Fleet, Replica

from trainwatch_common.testing import RedisServer, eventually
from trainwatch_watcher.claims import ClaimLoop, ClaimSettings
from trainwatch_watcher.membership import Membership

CLUSTERS = [f"cluster-{i:02d}" for i in range(60)]
SHORT_TTL_MS = 1000


@pytest.fixture
async def make_fleet(redis_url: str) -> AsyncIterator[Callable[..., Fleet]]:
    fleets: list[Fleet] = []

    def make(ttl_ms: int = SHORT_TTL_MS, url: str = redis_url) -> Fleet:
        fleet = Fleet(url, CLUSTERS, ttl_ms=ttl_ms)
        fleets.append(fleet)
        return fleet

    yield make
    for fleet in fleets:
        await fleet.close()
        assert fleet.ledger.violations == []


async def test_three_replicas_settle_at_twenty_each(make_fleet: Callable[..., Fleet]) -> None:
    fleet = make_fleet()
    for _ in range(3):
        fleet.add()
    await eventually(lambda: fleet.settled(share=20), timeout=10, message="20 clusters each")
    for replica in fleet.live:
        assert replica.loop.metrics.owned_clusters._value.get() == 20
        assert set(replica.loop.owned()) == set(replica.running)


async def test_scaling_to_four_and_back_to_two_moves_no_more_than_needed(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet()
    for _ in range(3):
        fleet.add()
    await eventually(lambda: fleet.settled(share=20), timeout=10, message="20 each")

    mark = len(fleet.ledger.log)
    fleet.add()
    await eventually(lambda: fleet.settled(share=15), timeout=10, message="15 each on 4 replicas")
    assert fleet.ledger.starts_since(mark) <= 1.2 * 15  # the newcomer needs 15, nobody else moves

    mark = len(fleet.ledger.log)
    first, second = fleet.live[:2]
    await asyncio.gather(first.shutdown(), second.shutdown())
    await eventually(lambda: fleet.settled(share=30), timeout=10, message="30 each on 2 replicas")
    assert fleet.ledger.starts_since(mark) <= 1.2 * 30  # the leavers' 30 move, nothing else


async def test_a_crashed_replicas_clusters_are_owned_again_within_ttl_plus_two_seconds(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet()
    for _ in range(3):
        fleet.add()
    await eventually(lambda: fleet.settled(share=20), timeout=10, message="20 each")
    victim = fleet.live[0]
    crashed_at = time.monotonic()
    orphans = await victim.crash()

    def reowned() -> bool:
        owners = fleet.ledger.owners()
        return all(owners.get(c) not in (None, victim.id) for c in orphans)

    await eventually(reowned, timeout=SHORT_TTL_MS / 1000 + 2, message="orphans re-owned within TTL + 2 s")
    assert time.monotonic() - crashed_at <= SHORT_TTL_MS / 1000 + 2
    survivors = fleet.live
    assert all(fleet.ledger.last_epoch[c] > epoch for c, epoch in orphans.items())
    await eventually(lambda: fleet.settled(share=30), timeout=5, message="30 each on the survivors")
    assert all(victim.id not in r.loop.replicas for r in survivors)


async def test_a_redis_restart_stops_every_owner_before_its_ttl_then_reclaims(
    redis_process: RedisServer,
) -> None:
    ttl_ms = 2000
    fleet = Fleet(redis_process.url, CLUSTERS, ttl_ms=ttl_ms)
    try:
        for _ in range(3):
            fleet.add()
        await eventually(lambda: fleet.settled(share=20), timeout=10, message="20 each")
        before = dict(fleet.ledger.last_epoch)

        await asyncio.to_thread(redis_process.stop)
        stopped_at = time.monotonic()

        def all_stopped() -> bool:
            return not fleet.ledger.owners() and not any(r.loop.owned() for r in fleet.live)

        await eventually(all_stopped, timeout=ttl_ms / 1000, message="all stopped within TTL")
        assert time.monotonic() - stopped_at < ttl_ms / 1000
        for replica in fleet.live:
            assert replica.loop.metrics.lease_renew_failures.labels("error")._value.get() >= 1
            assert not replica.loop.redis_ok

        await asyncio.to_thread(redis_process.start)
        await eventually(lambda: fleet.settled(), timeout=10, message="reclaimed after Redis returned")
        assert all(fleet.ledger.last_epoch[c] > before[c] for c in CLUSTERS)
        assert fleet.ledger.violations == []
    finally:
        await fleet.close()


class PausableReplica(Replica):
    """A replica whose claim loop can be frozen between ticks, as SIGSTOP freezes a process."""

    def make_loop(self, *, ttl_ms: int, prefix: str) -> ClaimLoop:
        self.unpaused = asyncio.Event()
        self.unpaused.set()
        replica = self

        class Frozen(ClaimLoop):
            async def tick(self) -> None:
                await replica.unpaused.wait()
                await super().tick()

        return Frozen(
            self.redis,
            replica_id=self.id,
            start_cluster=self.start_cluster,
            stop_cluster=self.stop_cluster,
            ttl_ms=ttl_ms,
            prefix=prefix,
        )


async def test_a_paused_replica_finds_its_leases_gone_and_stops_without_emitting_stale(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet()
    sleeper = fleet.add(PausableReplica)
    assert isinstance(sleeper, PausableReplica)
    fleet.add()
    fleet.add()
    await eventually(lambda: fleet.settled(share=20), timeout=10, message="20 each")
    held_before = dict(sleeper.running)

    sleeper.unpaused.clear()
    others = [r for r in fleet.live if r is not sleeper]

    def taken_over() -> bool:
        return all(any(c in r.running for r in others) for c in held_before)

    await eventually(taken_over, timeout=SHORT_TTL_MS / 1000 + 2, message="others own the sleeper's clusters")
    # Its informers (were they awake) would be fenced: nothing it holds is proven any more.
    assert not any(sleeper.loop.holds(c) for c in held_before)
    assert set(sleeper.running) == set(held_before)  # it has not even noticed yet

    mark = len(fleet.ledger.log)
    sleeper.unpaused.set()
    await eventually(lambda: fleet.settled(share=20), timeout=10, message="back to 20 each")
    mine = [entry for entry in fleet.ledger.log[mark:] if entry[1] == sleeper.id]
    stale_stops = [e for e in mine if e[2] == "stop" and held_before.get(e[3]) == e[4]]
    assert len(stale_stops) == len(held_before)
    first_start = next((i for i, e in enumerate(mine) if e[2] == "start"), len(mine))
    assert all(mine.index(e) < first_start for e in stale_stops)  # stopped before starting anything
    assert sleeper.loop.metrics.clusters_released.labels("deadline")._value.get() == len(held_before)


async def test_graceful_shutdown_hands_clusters_over_in_under_two_seconds(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(ttl_ms=10_000)  # the production TTL: the handoff must not wait for it
    for _ in range(3):
        fleet.add()
    await eventually(lambda: fleet.settled(share=20), timeout=15, message="20 each")
    leaver = fleet.live[0]
    held = set(leaver.running)
    started = time.monotonic()
    await leaver.shutdown()
    assert leaver.running == {}

    def handed_over() -> bool:
        owners = fleet.ledger.owners()
        return all(owners.get(c) not in (None, leaver.id) for c in held)

    await eventually(handed_over, timeout=2, message="handed over within 2 s")
    assert time.monotonic() - started < 2


async def test_epochs_grow_across_owners_as_a_cluster_moves(make_fleet: Callable[..., Fleet]) -> None:
    fleet = make_fleet()
    first = fleet.add()
    await eventually(lambda: fleet.settled(share=60), timeout=10, message="one replica owns all")
    epochs = dict(first.running)
    second = fleet.add()
    await eventually(lambda: fleet.settled(share=30), timeout=10, message="split in two")
    moved = {c: e for c, e in second.running.items()}
    assert all(e > epochs[c] for c, e in moved.items())
    await second.shutdown()
    await eventually(lambda: fleet.settled(share=60), timeout=10, message="back to one")
    assert all(first.running[c] > e for c, e in moved.items())
    assert fleet.ledger.violations == []  # the ledger checked every start: epochs only grow


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_lease_is_proven_for_two_thirds_of_its_ttl_after_the_last_renewal(redis_url: str) -> None:
    redis = Redis.from_url(redis_url)
    clock = FakeClock()
    started: dict[str, int] = {}
    stopped: list[str] = []
    reasons: list[str] = []

    async def start(cluster_id: str, epoch: int) -> None:
        started[cluster_id] = epoch

    async def stop(cluster_id: str, reason: str) -> None:
        stopped.append(cluster_id)
        reasons.append(reason)

    loop = ClaimLoop(
        redis, replica_id="solo", start_cluster=start, stop_cluster=stop, ttl_ms=30_000, clock=clock
    )
    try:
        loop.set_desired(["a", "b"])
        await loop.tick()
        assert loop.owned() == started
        assert set(started) == {"a", "b"}
        epoch = started["a"]
        clock.now += 19.9  # a renewal is due after 10 s; proven until 20 s
        assert loop.holds("a", epoch)
        assert not loop.holds("a", epoch + 1)
        clock.now += 0.2
        assert not loop.holds("a")
        assert loop.next_deadline < clock.now
        await loop.tick()  # the first thing a tick does: stop what is no longer proven
        assert sorted(stopped) == ["a", "b"]
        assert reasons == ["deadline", "deadline"]  # not proven any more: stop now, no draining
        await loop.tick()  # Redis answers: the stale leases are released and taken again, new epoch
        assert started["a"] > epoch
        await loop.release_all()
        assert await loop.leases.holder_of("a") is None
        assert await Membership(redis, replica_id="x").live() == []
    finally:
        await redis.aclose()


class Recorder:
    def __init__(self, *, fail_start: set[str] | None = None) -> None:
        self.running: dict[str, int] = {}
        self.reasons: list[str] = []
        self.fail_start = fail_start or set()

    async def start(self, cluster_id: str, epoch: int) -> None:
        if cluster_id in self.fail_start:
            raise RuntimeError("cannot start")
        self.running[cluster_id] = epoch

    async def stop(self, cluster_id: str, reason: str) -> None:
        self.running.pop(cluster_id, None)
        self.reasons.append(reason)


async def test_a_lease_taken_by_someone_else_stops_the_cluster_at_the_next_renewal(redis_url: str) -> None:
    redis = Redis.from_url(redis_url)
    recorder = Recorder()
    clock = FakeClock()
    loop = ClaimLoop(
        redis, replica_id="me", start_cluster=recorder.start, stop_cluster=recorder.stop, clock=clock
    )
    try:
        loop.set_desired(["a"])
        await loop.tick()
        assert set(recorder.running) == {"a"}
        await redis.delete(loop.leases.lease_key("a"))  # e.g. it expired while this process was frozen
        thief = await loop.leases.acquire("a", "thief")
        assert thief is not None
        assert thief.epoch > recorder.running["a"]
        clock.now += loop.renew_every
        await loop.tick()
        assert recorder.running == {}
        assert loop.metrics.clusters_released.labels("lost")._value.get() == 1
        assert loop.metrics.lease_renew_failures.labels("lost")._value.get() == 1
        assert await loop.leases.holder_of("a") == ("thief", thief.epoch)  # never released by the loser
    finally:
        await redis.aclose()


async def test_a_cluster_that_fails_to_start_is_released_and_tried_again(redis_url: str) -> None:
    redis = Redis.from_url(redis_url)
    recorder = Recorder(fail_start={"a"})
    loop = ClaimLoop(redis, replica_id="me", start_cluster=recorder.start, stop_cluster=recorder.stop)
    try:
        loop.set_desired(["a", "b"])
        await loop.tick()
        assert set(loop.owned()) == {"b"}
        assert await loop.leases.holder_of("a") is None
        recorder.fail_start.clear()
        await loop.tick()
        assert set(recorder.running) == {"a", "b"}
    finally:
        await redis.aclose()


async def test_release_all_while_the_loop_runs_leaves_nothing_held(redis_url: str) -> None:
    redis = Redis.from_url(redis_url)
    recorder = Recorder()
    loop = ClaimLoop(
        redis, replica_id="me", start_cluster=recorder.start, stop_cluster=recorder.stop, ttl_ms=1000
    )
    task = asyncio.create_task(loop.run(), name="claim loop under test")
    try:
        loop.set_desired(CLUSTERS)
        await eventually(lambda: len(recorder.running) == len(CLUSTERS), timeout=5, message="all owned")
        await loop.release_all()
        assert recorder.running == {}
        assert set(recorder.reasons) == {"shutdown"}
        assert loop.owned() == {}
        assert await redis.keys(loop.leases.lease_key("*")) == []
        assert await loop.membership.live() == []
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await redis.aclose()


async def test_a_rolling_restart_of_every_replica_moves_each_handoff_in_under_two_seconds(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(ttl_ms=10_000)
    originals = [fleet.add() for _ in range(3)]
    await eventually(lambda: fleet.settled(share=20), timeout=15, message="20 each")
    for old in originals:  # as a Deployment's rolling update does it: one SIGTERM, one new pod
        held = set(old.running)
        started = time.monotonic()
        await old.shutdown()

        def handed_over(held: set[str] = held) -> bool:
            owners = fleet.ledger.owners()
            return all(c in owners for c in held)

        await eventually(handed_over, timeout=2, message=f"{old.id}'s clusters handed over")
        assert time.monotonic() - started < 2
        fleet.add()
        await eventually(lambda: fleet.settled(share=20), timeout=5, message="20 each again")
    assert {r.id for r in fleet.live}.isdisjoint({r.id for r in originals})


def test_claim_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWATCH_LEASE_TTL_MS", "2000")
    monkeypatch.setenv("TRAINWATCH_CLAIM_TICK", "0.25")
    settings = ClaimSettings()
    assert (settings.lease_ttl_ms, settings.claim_tick, settings.redis_prefix) == (2000, 0.25, "trainwatch")
    monkeypatch.setenv("TRAINWATCH_LEASE_TTL_MS", "10")
    with pytest.raises(ValueError, match="greater than or equal"):
        ClaimSettings()


async def test_leases_stay_proven_while_a_long_acquisition_starts_many_clusters(redis_url: str) -> None:
    """One replica taking 40 clusters whose starts take 1 s each (by the loop's clock): the first
    leases fall due long before the last cluster is started, and must be renewed meanwhile."""
    redis = Redis.from_url(redis_url)
    clock = FakeClock()
    recorder = Recorder()

    async def slow_start(cluster_id: str, epoch: int) -> None:
        clock.now += 1.0  # e.g. an event loop busy opening the watches of the clusters before
        await recorder.start(cluster_id, epoch)

    loop = ClaimLoop(
        redis, replica_id="solo", start_cluster=slow_start, stop_cluster=recorder.stop,
        ttl_ms=30_000, clock=clock,
    )  # fmt: skip
    clusters = [f"c{i:02d}" for i in range(40)]
    try:
        loop.set_desired(clusters)
        await loop.tick()  # 40 s by the loop's clock: the first lease was due after 10 s
        assert sorted(recorder.running) == clusters
        assert recorder.reasons == []  # nothing stopped for a lapsed lease
        assert all(loop.holds(c) for c in clusters)
        assert loop.metrics.lease_renew_failures.labels("error")._value.get() == 0
    finally:
        await loop.release_all()
        await redis.aclose()
