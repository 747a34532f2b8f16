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
import contextlib
import ctypes
import ctypes.util
import itertools
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest
from nats.aio.client import Client as NatsClient
from nats.js.api import ConsumerConfig, DeliverPolicy
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis
from redis.exceptions import RedisError

import kubesim
from trainwatch_common.events.clusters import ClusterHealth
from trainwatch_common.events.envelope import parse_cluster_health, parse_job_event
from trainwatch_common.events.ids import job_event_id
from trainwatch_common.events.jobs import JobStatusEvent
from trainwatch_common.leases import LeaseManager, replica_of
from trainwatch_common.streams import ensure_streams
from trainwatch_common.testing import NatsServer, RedisServer, eventually, free_port
from trainwatch_watcher.state import PREFIX as CHECKPOINT_PREFIX
from trainwatch_watcher.state import decode_record

TTL_MS = 2000
TTL = TTL_MS / 1000
# Five kinds cover every status family the watcher tells apart cheaply: Kubeflow, batch/v1 (its
# Created -> Scheduling step), TrainJob (its JobSet companion, which is skipped as a child),
# JobSet and RayJob. Each is one informer per cluster.
KINDS = [kubesim.PYTORCHJOB, kubesim.BATCH_JOB, kubesim.TRAINJOB, kubesim.JOBSET, kubesim.RAYJOB]

State = tuple[str, str, str | None, bool]  # (change, phase, sub_phase, terminal)


# -- watcher processes -------------------------------------------------------------------------
def _die_with_parent() -> None:
    """In the child: SIGKILL it if the test process dies (a timeout), so no replica outlives it."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Replica:
    """One ``python -m trainwatch_watcher`` process; its output goes to a log file."""

    def __init__(self, instance_id: str, env: dict[str, str], log_dir: Path) -> None:
        self.id = instance_id
        self.port = free_port()
        self.env = {**env, "TRAINWATCH_INSTANCE_ID": instance_id, "TRAINWATCH_HTTP_PORT": str(self.port)}
        self.log_path = log_dir / f"{instance_id}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "trainwatch_watcher"],
                env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=_die_with_parent,
            )  # fmt: skip

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL by PID (a stopped process dies too) and reap it."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    async def wait_exit(self, timeout: float) -> int:
        await eventually(lambda: not self.alive, timeout=timeout, message=f"{self.id} exited")
        assert self.process is not None and self.process.returncode is not None  # noqa: PT018
        return self.process.returncode

    async def http(self, path: str) -> httpx.Response:
        async with httpx.AsyncClient(timeout=2.0) as client:
            return await client.get(f"http://127.0.0.1:{self.port}{path}")

    async def ready(self) -> bool:
        return (await self.http("/readyz")).status_code == 200

    async def not_ready(self) -> bool:
        return (await self.http("/readyz")).status_code == 503

    async def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of ``name`` whose labels include ``labels``."""
        text = (await self.http("/metrics")).text
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
        return total

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Fleet:
    """The replicas of one test, with what they share: servers, kubeconfig folder, TTL."""

    nats_url: str
    redis_url: str
    kubeconfig_dir: Path
    log_dir: Path
    replicas: dict[str, Replica] = field(default_factory=dict)
    ttl_ms: int = TTL_MS

    def env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("TRAINWATCH_")}
        return {
            **base,
            "TRAINWATCH_NATS_URL": self.nats_url,
            "TRAINWATCH_REDIS_URL": self.redis_url,
            "TRAINWATCH_KUBECONFIG_DIR": str(self.kubeconfig_dir),
            "TRAINWATCH_ALLOW_LOOPBACK_SERVERS": "true",  # kubesim listens on 127.0.0.1
            "TRAINWATCH_LEASE_TTL_MS": str(self.ttl_ms),
            "TRAINWATCH_HEALTH_INTERVAL": "0.5",  # readiness is read from health reports
            "TRAINWATCH_PUBLISH_ACK_TIMEOUT": "1",
            "TRAINWATCH_BACKOFF_INITIAL": "0.05",
            "TRAINWATCH_BACKOFF_MAX": "0.5",
            "TRAINWATCH_LOG_FORMAT": "text",
            "PYTHONUNBUFFERED": "1",
        }

    def start(self, instance_id: str) -> Replica:
        replica = Replica(instance_id, self.env(), self.log_dir)
        self.replicas[instance_id] = replica
        replica.start()
        return replica

    @property
    def live(self) -> list[Replica]:
        return [r for r in self.replicas.values() if r.alive]

    def kill_all(self) -> None:
        for replica in self.replicas.values():
            replica.kill()

    def logs(self) -> str:
        return "\n".join(f"--- {r.id} ---\n{r.log_tail()}" for r in self.replicas.values())


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


