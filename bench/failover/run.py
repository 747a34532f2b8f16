"""Benchmark: how evenly watcher replicas share clusters, how many move per scale event, and how
fast a dead replica's clusters are owned again.

    uv run python bench/failover/run.py [--clusters 1000] [--trials 10] [--json out.json] [--quick]

Three parts, all on loopback:

1. **Planner (pure).** ``sharding.assign`` / ``sharding.converge`` for 3, 5 and 10 replicas x
   1,000 clusters: balance on a fresh start, and clusters moved by a scale event (+1 and -1
   replica) against the minimum possible. Baselines measured in the same run: plain rendezvous
   hashing (argmax, no quotas), and rendezvous with bounded load recomputed from scratch
   (stateless), which shows the cascade that the sticky plan avoids.
2. **ClaimLoops on a real Redis.** The same configurations with real ``ClaimLoop`` instances
   (in this process, one Redis client each, default TTL 10 s): balance once settled, clusters
   started per scale event (each start is one acquisition, i.e. one move) against the minimum,
   and time to settle.
3. **Failover.** 3 replicas x 60 clusters; one replica stops abruptly (its loop is cancelled, it
   releases nothing, as with kill -9); time until every one of its clusters is owned again, p50
   and max over ``--trials`` trials, at TTL 10 s and at TTL 2 s. Trials run concurrently, each
   under its own key prefix, each crashing at a random phase of the renewal cycle.
4. **Real watcher processes, kill -9.** Each trial is a small fleet of its own: two
   ``python -m trainwatch_watcher`` processes sharing two kubesim clusters (one each), under
   their own key prefix, on one nats-server and redis-server. Once both clusters stream, one
   process gets SIGKILL at a random phase of its renewal cycle and a job is created in its
   cluster right after. Measured from the kill: *re-owned* (the survivor holds the lease, read
   from Redis every 10 ms) and *re-owned and streaming* (that job's ``created`` event is on
   JetStream). ``--trials`` fleets run concurrently, at TTL 10 s and 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import nats
from nats.js.api import DeliverPolicy
from redis.asyncio import Redis

import kubesim
from trainwatch_common.events.envelope import parse_job_event
from trainwatch_common.leases import LeaseManager
from trainwatch_common.streams import ensure_streams
from trainwatch_common.testing import NatsServer, RedisServer
from trainwatch_watcher import sharding
from trainwatch_watcher.claims import ClaimLoop


# -- part 1: the pure planner -----------------------------------------------------------------
def names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{i:04d}" for i in range(n)]


def balance(shares: list[int]) -> dict[str, float]:
    low, high = min(shares), max(shares)
    return {
        "largest": high,
        "smallest": low,
        "ratio": round(high / low, 4) if low else float("inf"),
        "spread": high - low,
    }


def shares_of(assignment: dict[str, str], replicas: list[str]) -> list[int]:
    counts = Counter(assignment.values())
    return [counts.get(r, 0) for r in replicas]


def minimum_moves(before: dict[str, str], replicas_after: list[str]) -> int:
    """The fewest owner changes reaching a balanced assignment (every share floor or ceil)."""
    n = len(before)
    counts = sorted((sum(1 for o in before.values() if o == r) for r in replicas_after), reverse=True)
    base, extra = divmod(n, len(replicas_after))
    targets = [base + 1] * extra + [base] * (len(replicas_after) - extra)
    return n - sum(min(have, target) for have, target in zip(counts, targets, strict=True))


def plain_hrw(replicas: list[str], clusters: list[str]) -> dict[str, str]:
    return {c: max(replicas, key=lambda r: sharding.score(r, c)) for c in clusters}


def bounded_hrw(replicas: list[str], clusters: list[str]) -> dict[str, str]:
    """Stateless bounded-load rendezvous: clusters in a fixed order take their best replica with room."""
    room = {r: sharding.quota(r, replicas, len(clusters)) for r in replicas}
    assignment = {}
    for c in sorted(clusters, key=lambda c: sharding.score("order", c)):
        for r in sorted(replicas, key=lambda r: -sharding.score(r, c)):
            if room[r] > 0:
                room[r] -= 1
                assignment[c] = r
                break
    return assignment


def planner_part(n_clusters: int) -> list[dict[str, Any]]:
    clusters = names("cluster", n_clusters)
    rows = []
    for r in (3, 5, 10):
        replicas = names("watcher", r)
        fresh = sharding.assign(replicas, clusters)
        row: dict[str, Any] = {
            "replicas": r,
            "sticky_plan": balance(shares_of(fresh, replicas)),
            "baseline_plain_hrw": balance(shares_of(plain_hrw(replicas, clusters), replicas)),
        }
        for label, after in (("up", names("watcher", r + 1)), ("down", replicas[1:])):
            holdings: dict[str, set[str]] = {x: set() for x in after}
            for c, owner in fresh.items():
                if owner in holdings:
                    holdings[owner].add(c)
            end = sharding.converge(holdings, clusters)
            minimum = minimum_moves(fresh, after)
            moved = sum(1 for c in clusters if fresh[c] != end[c])
            before_b, after_b = bounded_hrw(replicas, clusters), bounded_hrw(after, clusters)
            stateless = sum(1 for c in clusters if before_b[c] != after_b[c])
            hrw_before, hrw_after = plain_hrw(replicas, clusters), plain_hrw(after, clusters)
            row[f"scale_{label}"] = {
                "minimum": minimum,
                "sticky_plan_moved": moved,
                "sticky_vs_minimum": round(moved / minimum, 3),
                "sticky_spread_after": balance(shares_of(end, after))["spread"],
                "baseline_stateless_bounded_moved": stateless,
                "baseline_plain_hrw_moved": sum(1 for c in clusters if hrw_before[c] != hrw_after[c]),
            }
        rows.append(row)
    return rows


# -- part 2 and 3: ClaimLoops on a real Redis ---------------------------------------------------
STEADY_WINDOW_S = 5.0


class Replica:
    def __init__(self, url: str, replica_id: str, *, ttl_ms: int, prefix: str, world: World) -> None:
        self.id = replica_id
        self.redis = Redis.from_url(url)
        self.running: dict[str, int] = {}
        self.world = world
        self.loop = ClaimLoop(
            self.redis,
            replica_id=replica_id,
            start_cluster=self.start,
            stop_cluster=self.stop,
            ttl_ms=ttl_ms,
            prefix=prefix,
        )
        self.task: asyncio.Task[None] | None = None

    async def start(self, cluster_id: str, epoch: int) -> None:
        self.running[cluster_id] = epoch
        self.world.starts += 1
        self.world.owner[cluster_id] = self.id
        self.world.changed.set()

    async def stop(self, cluster_id: str, reason: str) -> None:
        self.running.pop(cluster_id, None)
        if self.world.owner.get(cluster_id) == self.id:
            del self.world.owner[cluster_id]

    def run(self, clusters: list[str]) -> None:
        self.loop.set_desired(clusters)
        self.task = asyncio.create_task(self.loop.run(), name=f"bench claim loop {self.id}")

    async def cancel(self) -> None:
        task, self.task = self.task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def crash(self) -> set[str]:
        await self.cancel()
        orphans = set(self.running)
        for c in orphans:
            if self.world.owner.get(c) == self.id:
                del self.world.owner[c]
        self.running = {}
        return orphans

    async def close(self) -> None:
        await self.cancel()
        await self.redis.aclose()


class World:
    def __init__(self, url: str, clusters: list[str], *, ttl_ms: int, prefix: str) -> None:
        self.url, self.clusters, self.ttl_ms, self.prefix = url, clusters, ttl_ms, prefix
        self.replicas: list[Replica] = []
        self.owner: dict[str, str] = {}
        self.starts = 0
        self.changed = asyncio.Event()

    def add(self) -> Replica:
        replica = Replica(
            self.url, f"w{len(self.replicas)}", ttl_ms=self.ttl_ms, prefix=self.prefix, world=self
        )
        self.replicas.append(replica)
        replica.run(self.clusters)
        return replica

    @property
    def live(self) -> list[Replica]:
        return [r for r in self.replicas if r.task is not None]

    def shares(self) -> list[int]:
        return [len(r.running) for r in self.live]

    def settled(self) -> bool:
        shares = self.shares()
        return (
            len(self.owner) == len(self.clusters)
            and max(shares) - min(shares) <= 1
            and all(len(r.loop.replicas) == len(self.live) for r in self.live)
        )

    async def wait(self, condition: Any, timeout: float) -> float:
        started = time.monotonic()
        while not condition():
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"not settled within {timeout}s: shares {sorted(self.shares())}")
            await asyncio.sleep(0.01)
        return time.monotonic() - started

    async def close(self) -> None:
        for r in self.replicas:
            await r.close()


async def claims_part(url: str, n_clusters: int) -> list[dict[str, Any]]:
    clusters = names("cluster", n_clusters)
    rows = []
    for r in (3, 5, 10):
        world = World(url, clusters, ttl_ms=10_000, prefix=f"bench-balance-{r}")
        try:
            for _ in range(r):
                world.add()
            settle = await world.wait(world.settled, timeout=60)
            row: dict[str, Any] = {
                "replicas": r,
                "settle_s": round(settle, 2),
                "balance": balance(world.shares()),
            }
            cpu_start, wall_start = time.process_time(), time.monotonic()
            await asyncio.sleep(STEADY_WINDOW_S)  # steady state: every loop heartbeats, renews, reads holders
            cpu = time.process_time() - cpu_start
            ticks = r * (time.monotonic() - wall_start) / world.replicas[0].loop.tick_interval
            row["steady_cpu_pct_of_a_core"] = round(100 * cpu / (time.monotonic() - wall_start), 1)
            row["steady_cpu_ms_per_replica_tick"] = round(1000 * cpu / ticks, 2)
            before = dict(world.owner)
            mark = world.starts
            world.add()
            settle = await world.wait(world.settled, timeout=60)
            minimum = minimum_moves(before, [x.id for x in world.live])
            moved = world.starts - mark
            row["scale_up"] = {
                "minimum": minimum,
                "moved": moved,
                "vs_minimum": round(moved / minimum, 3),
                "settle_s": round(settle, 2),
                "spread_after": balance(world.shares())["spread"],
            }
            before = dict(world.owner)
            mark = world.starts
            leaver = world.live[0]
            await leaver.cancel()
            await leaver.loop.release_all()
            settle = await world.wait(world.settled, timeout=60)
            minimum = minimum_moves(before, [x.id for x in world.live])
            moved = world.starts - mark
            row["scale_down_graceful"] = {
                "minimum": minimum,
                "moved": moved,
                "vs_minimum": round(moved / minimum, 3),
                "settle_s": round(settle, 2),
                "spread_after": balance(world.shares())["spread"],
            }
            rows.append(row)
        finally:
            await world.close()
        print(f"  claims: {r} replicas done", file=sys.stderr)
    return rows


async def failover_trial(url: str, ttl_ms: int, trial: int) -> float:
    clusters = names("cluster", 60)
    world = World(url, clusters, ttl_ms=ttl_ms, prefix=f"bench-failover-{ttl_ms}-{trial}")
    try:
        for _ in range(3):
            world.add()
        await world.wait(world.settled, timeout=60)
        await asyncio.sleep(random.uniform(0, ttl_ms / 1000 / 3))  # a random phase of the renewal cycle
        victim = world.live[0]
        crashed_at = time.monotonic()
        orphans = await victim.crash()
        await world.wait(lambda: all(c in world.owner for c in orphans), timeout=ttl_ms / 1000 * 3)
        return time.monotonic() - crashed_at
    finally:
        await world.close()


async def failover_part(url: str, trials: int, ttls: list[int]) -> list[dict[str, Any]]:
    rows = []
    for ttl_ms in ttls:
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(failover_trial(url, ttl_ms, i), name=f"bench failover {ttl_ms} {i}")
                for i in range(trials)
            ]
        times = sorted(t.result() for t in tasks)
        rows.append(
            {
                "ttl_s": ttl_ms / 1000,
                "trials": trials,
                "p50_s": round(statistics.median(times), 2),
                "max_s": round(max(times), 2),
                "min_s": round(min(times), 2),
                "target_s": ttl_ms / 1000 + 2,
                "all_within_target": max(times) <= ttl_ms / 1000 + 2,
            }
        )
        print(f"  failover: TTL {ttl_ms} ms done", file=sys.stderr)
    return rows


# -- part 4: real watcher processes, kill -9 -----------------------------------------------------
class ProcessTrial:
    """Two watcher processes sharing two kubesim clusters under their own key prefix."""

    def __init__(self, sim: kubesim.Simulator, workdir: Path, *, ttl_ms: int, trial: int) -> None:
        self.sim, self.ttl_ms, self.trial = sim, ttl_ms, trial
        self.name = f"p{ttl_ms}-{trial}"
        self.prefix = f"bench-proc-{self.name}"
        self.workdir = workdir / self.name
        self.kubeconfigs = self.workdir / "kubeconfigs"
        self.clusters: list[kubesim.Cluster] = []
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    async def start(self, nats_url: str, redis_url: str) -> None:
        for suffix in ("a", "b"):
            cluster = await self.sim.add_cluster(f"{self.name}-{suffix}", kinds=[kubesim.PYTORCHJOB])
            cluster.write_kubeconfig(self.kubeconfigs / f"{cluster.name}.yaml")
            self.clusters.append(cluster)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINWATCH_")}
        env.update({
            "TRAINWATCH_NATS_URL": nats_url, "TRAINWATCH_REDIS_URL": redis_url,
            "TRAINWATCH_KUBECONFIG_DIR": str(self.kubeconfigs), "TRAINWATCH_REDIS_PREFIX": self.prefix,
            "TRAINWATCH_LEASE_TTL_MS": str(self.ttl_ms), "TRAINWATCH_HTTP_PORT": "0",
            "TRAINWATCH_LOG_LEVEL": "WARNING",
        })  # fmt: skip
        for replica in ("w0", "w1"):
            with open(self.workdir / f"{replica}.log", "ab") as log:
                self.processes[replica] = subprocess.Popen(  # noqa: ASYNC220 - a start, not a wait
                    [sys.executable, "-m", "trainwatch_watcher"],
                    env={**env, "TRAINWATCH_INSTANCE_ID": replica},
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                )  # fmt: skip

    def kill_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()


class Observer:
    """Lease holders (Redis, polled every 10 ms) and when each job's first event reached JOBS."""

    def __init__(self, nc: Any, redis: Redis) -> None:
        self.nc, self.redis = nc, redis
        self.created_at: dict[str, float] = {}  # job uid -> when its created event arrived

    async def subscribe(self) -> Any:
        async def on_message(msg: Any) -> None:
            event = parse_job_event(msg.data)
            self.created_at.setdefault(event.job.uid, time.monotonic())

        return await self.nc.jetstream().subscribe(
            "jobs.v1.>", stream="JOBS", ordered_consumer=True, deliver_policy=DeliverPolicy.NEW, cb=on_message
        )

    async def holder(self, trial: ProcessTrial, cluster_id: str) -> str | None:
        raw = await self.redis.get(LeaseManager(self.redis, prefix=trial.prefix).lease_key(cluster_id))
        return raw.decode().rpartition("|")[0] if raw else None

    async def until(self, condition: Any, timeout: float, what: str) -> float:
        deadline = time.monotonic() + timeout
        while not await condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not within {timeout}s")
            await asyncio.sleep(0.01)
        return time.monotonic()


