"""The process harness of the watcher-replica tests: replicas as real processes, and what the
tests observe (leases, health, the JOBS stream) and check against kubesim's truth."""

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
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import nats
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
from trainwatch_common.redis_connection import redis_client
from trainwatch_common.settings import ServiceSettings
from trainwatch_common.streams import ensure_streams
from trainwatch_common.testing import eventually, free_port
from trainwatch_watcher.records import decode_record
from trainwatch_watcher.state import PREFIX as CHECKPOINT_PREFIX

TTL_MS = 2000
TTL = TTL_MS / 1000
# Five kinds cover every status family the watcher tells apart cheaply: Kubeflow, batch/v1 (its
# Created -> Scheduling step), TrainJob (its JobSet companion, which is skipped as a child),
# JobSet and RayJob. Each is one informer per cluster.
KINDS = [kubesim.PYTORCHJOB, kubesim.BATCH_JOB, kubesim.TRAINJOB, kubesim.JOBSET, kubesim.RAYJOB]

State = tuple[str, str, str | None, bool]  # (change, phase, sub_phase, terminal)

# Where the test reads Redis: a URL, or settings naming sentinels (a Sentinel-managed master).
RedisTarget = str | ServiceSettings


def connect_redis(target: RedisTarget, **options: Any) -> Redis:
    if isinstance(target, str):
        return Redis.from_url(target, **options)
    return redis_client(target, **options)


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
    extra_env: dict[str, str] = field(default_factory=dict)  # e.g. TRAINWATCH_REDIS_SENTINELS

    def env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("TRAINWATCH_")}
        return {
            **base,
            **self.extra_env,
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


async def add_clusters(
    sim: kubesim.Simulator, count: int, kinds: list[kubesim.KindSpec] = KINDS
) -> list[kubesim.Cluster]:
    return [await sim.add_cluster(f"c{i:02d}", kinds=kinds) for i in range(count)]


# -- what the test observes: leases, health, the stream ------------------------------------------
class Leases:
    """Who holds each cluster's lease, read from Redis every 20 ms, with the times it changed."""

    def __init__(self, redis: RedisTarget, cluster_ids: list[str]) -> None:
        self.redis = connect_redis(redis, socket_timeout=0.5, socket_connect_timeout=0.5)
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


async def assert_checkpoints_agree(redis_target: RedisTarget, stream: StreamLog) -> None:
    """Each live job's checkpoint holds the last stored sequence; deleted jobs have none."""
    last: dict[str, int] = {}
    deleted: set[str] = set()
    for s in stream.stored():
        last[s.event.job.uid] = s.event.sequence
        if s.event.change == "deleted":
            deleted.add(s.event.job.uid)
    redis = connect_redis(redis_target)

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
    nats_url: str, redis: RedisTarget, cluster_ids: list[str], *, kinds: int = len(KINDS)
) -> AsyncIterator[tuple[NatsClient, Leases, Health, StreamLog]]:
    nc = await nats.connect(nats_url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        await ensure_streams(nc.jetstream())
        health = Health(nc, kinds)
        stream = StreamLog(nc)
        await health.start()
        await stream.start()
        try:
            async with Leases(redis, cluster_ids) as leases:
                yield nc, leases, health, stream
        finally:
            await stream.stop()
            await health.stop()
    finally:
        with contextlib.suppress(Exception):
            await nc.close()