async def add_clusters(
    sim: kubesim.Simulator, count: int, kinds: list[kubesim.KindSpec] = KINDS
) -> list[kubesim.Cluster]:
    return [await sim.add_cluster(f"c{i:02d}", kinds=kinds) for i in range(count)]


# -- what the test observes: leases, health, the stream ------------------------------------------
class Leases:
    """Who holds each cluster's lease, read from Redis every 20 ms, with the times it changed."""

    def __init__(self, redis_url: str, cluster_ids: list[str]) -> None:
        self.redis = Redis.from_url(redis_url, socket_timeout=0.5, socket_connect_timeout=0.5)
        self.cluster_ids = cluster_ids
        manager = LeaseManager(self.redis)
        self._keys = [manager.lease_key(c) for c in cluster_ids]
        self.current: dict[str, tuple[str, int] | None] = {}
        self.changes: dict[str, list[tuple[float, tuple[str, int] | None]]] = {c: [] for c in cluster_ids}
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Leases:
        self._task = asyncio.create_task(self._poll(), name="test lease poll")
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.redis.aclose()

    async def _poll(self) -> None:
        while True:
            try:
                values = await self.redis.mget(self._keys)
            except (RedisError, OSError):  # Redis restarting: ownership unknown meanwhile
                values = None
                self.current.clear()
            if values is not None:
                now = time.monotonic()
                for cluster_id, raw in zip(self.cluster_ids, values, strict=True):
                    holder = None
                    if raw is not None:
                        name, _, epoch = raw.decode().rpartition("|")
                        holder = (replica_of(name), int(epoch))  # without the lease's nonce
                    if self.current.get(cluster_id, ()) != holder:
                        self.current[cluster_id] = holder
                        self.changes[cluster_id].append((now, holder))
            await asyncio.sleep(0.02)

    def owner(self, cluster_id: str) -> str | None:
        holder = self.current.get(cluster_id)
        return holder[0] if holder else None

    def epoch(self, cluster_id: str) -> int:
        holder = self.current.get(cluster_id)
        return holder[1] if holder else 0

    def shares(self, replica_ids: list[str]) -> dict[str, int]:
        counts = Counter(self.owner(c) for c in self.cluster_ids)
        return {r: counts.get(r, 0) for r in replica_ids}

    def owned_by(self, replica_id: str) -> list[str]:
        return [c for c in self.cluster_ids if self.owner(c) == replica_id]

    def unowned_gaps(self, since: float) -> list[tuple[str, float]]:
        """Every stretch (ended after ``since``) during which a cluster had no lease holder."""
        gaps = []
        for cluster_id, changes in self.changes.items():
            for (start, holder), (end, _) in itertools.pairwise(changes):
                if holder is None and end >= since:
                    gaps.append((cluster_id, end - start))
        return gaps


class Health:
    """The last health report of each (cluster, owner, epoch), from clusters.v1.health.*."""

    def __init__(self, nc: NatsClient, kinds: int = len(KINDS)) -> None:
        self.nc = nc
        self.kinds = kinds  # informers per cluster once it streams
        self.last: dict[tuple[str, str, int], ClusterHealth] = {}
        self._sub: Any = None

    async def start(self) -> None:
        async def on_message(msg: Any) -> None:
            report = parse_cluster_health(msg.data)
            self.last[(report.cluster_id, report.owner or "", report.epoch)] = report

        self._sub = await self.nc.subscribe("clusters.v1.health.*", cb=on_message)

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await self._sub.unsubscribe()

    def streaming(self, cluster_id: str, owner: str, epoch: int) -> bool:
        """The owner's every informer has listed (or resumed its watch) under this epoch."""
        report = self.last.get((cluster_id, owner, epoch))
        return (
            report is not None
            and report.informers_running == self.kinds
            and report.watch_lag_seconds is not None
        )


