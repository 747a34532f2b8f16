"""Watcher replicas as real processes sharing kubesim clusters (issue #6).

Each test starts ``python -m trainwatch_watcher`` processes (lease TTL 2 s) against its own
nats-server and redis-server, runs seeded demo scenarios on in-process kubesim clusters with one
ground-truth log, does something unkind to the replicas or the servers while the jobs change
(kill -9, Redis and NATS restarts, a SIGTERM rolling restart, SIGSTOP past the TTL), and then
reads everything JetStream stored on JOBS and checks it against the truth:

- every true transition is stored exactly once: per uid, the stored (change, phase, sub-phase,
  terminal) list equals the truth's, every Nats-Msg-Id is distinct, no two events share a
  (cluster, uid, sequence) and each event id is the deterministic one;
- per cluster, epochs never go down in stream order: nothing from an owner that lost its lease is
  stored after the next owner's events;
- the Redis checkpoints agree with what was stored (a stale owner overwrote nothing).

Scenarios start only once every cluster is owned and the owner's informers have listed
(``wait_ready``): a job created before its informer's first LIST is first seen in whatever
state it has reached by then, which is correct behaviour but not the truth's step-by-step log.

A stale owner that replays what the new owner already published produces the same event ids,
which JetStream drops whatever their epoch; the pause test therefore also stops the new owners
while the jobs change and resumes the paused replica alone, so that it holds changes nobody has
published yet (without the fences it then stores them under its old epoch and the test fails).
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from replica_harness import (
    TTL,
    Fleet,
    Leases,
    Replica,
    Scenarios,
    add_clusters,
    assert_checkpoints_agree,
    assert_exactly_once,
    observing,
    wait_ready,
)

import kubesim
from trainwatch_common.testing import NatsServer, RedisServer, eventually


@pytest.fixture
def make_fleet(tmp_path: Path) -> Iterator[Callable[[str, str, list[kubesim.Cluster]], Fleet]]:
    fleets: list[Fleet] = []

    def make(nats_url: str, redis_url: str, clusters: list[kubesim.Cluster]) -> Fleet:
        folder = tmp_path / f"kubeconfigs-{len(fleets)}"
        for cluster in clusters:
            cluster.write_kubeconfig(folder / f"{cluster.name}.yaml")  # FolderClusterFeed: <id>.yaml
        log_dir = tmp_path / f"logs-{len(fleets)}"
        log_dir.mkdir()
        fleet = Fleet(nats_url, redis_url, folder, log_dir)
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


# -- the tests ---------------------------------------------------------------------------------
async def test_kill_9_of_a_replica_loses_and_repeats_nothing_and_its_clusters_are_owned_again_in_ttl_plus_2s(
    sim: kubesim.Simulator, nats_url: str, redis_url: str, make_fleet: Callable[..., Fleet]
) -> None:
    """3 processes x 12 clusters settle at 4 each; one gets SIGKILL while every cluster's jobs
    change; its 4 clusters are owned again within TTL + 2 s (6 each), changes made while nobody
    owned them are emitted from its checkpoints, and every true transition is stored once."""
    clusters = await add_clusters(sim, 12)
    cluster_ids = [c.name for c in clusters]
    fleet = make_fleet(nats_url, redis_url, clusters)
    async with observing(nats_url, redis_url, cluster_ids) as (_, leases, health, stream):
        for n in range(3):
            fleet.start(f"w{n}")
        await wait_ready(fleet, leases, health, shares={4})  # 3 processes x 12 clusters: 4 each
        scenarios = Scenarios(clusters, rate=10, concurrency=2, seed=100)
        scenarios.start()
        try:
            victim = fleet.replicas["w1"]
            orphans = set(leases.owned_by(victim.id))
            await eventually(lambda: stream.count(orphans) >= 20, timeout=20, message="the victim streaming")
            victim.signal(signal.SIGKILL)
            killed_at = time.monotonic()
            assert await victim.wait_exit(5) == -signal.SIGKILL
            await eventually(
                lambda: all(leases.owner(c) not in (None, victim.id) for c in orphans),
                timeout=TTL + 4, message="the dead replica's clusters owned again",
            )  # fmt: skip
            reowned_after = time.monotonic() - killed_at
            # And streaming: changes made in its clusters after the kill reach JetStream.
            new_epochs = {c: leases.epoch(c) for c in orphans}
            at_takeover = stream.count(orphans, min_epoch=new_epochs)
            await eventually(
                lambda: stream.count(orphans, min_epoch=new_epochs) >= at_takeover + 10,
                timeout=20, message="the orphans streaming under their new owners",
            )  # fmt: skip
            await wait_ready(fleet, leases, health, shares={6})
        finally:
            await scenarios.finish()
        print(f"kill -9: re-owned after {reowned_after:.2f}s, {len(scenarios.truth)} true transitions")
        assert reowned_after <= TTL + 2
        await assert_exactly_once(stream, scenarios.truth)
        await assert_checkpoints_agree(redis_url, stream)


async def test_a_redis_restart_and_a_nats_restart_lose_and_repeat_nothing(
    sim: kubesim.Simulator,
    nats_process: NatsServer,
    redis_process: RedisServer,
    make_fleet: Callable[..., Fleet],
) -> None:
    """Redis stopped long enough for every lease to go unproven (all clusters stop, changes go
    on), started again (reclaimed with new epochs); then NATS stopped until publishes retry, and
    started again. Nothing lost, nothing stored twice."""
    clusters = await add_clusters(sim, 6)
    cluster_ids = [c.name for c in clusters]
    everything = set(cluster_ids)
    fleet = make_fleet(nats_process.url, redis_process.url, clusters)
    async with observing(nats_process.url, redis_process.url, cluster_ids) as (nc, leases, health, stream):
        for n in range(2):
            fleet.start(f"w{n}")
        await wait_ready(fleet, leases, health, shares={3})
        scenarios = Scenarios(clusters, rate=10, concurrency=2, seed=200)
        scenarios.start()
        try:
            await eventually(lambda: stream.count(everything) >= 30, timeout=20, message="streaming")
            epochs = {c: leases.epoch(c) for c in cluster_ids}

            # Redis down for longer than a lease can be proven: every replica stops every cluster.
            # (In a thread: the servers' start and stop block, and kubesim runs on this loop.)
            await asyncio.to_thread(redis_process.stop)
            at_stop = scenarios.changes(everything)

            async def all_given_up() -> bool:
                owned = [await r.metric("trainwatch_watcher_owned_clusters") for r in fleet.live]
                return owned == [0.0] * len(fleet.live)

            await eventually(all_given_up, timeout=10, message="every cluster stopped while Redis is down")
            await eventually(
                lambda: scenarios.changes(everything) >= at_stop + 20, timeout=20, message="changes meanwhile"
            )
            await asyncio.to_thread(redis_process.start)
            await eventually(
                lambda: all(leases.epoch(c) > epochs[c] for c in cluster_ids),
                timeout=10, message="every cluster reclaimed, with a new epoch",
            )  # fmt: skip
            await wait_ready(fleet, leases, health, shares={3})

            # NATS down: publishing waits (and retries with the same ids); nothing is checkpointed
            # past an unacknowledged event.
            at_redis_back = stream.count(everything)
            await eventually(
                lambda: stream.count(everything) >= at_redis_back + 20, timeout=20, message="streaming"
            )
            await asyncio.to_thread(nats_process.stop)
            at_stop = scenarios.changes(everything)

            async def none_ready() -> bool:
                return all([await r.not_ready() for r in fleet.live])

            await eventually(none_ready, timeout=10, message="the replicas see NATS gone")

            async def publishes_retried() -> bool:
                retries = [await r.metric("trainwatch_watcher_publish_retries_total") for r in fleet.live]
                return sum(retries) > 0

            await eventually(publishes_retried, timeout=10, message="publishes waiting for NATS")
            await eventually(
                lambda: scenarios.changes(everything) >= at_stop + 20, timeout=20, message="changes meanwhile"
            )
            await asyncio.to_thread(nats_process.start)
            await eventually(lambda: nc.is_connected, timeout=15, message="the test's NATS client back")
            await stream.restart()

            async def all_ready() -> bool:
                return all([await r.ready() for r in fleet.live])

            await eventually(all_ready, timeout=15, message="the replicas back on NATS")
        finally:
            await scenarios.finish()
        print(f"Redis and NATS restarts: {len(scenarios.truth)} true transitions")
        await assert_exactly_once(stream, scenarios.truth)
        await assert_checkpoints_agree(redis_process.url, stream)


async def test_a_sigterm_rolling_restart_hands_each_cluster_over_in_under_2s_losing_and_repeating_nothing(
    sim: kubesim.Simulator, nats_url: str, redis_url: str, make_fleet: Callable[..., Fleet]
) -> None:
    """3 processes x 6 clusters; each in turn gets SIGTERM (drains, releases: re-owned by the
    others in under 2 s, exit code 0) and is replaced by a new process (which is handed its share).
    No cluster is ever without an owner for 2 s; every true transition is stored once."""
    clusters = await add_clusters(sim, 6)
    cluster_ids = [c.name for c in clusters]
    fleet = make_fleet(nats_url, redis_url, clusters)
    async with observing(nats_url, redis_url, cluster_ids) as (_, leases, health, stream):
        for n in range(3):
            fleet.start(f"w{n}")
        await wait_ready(fleet, leases, health, shares={2})
        scenarios = Scenarios(clusters, rate=10, concurrency=2, seed=300)
        scenarios.start()
        began = time.monotonic()
        handoffs: list[float] = []

        async def restart(leaving: Replica) -> None:
            owned = set(leases.owned_by(leaving.id))
            at = stream.count(owned)
            await eventually(lambda: stream.count(owned) >= at + 5, timeout=20, message="streaming")
            leaving.signal(signal.SIGTERM)
            sent = time.monotonic()
            await eventually(
                lambda: all(leases.owner(c) not in (None, leaving.id) for c in owned),
                timeout=10, message=f"{leaving.id}'s clusters owned by the others",
            )  # fmt: skip
            handoffs.append(time.monotonic() - sent)
            assert await leaving.wait_exit(10) == 0, leaving.log_tail()
            await wait_ready(fleet, leases, health, shares={3})
            fleet.start(f"{leaving.id}b")  # the restarted replica (a new pod)
            await wait_ready(fleet, leases, health, shares={2})

        try:
            for n in range(3):
                await restart(fleet.replicas[f"w{n}"])
        finally:
            await scenarios.finish()
        gaps = leases.unowned_gaps(since=began)
        print(
            f"rolling restart: SIGTERM -> re-owned {', '.join(f'{h:.2f}' for h in handoffs)} s; "
            f"{len(gaps)} unowned gaps, longest {max((g for _, g in gaps), default=0):.2f} s; "
            f"{len(scenarios.truth)} true transitions"
        )
        assert max(handoffs) < 2.0
        assert [(c, round(g, 2)) for c, g in gaps if g >= 2.0] == []
        await assert_exactly_once(stream, scenarios.truth)
        await assert_checkpoints_agree(redis_url, stream)

        # What an operator sees afterwards (issue 17): every new replica ready, saying so check by
        # check, and every one reporting the same fleet-wide count of unowned clusters: 0.
        async def fleet_reports_none_unowned() -> bool:
            pages = [(await r.http("/metrics")).text for r in fleet.live]
            none = re.compile(r"^trainwatch_watcher_clusters_unowned 0\.0$", re.MULTILINE)
            return all(none.search(page) for page in pages)

        await eventually(fleet_reports_none_unowned, timeout=10, message="no cluster unowned")
        for replica in fleet.live:
            body = (await replica.http("/readyz")).json()
            assert body["ready"] is True, body
            assert set(body["checks"].values()) == {"ok"}, body


async def test_a_replica_paused_past_its_ttl_publishes_nothing_stale_once_resumed(
    sim: kubesim.Simulator, nats_url: str, redis_url: str, make_fleet: Callable[..., Fleet]
) -> None:
    """SIGSTOP a replica past its TTL; once the others own and stream its clusters, SIGSTOP them
    too, let the jobs change, and SIGCONT the first alone: it must stop its clusters without
    storing anything under its old epochs after the new owners' events (nor checkpointing it)."""
    clusters = await add_clusters(sim, 6)
    cluster_ids = [c.name for c in clusters]
    fleet = make_fleet(nats_url, redis_url, clusters)
    async with observing(nats_url, redis_url, cluster_ids) as (_, leases, health, stream):
        for n in range(3):
            fleet.start(f"w{n}")
        await wait_ready(fleet, leases, health, shares={2})
        scenarios = Scenarios(clusters, rate=10, concurrency=2, seed=400)
        scenarios.start()
        paused = fleet.replicas["w0"]
        try:
            orphans = set(leases.owned_by(paused.id))
            old_epochs = {c: leases.epoch(c) for c in orphans}
            await eventually(lambda: stream.count(orphans) >= 10, timeout=20, message="streaming")
            paused.signal(signal.SIGSTOP)
            await eventually(
                lambda: all(leases.owner(c) not in (None, paused.id) for c in orphans),
                timeout=TTL + 4, message="the paused replica's clusters taken over",
            )  # fmt: skip
            new_epochs = {c: leases.epoch(c) for c in orphans}
            assert all(new_epochs[c] > old_epochs[c] for c in orphans)
            at = stream.count(orphans, min_epoch=new_epochs)
            await eventually(
                lambda: stream.count(orphans, min_epoch=new_epochs) >= at + 10,
                timeout=20, message="the new owners streaming",
            )  # fmt: skip
            # Make the paused replica the one that knows most: stop the new owners too, let the
            # jobs change, then resume the paused one alone. Its watch streams hold changes that
            # nobody has published yet: unfenced, it would publish them first, under its old
            # epoch, and the new owners' copies would be the ones JetStream drops.
            others = [r for r in fleet.live if r is not paused]
            for replica in others:
                replica.signal(signal.SIGSTOP)
            at_stop = scenarios.changes(orphans)
            await eventually(
                lambda: scenarios.changes(orphans) >= at_stop + 5,
                timeout=10,
                message="changes nobody publishes",
            )
            paused.signal(signal.SIGCONT)

            async def noticed() -> bool:
                given_up = await paused.metric(
                    "trainwatch_watcher_clusters_given_up_total", reason="deadline"
                )
                return given_up >= len(orphans)

            try:
                await eventually(noticed, timeout=10, message="the resumed replica stopped its clusters")
            finally:
                for replica in others:
                    replica.signal(signal.SIGCONT)
            await wait_ready(fleet, leases, health, shares={2})  # it rejoined and took a share again
        finally:
            await scenarios.finish()
        print(f"SIGSTOP past the TTL: {len(scenarios.truth)} true transitions")
        # Nothing from the paused replica's old epochs was stored after the new owners' first
        # event (assert_exactly_once checks epochs never go down per cluster, in stream order).
        stale = [
            s.seq
            for s in stream.stored()
            if s.event.job.cluster_id in orphans and s.event.epoch < new_epochs[s.event.job.cluster_id]
        ]
        first_new = min(
            s.seq
            for s in stream.stored()
            if s.event.job.cluster_id in orphans and s.event.epoch >= new_epochs[s.event.job.cluster_id]
        )
        assert stale, "the paused replica had published nothing: the test proves nothing"
        assert max(stale) < first_new
        await assert_exactly_once(stream, scenarios.truth)
        await assert_checkpoints_agree(redis_url, stream)