def new_job(cluster: kubesim.Cluster, name: str) -> str:
    created = cluster.store.create("PyTorchJob", kubesim.manifest(kubesim.PYTORCHJOB, name, "default"))
    return str(created["metadata"]["uid"])


async def process_trial(observer: Observer, trial: ProcessTrial) -> dict[str, float]:
    victim_cluster = trial.clusters[trial.trial % 2]

    async def split() -> bool:
        holders = {await observer.holder(trial, c.name) for c in trial.clusters}
        return holders == {"w0", "w1"}

    # Ready: each replica owns one cluster and each cluster streams (a new job's event arrives),
    # still so after a random phase of the renewal cycle. Twenty processes starting at once on a
    # small machine may lose a lease or two to a starved event loop first: then again.
    for probe in range(10):
        await observer.until(split, 120, f"{trial.name}: one cluster each")
        for cluster in trial.clusters:
            uid = new_job(cluster, f"probe-{probe}")

            async def arrived(uid: str = uid) -> bool:
                return uid in observer.created_at

            await observer.until(arrived, 60, f"{trial.name}: streaming")
        await asyncio.sleep(random.uniform(0, trial.ttl_ms / 1000 / 3))
        victim = await observer.holder(trial, victim_cluster.name)
        if victim is not None and await split():
            break
    else:
        raise TimeoutError(f"{trial.name}: ownership never settled")
    trial.processes[victim].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    uid = new_job(victim_cluster, "after-kill")  # a change while nobody streams the cluster

    async def reowned() -> bool:
        return await observer.holder(trial, victim_cluster.name) not in (None, victim)

    async def streamed() -> bool:
        return uid in observer.created_at

    limit = trial.ttl_ms / 1000 * 3 + 10
    reowned_at = await observer.until(reowned, limit, f"{trial.name}: re-owned")
    await observer.until(streamed, limit, f"{trial.name}: streaming again")
    return {"reowned_s": reowned_at - killed_at, "streaming_s": observer.created_at[uid] - killed_at}