@dataclass(frozen=True, slots=True)
class Stored:
    seq: int  # the JetStream stream sequence
    msg_id: str
    event: JobStatusEvent


class StreamLog:
    """Everything stored on JOBS, by stream sequence, through an ordered push consumer."""

    def __init__(self, nc: NatsClient) -> None:
        self.nc = nc
        self.by_seq: dict[int, Stored] = {}
        self._sub: Any = None

    async def start(self) -> None:
        async def on_message(msg: Any) -> None:
            seq = msg.metadata.sequence.stream
            headers = msg.headers or {}
            self.by_seq[seq] = Stored(seq, headers.get("Nats-Msg-Id", ""), parse_job_event(msg.data))

        start = max(self.by_seq, default=0) + 1
        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start)
        self._sub = await self.nc.jetstream().subscribe(
            "jobs.v1.>", stream="JOBS", ordered_consumer=True, cb=on_message, config=config
        )

    async def restart(self) -> None:
        """After a NATS restart: a new consumer from the next sequence (duplicates keyed away)."""
        await self.stop()
        await self.start()

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await self._sub.unsubscribe()

    def stored(self) -> list[Stored]:
        return [self.by_seq[s] for s in sorted(self.by_seq)]

    def by_uid(self) -> dict[str, list[State]]:
        out: dict[str, list[State]] = {}
        for s in self.stored():
            e = s.event
            out.setdefault(e.job.uid, []).append(
                (e.change, e.phase.value, e.sub_phase.value if e.sub_phase else None, e.terminal)
            )
        return out

    def count(self, cluster_ids: set[str], *, min_epoch: int | dict[str, int] = 0) -> int:
        def floor(c: str) -> int:
            return min_epoch.get(c, 0) if isinstance(min_epoch, dict) else min_epoch

        return sum(
            1
            for s in self.by_seq.values()
            if s.event.job.cluster_id in cluster_ids and s.event.epoch >= floor(s.event.job.cluster_id)
        )


def truth_by_uid(truth: kubesim.TruthLog) -> dict[str, list[State]]:
    out: dict[str, list[State]] = {}
    for t in truth:
        out.setdefault(t.uid, []).append((t.change, t.phase, t.sub_phase, t.terminal))
    return out


# -- the scenarios -----------------------------------------------------------------------------
class Scenarios:
    """Seeded demo batches on every cluster, one shared truth log, until ``finish``."""

    def __init__(self, clusters: list[kubesim.Cluster], *, rate: float, concurrency: int, seed: int) -> None:
        self.truth = kubesim.TruthLog()
        self.drivers = [
            kubesim.ScenarioDriver(c, seed=seed + i, rate=rate, truth=self.truth)
            for i, c in enumerate(clusters)
        ]
        self.concurrency = concurrency
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._run(d), name=f"test scenario {d.cluster.name}") for d in self.drivers
        ]

    async def _run(self, driver: kubesim.ScenarioDriver) -> None:
        # A batch at a time, so finishing lets every started lifecycle end (deleted or terminal).
        while not self._stop.is_set():
            await driver.run_demo(jobs=self.concurrency, concurrency=self.concurrency)

    def changes(self, cluster_ids: set[str]) -> int:
        return sum(1 for t in self.truth.entries if t.cluster in cluster_ids)

    async def finish(self, timeout: float = 30.0) -> None:
        """Let the running lifecycles end (the truth is then complete); cancel them if they hang."""
        self._stop.set()
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(*self._tasks)
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)


# -- checks ------------------------------------------------------------------------------------
async def wait_ready(
    fleet: Fleet, leases: Leases, health: Health, *, shares: set[int], timeout: float = 40.0
) -> None:
    """Every cluster's lease is held by a live replica, the shares are as expected, and each
    owner's informers have listed under that lease (so no change made from now on is missed)."""
    replica_ids = [r.id for r in fleet.live]

    def ready() -> bool:
        owned = leases.shares(replica_ids)
        if sum(owned.values()) != len(leases.cluster_ids) or set(owned.values()) - shares:
            return False
        return all(health.streaming(c, leases.owner(c) or "", leases.epoch(c)) for c in leases.cluster_ids)

    try:
        await eventually(ready, timeout=timeout, message="every cluster owned and streaming")
    except AssertionError:
        state = {c: (leases.current.get(c), leases.owner(c) and health.last.get(
            (c, leases.owner(c) or "", leases.epoch(c)))) for c in leases.cluster_ids}  # fmt: skip
        raise AssertionError(
            f"not ready: shares {leases.shares(replica_ids)}\n{state}\n{fleet.logs()}"
        ) from None