def owner_changes(leases: Leases, since: float) -> int:
    """Clusters handed from one replica to another after ``since`` (a lapse in between counts once)."""
    moves = 0
    for changes in leases.changes.values():
        previous: str | None = None
        for at, holder in changes:
            if holder is None:
                continue
            if previous is not None and holder[0] != previous and at >= since:
                moves += 1
            previous = holder[0]
    return moves


async def test_three_processes_share_sixty_clusters_twenty_each_and_scaling_moves_only_what_it_must(
    sim: kubesim.Simulator, nats_url: str, redis_url: str, make_fleet: Callable[..., Fleet]
) -> None:
    """3 processes x 60 clusters (one kind each, to keep it light) settle at 20 each; a 4th
    process takes 15 (exactly 15 clusters move); two SIGTERMed leave 2 x 30 (exactly their 30
    move). Every cluster is streaming under its owner after each step."""
    clusters = await add_clusters(sim, 60, kinds=[kubesim.PYTORCHJOB])
    cluster_ids = [c.name for c in clusters]
    fleet = make_fleet(nats_url, redis_url, clusters)
    # No failover is timed here: a longer TTL keeps 20 clusters per process from lapsing while a
    # loaded machine starts them all at once.
    fleet.ttl_ms = 6000
    async with observing(nats_url, redis_url, cluster_ids, kinds=1) as (_, leases, health, _stream):
        for n in range(3):
            fleet.start(f"w{n}")
        await wait_ready(fleet, leases, health, shares={20}, timeout=60)

        scaled_up = time.monotonic()
        fleet.start("w3")
        await wait_ready(fleet, leases, health, shares={15}, timeout=30)
        assert owner_changes(leases, scaled_up) == 15  # the minimum: the newcomer's share

        scaled_down = time.monotonic()
        leaving = [fleet.replicas["w0"], fleet.replicas["w1"]]
        must_move = len(leases.owned_by("w0")) + len(leases.owned_by("w1"))
        for replica in leaving:
            replica.signal(signal.SIGTERM)
        for replica in leaving:
            assert await replica.wait_exit(10) == 0, replica.log_tail()
        await wait_ready(fleet, leases, health, shares={30}, timeout=30)
        assert must_move == 30
        assert owner_changes(leases, scaled_down) == must_move  # only the leavers' clusters moved