async def process_failover_part(redis_url: str, trials: int, ttls: list[int]) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-failover-proc-") as tmp:
        nats_server = NatsServer(workdir=Path(tmp) / "nats")
        nats_server.workdir.mkdir()
        nats_server.start()
        nc = await nats.connect(nats_server.url)
        redis = Redis.from_url(redis_url)
        try:
            await ensure_streams(nc.jetstream())
            observer = Observer(nc, redis)
            subscription = await observer.subscribe()
            async with kubesim.Simulator() as sim:
                for ttl_ms in ttls:
                    fleet = [ProcessTrial(sim, Path(tmp), ttl_ms=ttl_ms, trial=i) for i in range(trials)]
                    try:
                        for trial in fleet:
                            await trial.start(nats_server.url, redis_url)
                        started = time.monotonic()
                        async with asyncio.TaskGroup() as group:
                            tasks = [
                                group.create_task(process_trial(observer, t), name=f"bench {t.name}")
                                for t in fleet
                            ]
                    finally:
                        for trial in fleet:
                            trial.kill_all()
                    results = [t.result() for t in tasks]
                    reowned = sorted(r["reowned_s"] for r in results)
                    streaming = sorted(r["streaming_s"] for r in results)
                    lag = sorted(r["streaming_s"] - r["reowned_s"] for r in results)
                    rows.append(
                        {
                            "ttl_s": ttl_ms / 1000,
                            "trials": trials,
                            "reowned_p50_s": round(statistics.median(reowned), 2),
                            "reowned_max_s": round(max(reowned), 2),
                            "streaming_p50_s": round(statistics.median(streaming), 2),
                            "streaming_max_s": round(max(streaming), 2),
                            "streaming_min_s": round(min(streaming), 2),
                            # the new owner's start: kubeconfig, discovery, the watch resumed, a publish
                            "streaming_after_reowned_p50_ms": round(1000 * statistics.median(lag)),
                            "streaming_after_reowned_max_ms": round(1000 * max(lag)),
                            "target_s": ttl_ms / 1000 + 2,
                            "all_within_target": max(streaming) <= ttl_ms / 1000 + 2,
                            "fleet_wall_s": round(time.monotonic() - started, 1),
                        }
                    )
                    print(f"  process failover: TTL {ttl_ms} ms done", file=sys.stderr)
            await subscription.unsubscribe()
        finally:
            await redis.aclose()
            await nc.close()
            nats_server.close()
    return rows