async def assert_exactly_once(stream: StreamLog, truth: kubesim.TruthLog, *, timeout: float = 30.0) -> None:
    """Every true transition stored once, nothing else, epochs never going back per cluster."""
    expected = truth_by_uid(truth)
    try:
        await eventually(
            lambda: stream.by_uid() == expected, timeout=timeout, message="the stream = the truth"
        )
    except AssertionError:
        got = stream.by_uid()
        lines = [
            f"uid {uid}:\n  truth  {expected.get(uid)}\n  stored {got.get(uid)}"
            for uid in sorted(set(got) | set(expected))
            if got.get(uid) != expected.get(uid)
        ]
        raise AssertionError(
            f"{len(lines)} jobs differ from the ground truth:\n" + "\n".join(lines[:15])
        ) from None
    stored = stream.stored()
    msg_ids = Counter(s.msg_id for s in stored)
    assert [m for m, n in msg_ids.items() if n > 1] == [], "a Nats-Msg-Id stored twice"
    slots = Counter((s.event.job.cluster_id, s.event.job.uid, s.event.sequence) for s in stored)
    assert [k for k, n in slots.items() if n > 1] == [], "two events for one (cluster, uid, sequence)"
    for s in stored:
        e = s.event
        assert s.msg_id == e.event_id == job_event_id(e.job.cluster_id, e.job.uid, e.sequence)
    newest: dict[str, tuple[int, int]] = {}  # cluster -> (epoch, stream seq)
    for s in stored:
        cluster_id, epoch = s.event.job.cluster_id, s.event.epoch
        before = newest.get(cluster_id, (0, 0))
        assert epoch >= before[0], (
            f"{cluster_id}: seq {s.seq} from {s.event.watcher_id} at epoch {epoch} "
            f"after epoch {before[0]} (seq {before[1]})"
        )
        newest[cluster_id] = (epoch, s.seq)


async def assert_checkpoints_agree(redis_url: str, stream: StreamLog) -> None:
    """Each live job's checkpoint holds the last stored sequence; deleted jobs have none."""
    last: dict[str, int] = {}
    deleted: set[str] = set()
    for s in stream.stored():
        last[s.event.job.uid] = s.event.sequence
        if s.event.change == "deleted":
            deleted.add(s.event.job.uid)
    redis = Redis.from_url(redis_url)

    async def checkpoints() -> dict[str, int]:
        found: dict[str, int] = {}
        async for key in redis.scan_iter(match=f"{CHECKPOINT_PREFIX}:*", count=500):
            for name, value in (await redis.hgetall(key)).items():  # type: ignore[misc]
                if name.startswith(b"u:"):
                    found[name[2:].decode()] = decode_record(value).slot.sequence
        return found

    expected = {uid: seq for uid, seq in last.items() if uid not in deleted}

    async def agree() -> bool:
        return await checkpoints() == expected

    try:
        # The checkpoint follows the acknowledgement: give the last batch its moment.
        await eventually(agree, timeout=10, message="checkpoints")
    except AssertionError:
        found = await checkpoints()
        wrong = {
            u: (found.get(u), expected.get(u))
            for u in set(found) | set(expected)
            if found.get(u) != expected.get(u)
        }
        raise AssertionError(
            f"checkpoint (found, expected) differs for {len(wrong)} jobs: {list(wrong.items())[:10]}"
        ) from None
    finally:
        await redis.aclose()


@contextlib.asynccontextmanager
async def observing(
    nats_url: str, redis_url: str, cluster_ids: list[str], *, kinds: int = len(KINDS)
) -> AsyncIterator[tuple[NatsClient, Leases, Health, StreamLog]]:
    nc = await nats.connect(nats_url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        await ensure_streams(nc.jetstream())
        health = Health(nc, kinds)
        stream = StreamLog(nc)
        await health.start()
        await stream.start()
        try:
            async with Leases(redis_url, cluster_ids) as leases:
                yield nc, leases, health, stream
        finally:
            await stream.stop()
            await health.stop()
    finally:
        with contextlib.suppress(Exception):
            await nc.close()


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