def print_tables(result: dict[str, Any]) -> None:
    print("\n## Balance and moves, pure planner (1 = perfect; spread = largest - smallest share)")
    print("| replicas | sticky largest/smallest | spread | plain HRW largest/smallest | spread |")
    print("|---|---|---|---|---|")
    for row in result["planner"]:
        s, b = row["sticky_plan"], row["baseline_plain_hrw"]
        print(
            f"| {row['replicas']} | {s['largest']}/{s['smallest']} = {s['ratio']} | {s['spread']} "
            f"| {b['largest']}/{b['smallest']} = {b['ratio']} | {b['spread']} |"
        )
    print("\n| replicas | event | minimum | sticky moved (x min) | stateless bounded HRW | plain HRW |")
    print("|---|---|---|---|---|---|")
    for row in result["planner"]:
        for label in ("up", "down"):
            m = row[f"scale_{label}"]
            print(
                f"| {row['replicas']} | {'+1' if label == 'up' else '-1'} | {m['minimum']} "
                f"| {m['sticky_plan_moved']} ({m['sticky_vs_minimum']}) "
                f"| {m['baseline_stateless_bounded_moved']} "
                f"| {m['baseline_plain_hrw_moved']} |"
            )
    if "claims" in result:
        print("\n## Real ClaimLoops on Redis (TTL 10 s)")
        print("| replicas | largest/smallest | spread | settle s | +1: moved/min | -1 graceful: moved/min |")
        print("|---|---|---|---|---|---|")
        for row in result["claims"]:
            b, up, down = row["balance"], row["scale_up"], row["scale_down_graceful"]
            print(
                f"| {row['replicas']} | {b['largest']}/{b['smallest']} | {b['spread']} | {row['settle_s']} "
                f"| {up['moved']}/{up['minimum']} = {up['vs_minimum']} ({up['settle_s']} s) "
                f"| {down['moved']}/{down['minimum']} = {down['vs_minimum']} ({down['settle_s']} s) |"
            )
    if "claims" in result:
        print("\n## Steady-state cost of the claim loops (this process, Redis excluded)")
        print("| replicas | % of a core, all loops | CPU ms per replica tick |")
        print("|---|---|---|")
        for row in result["claims"]:
            print(
                f"| {row['replicas']} | {row['steady_cpu_pct_of_a_core']} "
                f"| {row['steady_cpu_ms_per_replica_tick']} |"
            )
    if "failover" in result:
        print("\n## Abrupt stop → re-owned (3 replicas x 60 clusters)")
        print("| TTL s | trials | p50 s | max s | target s |")
        print("|---|---|---|---|---|")
        for row in result["failover"]:
            print(
                f"| {row['ttl_s']} | {row['trials']} | {row['p50_s']} | {row['max_s']} | {row['target_s']} |"
            )
    if "process_failover" in result:
        print("\n## kill -9 of a real watcher process → re-owned, and re-owned and streaming")
        print("| TTL s | trials | re-owned p50 s | max s | re-owned and streaming p50 s | max s | target s |")
        print("|---|---|---|---|---|---|---|")
        for row in result["process_failover"]:
            print(
                f"| {row['ttl_s']} | {row['trials']} | {row['reowned_p50_s']} | {row['reowned_max_s']} "
                f"| {row['streaming_p50_s']} | {row['streaming_max_s']} | {row['target_s']} |"
            )


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"clusters": args.clusters}
    started = time.monotonic()
    result["planner"] = planner_part(args.clusters)
    print(f"  planner done in {time.monotonic() - started:.1f}s", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="bench-failover-") as tmp:
        server = RedisServer(workdir=Path(tmp))
        server.start()
        try:
            result["redis"] = server.url
            result["claims"] = await claims_part(server.url, args.clusters)
            ttls = [2000] if args.quick else [10_000, 2000]
            result["failover"] = await failover_part(server.url, args.trials, ttls)
            result["process_failover"] = await process_failover_part(server.url, args.trials, ttls)
        finally:
            server.close()
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="failover at TTL 2 s only")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    random.seed(7)
    result = asyncio.run(main_async(args))
    print_tables(result)
    print(f"\n(elapsed {result['elapsed_s']} s)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
