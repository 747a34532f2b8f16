"""The chaos run: the whole system as real processes, faults in sequence under load, then one
comparison of the truth with the stream, SQL and the cards. See ``chaos/__init__.py``."""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import dataclasses
import os
import random
import shutil
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import nats
from nats.aio.client import Client as NatsClient
from redis.asyncio import Redis

from chaos import observe
from chaos.compare import (
    ABSENT,
    SURFACES,
    Observations,
    Report,
    Seen,
    TruthRow,
    by_uid,
    compare,
    fmt,
    state_key,
)
from chaos.system import ROOT, Proc, System
from trainwatch_common.streams import (
    NOTIFIER_CONSUMER,
    PERSISTER_CONSUMER,
    StreamSettings,
    ensure_streams,
    stream_configs,
)

Condition = Callable[[], Awaitable[bool] | bool]

# Steps of the schedule that modes name (``Mode.only``).
KILL_NATS_LEADER = "kill -9 the JOBS stream leader's NATS node"
ROLL_NATS = "rolling restart of the NATS nodes"
ROLL_SERVICES = "rolling restart of every service"


UNDELIVERED_ALLOWANCE_SECONDS = 1.0  # how old an undelivered watch event may be at a 410


@dataclass(frozen=True)
class Mode:
    """Sizes and durations of one kind of run. Durations marked "fault" are how long a fault
    lasts (a sleep that *is* the fault); every other wait is on a condition with a timeout."""

    name: str
    clusters: int = 5
    rate: float = 2.0  # status writes per second per job
    concurrency: int = 3  # steady jobs at once per cluster
    watcher_kills: int = 2
    burst_jobs: int = 10  # extra jobs per cluster, started at once
    burst_rate: float = 4.0
    bot_down: float = 15.0  # fault: the Feishu bot answers nothing
    nats_down: float = 3.0  # fault
    redis_down: float = 2.0  # fault
    postgres_down: float = 5.0  # fault
    read_timeout: float = 3.0  # the watchers' silent-watch timeout; the stall lasts longer
    # JOBS' Nats-Msg-Id window: production's for the whole run, shortened to this only around the
    # "re-added after the window" step, so every other fault meets the window a real one does.
    duplicate_window: float = 15 * 60.0
    short_window: float = 10.0
    ack_wait: float | None = 10.0  # the durable consumers' redelivery delay (None: production's)
    notifier_env: dict[str, str] = field(default_factory=dict)
    settle_timeout: float = 45.0
    quiet: float = 4.0  # the surfaces unchanged this long (and no backlog): settled
    faults: bool = True
    load_jobs: int = 0  # load mode: steady jobs per cluster before the burst
    # NATS as a three-node JetStream cluster (every stream R3, every service given all three
    # URLs): "restart NATS" becomes a kill -9 of the JOBS leader's node and a rolling restart of
    # the three, and a rolling restart of every service is added (``--nats-cluster`` sets it).
    nats_cluster: bool = False
    only: tuple[str, ...] = ()  # run only these steps of the schedule (empty: all of them)


MODES = {
    "short": Mode(
        "short",
        notifier_env={
            "TRAINWATCH_UNCONFIRMED_AFTER_SECONDS": "8",
            "TRAINWATCH_RETRY_BASE_SECONDS": "0.5",
            "TRAINWATCH_RETRY_CAP_SECONDS": "3",
        },
    ),
    "full": Mode(
        "full",
        concurrency=4,
        watcher_kills=10,
        burst_jobs=30,
        bot_down=120.0,
        nats_down=10.0,
        redis_down=5.0,
        postgres_down=30.0,
        read_timeout=10.0,
        short_window=45.0,
        ack_wait=None,  # production's: the notifier's 60 s redelivery is part of what is tested
        settle_timeout=240.0,
        quiet=10.0,
    ),
    # The high-availability run (issue 17): the short mode's sizes on a three-node NATS cluster,
    # only the steps that restart something the deploy runs several of.
    "ha": Mode(
        "ha",
        notifier_env={
            "TRAINWATCH_UNCONFIRMED_AFTER_SECONDS": "8",
            "TRAINWATCH_RETRY_BASE_SECONDS": "0.5",
            "TRAINWATCH_RETRY_CAP_SECONDS": "3",
        },
        nats_cluster=True,
        only=(KILL_NATS_LEADER, ROLL_NATS, ROLL_SERVICES),
    ),
    "load": Mode(
        "load",
        clusters=20,
        concurrency=5,
        burst_jobs=100,
        load_jobs=100,
        faults=False,
        ack_wait=None,
        settle_timeout=480.0,
        quiet=10.0,
    ),
}


class Chaos:
    def __init__(self, mode: Mode, seed: int, run_dir: Path, *, nats_cluster: bool = False) -> None:
        self.mode = mode
        self.nats_cluster = nats_cluster or mode.nats_cluster
        self.seed = seed
        self.rng = random.Random(seed)
        self.t0 = time.monotonic()
        settings = {
            "TRAINWATCH_JOBS_DUPLICATE_WINDOW_SECONDS": str(mode.duplicate_window),
            # Watchers: the TTL of the issue, quick health reports (readiness is read from them).
            "TRAINWATCH_LEASE_TTL_MS": "2000",
            "TRAINWATCH_HEALTH_INTERVAL": "0.5",
            "TRAINWATCH_PUBLISH_ACK_TIMEOUT": "1",
            "TRAINWATCH_BACKOFF_INITIAL": "0.05",
            "TRAINWATCH_BACKOFF_MAX": "1",
            "TRAINWATCH_READ_TIMEOUT": str(mode.read_timeout),
            **mode.notifier_env,
        }
        self.system = System(
            run_dir, clusters=mode.clusters, seed=seed, settings=settings, nats_cluster=self.nats_cluster
        )
        self.nc: NatsClient | None = None
        self.leases: observe.Leases | None = None
        self.health: observe.Health | None = None
        self.timeline: list[str] = []
        self.steps: list[tuple[str, int]] = [("(warm-up)", 0)]  # (step, truth entries when it began)
        self.blind_windows: list[tuple[int, int]] = []  # truth positions while the history was gone
        self.problems: list[str] = []  # conditions that did not come true in time
        self.http = httpx.AsyncClient(timeout=30)

    # -- helpers ------------------------------------------------------------------------------
    def log(self, text: str) -> None:
        line = f"[{time.monotonic() - self.t0:6.1f}s] {text}"
        self.timeline.append(line)
        print(line, flush=True)

    async def wait(self, condition: Condition, *, timeout: float, what: str) -> bool:
        """Poll ``condition`` until true or ``timeout``; a timeout is recorded, not raised, so
        one slow recovery still lets the run go on and report what it measured."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = condition()
                if not isinstance(value, bool):
                    value = await value
                if value:
                    return True
            except Exception:  # a server restarting: "not yet"
                pass
            if time.monotonic() >= deadline:
                self.problems.append(f"{what}: not within {timeout:.0f}s")
                self.log(f"TIMEOUT waiting for {what} ({timeout:.0f}s)")
                return False
            await asyncio.sleep(0.1)

    async def kubesim(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        assert self.system.kubesim is not None
        url = f"http://127.0.0.1:{self.system.kubesim.port}{path}"
        response = await (self.http.post(url, json=body or {}) if body is not None else self.http.get(url))
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    async def registry(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.system.admin_token}"}
        return await self.http.request(
            method, f"{self.system.registry_url}{path}", json=body, headers=headers
        )

    async def stream_last_seq(self) -> int:
        assert self.nc is not None
        return int((await self.nc.jetstream().stream_info("JOBS")).state.last_seq)

    async def stream_grows(self, events: int, timeout: float, what: str) -> bool:
        start = await self.stream_last_seq()

        async def grown() -> bool:
            return await self.stream_last_seq() >= start + events

        return await self.wait(grown, timeout=timeout, what=what)

    def all_streaming(self, since: float, clusters: list[str] | None = None) -> bool:
        """Every (given) desired cluster is owned by a live replica that reported, after
        ``since``, all its informers listed and watching under the current epoch."""
        assert self.leases is not None
        assert self.health is not None
        live = {w.name for w in self.system.live_watchers}
        for cluster_id in clusters or self.system.cluster_ids:
            owner = self.leases.owner(cluster_id)
            if owner is None or owner not in live:
                return False
            if not self.health.streaming(cluster_id, owner, self.leases.epoch(cluster_id), since=since):
                return False
        return True

    async def wait_streaming(self, since: float, what: str, timeout: float = 30.0) -> bool:
        began = time.monotonic()
        ok = await self.wait(
            lambda: self.all_streaming(since), timeout=timeout, what=f"{what}: all streaming"
        )
        if ok:
            self.log(f"  all clusters owned and streaming again after {time.monotonic() - began:.1f}s")
        return ok

    async def wait_ready(self, proc: Proc, timeout: float = 60.0) -> bool:
        return await self.wait(proc.ready, timeout=timeout, what=f"{proc.name} ready")

    # -- start --------------------------------------------------------------------------------
    async def start(self) -> None:
        s = self.system
        nats_kind = "a 3-node NATS cluster" if self.nats_cluster else "one nats-server"
        self.log(
            f"chaos {self.mode.name}: seed {self.seed}, {self.mode.clusters} clusters, {nats_kind}, "
            f"run dir {s.run_dir}"
        )
        await asyncio.to_thread(s.start_servers)
        await s.start_sink()
        s.start_kubesim(rate=self.mode.rate, concurrency=self.mode.concurrency)
        self.nc = await nats.connect(
            s.nats_urls, max_reconnect_attempts=-1, reconnect_time_wait=0.2, error_cb=self._nats_error
        )
        # A fresh cluster answers JetStream requests only once it has elected its meta leader.
        if not await self.wait(self._streams_created, timeout=60, what="streams created"):
            raise RuntimeError("could not create the streams")

    async def _streams_created(self) -> bool:
        """Every stream and both durable consumers, created (one attempt; ``wait`` retries)."""
        assert self.nc is not None
        js = self.nc.jetstream(timeout=5)
        await ensure_streams(js, self.stream_settings(self.mode.duplicate_window))
        # The durable consumers exist before any event, as in production (the notifier's starts at
        # NEW); the short mode shortens their redelivery so a run settles in seconds.
        for consumer in (NOTIFIER_CONSUMER, PERSISTER_CONSUMER):
            config = consumer.config
            if self.mode.ack_wait is not None:
                config = dataclasses.replace(config, ack_wait=self.mode.ack_wait)
            await js.add_consumer(consumer.stream, config=config)
        return True

    def stream_settings(self, duplicate_window: float) -> StreamSettings:
        return StreamSettings(
            jobs_duplicate_window_seconds=duplicate_window, stream_replicas=self.system.stream_replicas
        )

    async def start_services(self) -> None:
        s = self.system
        assert self.nc is not None
        self.health = observe.Health(self.nc)
        await self.health.start()
        self.leases = observe.Leases(s.redis.url, s.cluster_ids)
        self.leases.start()
        # Every service at once (they start slowly on a busy machine); the watchers find the
        # registry's clusters whenever they are registered (an event each).
        registry = s.start_registry()
        persister = s.start_persister()
        notifier = s.start_notifier()
        for _ in range(3):
            s.start_watcher()
        kubesim_up = await self.wait(self._kubesim_up, timeout=60, what="kubesim up")
        for proc in (registry, persister, notifier):
            if not await self.wait_ready(proc):
                raise RuntimeError(f"{proc.name} did not start:\n{proc.log_tail()}")
        if not kubesim_up:
            raise RuntimeError(f"kubesim did not start:\n{s.kubesim.log_tail() if s.kubesim else ''}")
        since = time.monotonic()
        for cluster in await self._kubesim_clusters():
            await self.add_cluster(cluster["name"], cluster["kubeconfig"])
        if not await self.wait_streaming(since, "start", timeout=90):
            raise RuntimeError("the watchers did not take every cluster:\n" + self._watcher_logs())
        self.log(f"started: {s.describe()}")

    async def _kubesim_up(self) -> bool:
        return bool((await self.kubesim("/healthz"))["clusters"] == self.mode.clusters)

    async def _kubesim_clusters(self) -> list[dict[str, str]]:
        assert self.system.kubesim is not None
        response = await self.http.get(f"http://127.0.0.1:{self.system.kubesim.port}/clusters")
        result: list[dict[str, str]] = response.json()
        return result

    async def add_cluster(self, cluster_id: str, kubeconfig: str) -> None:
        body = {"id": cluster_id, "name": f"chaos {cluster_id}", "kubeconfig": kubeconfig}
        response = await self.registry("POST", "/v1/clusters", body)
        if response.status_code not in (200, 201):
            raise RuntimeError(f"registering {cluster_id}: {response.status_code} {response.text}")

    async def _nats_error(self, exc: Exception) -> None:
        """The run restarts NATS on purpose: one line instead of nats-py's default traceback."""
        if self.nc is not None and not self.nc.is_reconnecting:
            print(f"chaos: runner's NATS client: {type(exc).__name__}", flush=True)

    def _watcher_logs(self) -> str:
        return "\n".join(f"--- {w.name}\n{w.log_tail(4)}" for w in self.system.watchers.values())

    # -- faults -------------------------------------------------------------------------------
    async def kill_watchers(self) -> None:
        assert self.leases is not None
        for n in range(1, self.mode.watcher_kills + 1):
            await self.stream_grows(20, 30, "events before a kill")
            victim = self.rng.choice(self.system.live_watchers)
            orphans = self.leases.owned_by(victim.name)
            victim.kill()
            self.log(f"fault: kill -9 watcher {victim.name} ({n}/{self.mode.watcher_kills}), owned {orphans}")
            await self.reowned_and_replaced(victim.name, orphans)

    async def reowned_and_replaced(self, victim: str, orphans: list[str]) -> None:
        """After a replica died: a replacement (a new pod) starts at once, as a Deployment's
        would; the dead one's clusters stream again under someone within the TTL, and the
        replacement gets its share."""
        killed = started = time.monotonic()
        replacement = self.system.start_watcher()
        await self.wait(lambda: self.all_streaming(killed, orphans), timeout=15, what=f"{victim}'s clusters")
        self.log(f"  its clusters owned and streaming again after {time.monotonic() - killed:.1f}s")

        def took_share() -> bool:
            return bool(self.leases and self.leases.owned_by(replacement.name)) and self.all_streaming(
                started
            )

        await self.wait(took_share, timeout=40, what=f"replacement {replacement.name} took a share")

    async def burst(self) -> int:
        body = {"jobs": self.mode.burst_jobs, "rate": self.mode.burst_rate}
        return int((await self.kubesim("/burst", body))["jobs"])

    async def burst_and_kill_consumers(self) -> None:
        s = self.system
        assert s.notifier is not None
        assert s.persister is not None
        waited_before = await s.notifier.metric("trainwatch_notifier_rate_limit_wait_seconds_total")
        jobs = await self.burst()
        self.log(f"fault: a burst of {jobs} jobs")

        async def rate_limited() -> bool:
            assert s.notifier is not None
            return (
                await s.notifier.metric("trainwatch_notifier_rate_limit_wait_seconds_total") > waited_before
            )

        await self.wait(rate_limited, timeout=30, what="the notifier waiting on a rate limit")
        s.notifier.kill()
        self.log("fault: kill -9 the notifier while it waits on a bot's rate limit")
        s.start_notifier()  # restarted at once, as a Deployment would
        await self.stream_grows(15, 20, "the burst going on")
        s.persister.kill()
        self.log("fault: kill -9 the persister mid-burst")
        s.start_persister()
        await self.wait_ready(s.persister)
        await self.wait_ready(s.notifier)
        self.log("  notifier and persister back")

    async def bot_down(self) -> None:
        s = self.system
        assert s.notifier is not None
        failed_before = await self._failed_sends()
        await s.sink.stop()
        down = time.monotonic()
        self.log(f"fault: the Feishu bot is down for {self.mode.bot_down:.0f}s")
        if await self.wait(
            lambda: self._failed_sends_above(failed_before), timeout=self.mode.bot_down, what="sends failing"
        ):
            s.notifier.kill()
            self.log("fault: kill -9 the notifier while it retries against the down bot")
            s.start_notifier()
            await self.wait_ready(s.notifier)
        await asyncio.sleep(max(0.0, down + self.mode.bot_down - time.monotonic()))  # the outage itself
        await s.start_sink()
        self.log("  the bot is back")

    async def _failed_sends(self) -> float:
        """Sends that found no bot to talk to (connection refused), not rate-limit answers."""
        assert self.system.notifier is not None
        return await self.system.notifier.metric("trainwatch_notifier_sends_total", result="transport")

    async def _failed_sends_above(self, before: float) -> bool:
        return await self._failed_sends() > before

    async def restart_nats(self) -> None:
        s = self.system
        assert s.nats is not None
        await asyncio.to_thread(s.nats.stop)
        self.log(f"fault: NATS stopped for {self.mode.nats_down:.0f}s")
        await asyncio.sleep(self.mode.nats_down)  # the outage itself
        await asyncio.to_thread(s.nats.start)
        back = time.monotonic()
        self.log("  NATS started again")
        assert self.nc is not None
        await self.wait(
            lambda: bool(self.nc and self.nc.is_connected), timeout=20, what="runner back on NATS"
        )
        await self.wait_streaming(back, "after NATS")
        for proc in s.services():
            await self.wait_ready(proc, timeout=30)

    # -- a three-node NATS cluster (``Mode.nats_cluster``) ---------------------------------------
    async def jobs_leaders(self) -> dict[str, str | None]:
        """The node leading the JOBS stream and each durable consumer on it (None: no leader)."""
        assert self.nc is not None
        js = self.nc.jetstream(timeout=2)
        leaders: dict[str, str | None] = {}
        stream = await js.stream_info("JOBS")
        leaders["JOBS"] = stream.cluster.leader if stream.cluster else None
        for durable in ("persister", "notifier"):
            consumer = await js.consumer_info("JOBS", durable)
            leaders[durable] = consumer.cluster.leader if consumer.cluster else None
        return leaders

    async def nats_current(self) -> bool:
        """Every stream, every KV bucket and both durable consumers have a leader and every
        other node as a current, online replica: the cluster can lose a node again."""
        assert self.nc is not None
        assert self.system.nats_cluster is not None
        js = self.nc.jetstream(timeout=2)
        others = len(self.system.nats_cluster.nodes) - 1
        streams = await js.streams_info()  # every stream and KV bucket, the notifier's too
        if len(streams) < len(stream_configs()) + 1:
            return False
        clusters = [info.cluster for info in streams]
        clusters += [(await js.consumer_info("JOBS", d)).cluster for d in ("persister", "notifier")]
        for cluster in clusters:
            if cluster is None or not cluster.leader:
                return False
            replicas = cluster.replicas or []
            if len(replicas) != others or not all(p.current and not p.offline for p in replicas):
                return False
        return True

    async def kill_nats_leader(self) -> None:
        """kill -9 the node leading the JOBS stream while the watchers publish and both consumers
        consume; the two others elect a new leader and go on. Then the node starts again on its
        store (a crashed pod restarted) and catches up."""
        cluster = self.system.nats_cluster
        assert cluster is not None
        await self.stream_grows(20, 30, "events before the node kill")
        leaders = await self.jobs_leaders()
        victim = leaders["JOBS"]
        assert victim is not None
        await asyncio.to_thread(cluster.node(victim).kill)
        killed = time.monotonic()
        self.log(f"fault: kill -9 NATS node {victim}, the JOBS stream leader (leaders: {leaders})")

        async def new_leader() -> bool:
            leader = (await self.jobs_leaders())["JOBS"]
            return leader is not None and leader != victim

        if await self.wait(new_leader, timeout=30, what="a new JOBS leader"):
            self.log(f"  new JOBS leader after {time.monotonic() - killed:.1f}s: {await self.jobs_leaders()}")
        if await self.stream_grows(20, 30, "events on two nodes"):
            self.log(f"  the stream grows again ({time.monotonic() - killed:.1f}s after the kill)")
        await self.wait_streaming(killed, "after the node kill")
        for proc in self.system.services():
            await self.wait_ready(proc, timeout=30)
        await asyncio.to_thread(cluster.node(victim).start)
        back = time.monotonic()
        self.log(f"  {victim} started again on its store")
        if await self.wait(self.nats_current, timeout=60, what=f"{victim} rejoined, every replica current"):
            self.log(f"  {victim} rejoined, every replica current after {time.monotonic() - back:.1f}s")

    async def roll_nats(self) -> None:
        """A rolling restart of the cluster, as an upgrade does it: each node in turn gets
        SIGTERM, starts again on its store, and the next goes only once every stream and
        consumer has all three replicas current again."""
        cluster = self.system.nats_cluster
        assert cluster is not None
        for node in cluster.nodes:
            await self.stream_grows(20, 30, f"events before restarting {node.server_name}")
            stopping = time.monotonic()
            await asyncio.to_thread(node.stop, 30.0)
            stopped = time.monotonic()
            await asyncio.to_thread(node.start)
            self.log(f"fault: NATS node {node.server_name} SIGTERM (stopped in {stopped - stopping:.1f}s), "
                     "started again")  # fmt: skip
            if await self.wait(self.nats_current, timeout=60, what=f"{node.server_name} current again"):
                took = time.monotonic() - stopping
                self.log(f"  {node.server_name} rejoined, every replica current after {took:.1f}s; "
                         f"leaders {await self.jobs_leaders()}")  # fmt: skip
        await self.wait_streaming(time.monotonic(), "after the rolling restart of NATS")
        for proc in self.system.services():
            await self.wait_ready(proc, timeout=30)

    async def roll_services(self) -> None:
        """A rolling restart of every service, as a rollout does it: one process at a time gets
        SIGTERM (its graceful stop), starts again with the same identity, and the next goes once
        it is ready (a watcher: once every cluster is owned and streaming again)."""
        s = self.system
        services = [s.registry, *s.live_watchers, s.persister, s.notifier]
        for proc in services:
            assert proc is not None
            await self.stream_grows(15, 30, f"events before restarting {proc.name}")
            stopping = time.monotonic()
            await proc.terminate(grace=20)
            exit_code = proc.process.returncode if proc.process is not None else None
            stopped = time.monotonic()
            proc.start()
            self.log(f"fault: {proc.name} SIGTERM (exit {exit_code} after {stopped - stopping:.1f}s), "
                     "started again")  # fmt: skip
            if proc.name in s.watchers:
                await self.wait_streaming(stopped, f"after restarting {proc.name}")
            if await self.wait_ready(proc):
                self.log(f"  {proc.name} ready {time.monotonic() - stopped:.1f}s after its start")

    async def restart_redis(self, *, keep_data: bool) -> None:
        s = self.system
        await asyncio.to_thread(s.redis.stop)
        if not keep_data:  # a fresh data dir: every lease, epoch, checkpoint and sent-marker gone
            for path in s.redis.workdir.iterdir():
                if path.name != s.redis.log_path.name and path.name != ".prepared":
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
        what = "with its data" if keep_data else "with a fresh data dir"
        self.log(f"fault: Redis stopped for {self.mode.redis_down:.0f}s, restarted {what}")
        await asyncio.sleep(self.mode.redis_down)  # the outage itself
        await asyncio.to_thread(s.redis.start)
        back = time.monotonic()
        await self.wait_streaming(back, f"after Redis ({what})")
        for proc in s.services():
            await self.wait_ready(proc, timeout=30)

    async def flush_redis(self) -> None:
        redis = Redis.from_url(self.system.redis.url)
        try:
            await redis.flushall()
        finally:
            await redis.aclose()
        flushed = time.monotonic()
        self.log("fault: Redis FLUSHALL (leases, epochs, checkpoints, notifier keys gone)")
        await self.wait_streaming(flushed, "after FLUSHALL")

    async def stop_postgres(self) -> None:
        s = self.system
        assert s.persister is not None
        await asyncio.to_thread(s.postgres.kill)
        self.log(f"fault: PostgreSQL down (kill -9) for {self.mode.postgres_down:.0f}s")
        await asyncio.sleep(self.mode.postgres_down)  # the outage itself
        await asyncio.to_thread(s.postgres.start)
        self.log("  PostgreSQL started again")
        await self.wait_ready(s.persister, timeout=60)

    async def drop_watches(self) -> None:
        dropped = (await self.kubesim("/faults/drop", {}))["dropped"]
        at = time.monotonic()
        self.log(f"fault: every watch dropped ({dropped})")
        await self.wait_streaming(at, "after the drop")

    async def gone_everywhere(self) -> None:
        # The blind window starts a little before the compaction: what the watches had not yet
        # delivered when it came (seed 41: a JobSet's last states, 0.35 s old) is as gone as
        # what comes after, for any client of the API.
        first = await self.truth_entries()
        await asyncio.sleep(UNDELIVERED_ALLOWANCE_SECONDS)  # part of the fault: the window's head
        result = await self.kubesim("/faults/compact", {})
        at = time.monotonic()
        self.log(
            f"fault: 410 everywhere (history compacted on {result['compacted']} clusters, watches dropped)"
        )
        await self.wait_streaming(at, "after 410")
        # Until every cluster streams again, a job that ends and is deleted cannot be seen by
        # anyone: the relist shows it gone (compare: "unobservable").
        self.blind_windows.append((first, await self.truth_entries()))

    async def truth_entries(self) -> int:
        return int((await self.kubesim("/stats"))["entries"])

    async def stall_cluster(self) -> None:
        cluster = self.rng.choice(self.system.cluster_ids)
        seconds = self.mode.read_timeout * 1.5 + 1
        await self.kubesim("/faults/stall", {"cluster": cluster, "seconds": seconds})
        self.log(
            f"fault: {cluster}'s watches stalled for {seconds:.0f}s "
            f"(read timeout {self.mode.read_timeout:.0f}s)"
        )
        await asyncio.sleep(seconds)  # the stall itself
        await self.wait_streaming(time.monotonic(), f"after the stall of {cluster}")

    async def rotate_credentials(self) -> None:
        cluster = self.rng.choice(self.system.cluster_ids)
        kubeconfig = (await self.kubesim("/rotate", {"cluster": cluster}))["kubeconfig"]
        at = time.monotonic()
        response = await self.registry("PATCH", f"/v1/clusters/{cluster}", {"kubeconfig": kubeconfig})
        self.log(f"fault: {cluster}'s token rotated (old one 401), registry updated: {response.status_code}")
        await self.wait_streaming(at, f"after rotating {cluster}")

    async def set_duplicate_window(self, seconds: float) -> None:
        """Change the JOBS stream's de-dup window in place (the server forgets older ids)."""
        assert self.nc is not None
        js = self.nc.jetstream()
        jobs = stream_configs(self.stream_settings(seconds))[0]
        await js.update_stream(config=jobs)

    async def remove_and_readd(self, *, after_window: bool) -> None:
        """Remove a cluster from the registry and register it again. Its jobs are held meanwhile,
        so every true change happens while it is watched and the truth stays comparable; the
        jobs that live across the removal go on afterwards.

        Within the window: production's window. After it: the window is shortened to
        ``short_window`` while the cluster is away, so the ids of its earlier events are
        forgotten as they would be 15 minutes later, and set back before it is re-added."""
        assert self.leases is not None
        cluster = self.rng.choice(self.system.cluster_ids)
        kubeconfig = next(c["kubeconfig"] for c in await self._kubesim_clusters() if c["name"] == cluster)
        await self.kubesim("/hold", {"cluster": cluster})
        held = time.monotonic()
        response = await self.registry("DELETE", f"/v1/clusters/{cluster}")
        window = self.mode.short_window if after_window else self.mode.duplicate_window
        when = "after" if after_window else "within"
        self.log(f"fault: {cluster} removed from the registry ({response.status_code}), "
                 f"re-added {when} the de-dup window ({window:.0f}s)")  # fmt: skip
        await self.wait(lambda: self.leases is not None and self.leases.owner(cluster) is None,
                        timeout=20, what=f"{cluster} released after removal")  # fmt: skip
        if after_window:
            await self.set_duplicate_window(window)
            await asyncio.sleep(max(0.0, held + window + 2 - time.monotonic()))  # the window itself
            # Forgotten ids stay forgotten when the window grows again (checked against
            # nats-server): the cluster's earlier ids are now as good as 15 minutes old.
            await self.set_duplicate_window(self.mode.duplicate_window)
        readded = time.monotonic()
        await self.add_cluster(cluster, kubeconfig)
        await self.wait(
            lambda: self.all_streaming(readded, [cluster]), timeout=30, what=f"{cluster} watched again"
        )
        await self.kubesim("/release", {"cluster": cluster})
        self.log(f"  {cluster} watched again after {time.monotonic() - readded:.1f}s; its jobs go on")

    async def lease_moves_while_notifier_lags(self) -> None:
        s = self.system
        assert s.notifier is not None
        assert self.leases is not None
        s.notifier.signal(signal.SIGSTOP)
        self.log("fault: the notifier stalls (SIGSTOP): it lags behind the stream")
        await self.stream_grows(30, 30, "events the notifier has not read")
        victim = self.rng.choice(self.system.live_watchers)
        moved = self.leases.owned_by(victim.name)
        victim.kill()
        self.log(f"fault: kill -9 watcher {victim.name} while the notifier lags: {moved} move")
        await self.reowned_and_replaced(victim.name, moved)
        await self.stream_grows(20, 30, "events under the new owners")
        s.notifier.signal(signal.SIGCONT)
        self.log("  the notifier resumes")
        await self.wait_ready(s.notifier)

    def schedule(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        if not self.mode.faults:
            return [("load", self.load)]
        steps = self.fault_steps()
        if self.nats_cluster:  # one node at a time instead of the whole of NATS at once
            at = next(i for i, (name, _) in enumerate(steps) if name == "restart NATS")
            steps[at : at + 1] = [(KILL_NATS_LEADER, self.kill_nats_leader), (ROLL_NATS, self.roll_nats)]
            steps.append((ROLL_SERVICES, self.roll_services))
        return [step for step in steps if not self.mode.only or step[0] in self.mode.only]

    def fault_steps(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        return [
            ("kill -9 watchers", self.kill_watchers),
            ("burst, kill -9 notifier and persister", self.burst_and_kill_consumers),
            ("bot down, kill -9 notifier", self.bot_down),
            ("restart NATS", self.restart_nats),
            ("restart Redis with its data", lambda: self.restart_redis(keep_data=True)),
            ("Redis FLUSHALL", self.flush_redis),
            ("restart Redis with a fresh data dir", lambda: self.restart_redis(keep_data=False)),
            ("stop PostgreSQL", self.stop_postgres),
            ("drop all watches", self.drop_watches),
            ("410 everywhere", self.gone_everywhere),
            ("stall a cluster past the read timeout", self.stall_cluster),
            ("rotate credentials", self.rotate_credentials),
            ("remove and re-add within the de-dup window", lambda: self.remove_and_readd(after_window=False)),
            ("remove and re-add after the de-dup window", lambda: self.remove_and_readd(after_window=True)),
            ("lease moves while the notifier lags", self.lease_moves_while_notifier_lags),
        ]

    async def load(self) -> None:
        want = self.mode.load_jobs * self.mode.clusters

        async def created() -> bool:
            return int((await self.kubesim("/stats"))["created"]) >= want

        await self.wait(created, timeout=900, what=f"{want} steady jobs created")
        jobs = await self.burst()
        self.log(f"load: {want} steady jobs created; a burst of {jobs} more")

    # -- the run ------------------------------------------------------------------------------
    async def run(self) -> Report:
        await self.start()
        await self.start_services()
        await self.kubesim("/scenarios/start", {})
        self.log("scenarios running")
        await self.stream_grows(30, 60, "warm-up events")
        for name, step in self.schedule():
            began = time.monotonic()
            self.steps.append((name, await self.truth_entries()))
            await step()
            self.log(f"step done: {name} ({time.monotonic() - began:.1f}s)")
        self.steps.append(("(after the last fault)", await self.truth_entries()))
        stopped = await self.kubesim("/scenarios/stop", {"timeout": 60})
        self.log(f"scenarios stopped: {stopped['entries']} true transitions, complete={stopped['complete']}")
        if not stopped["complete"]:
            self.problems.append("some lifecycles did not end within 60s: their truth is cut short")
        await self.settle()
        return await self.compare()

    async def settle(self) -> None:
        """Wait until the stream, SQL and the sink stop changing and both consumers have nothing
        pending, or the deadline passes (then compare what there is, and say so)."""
        assert self.nc is not None
        deadline = time.monotonic() + self.mode.settle_timeout
        last: tuple[Any, ...] | None = None
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            state: tuple[Any, ...]
            try:
                state = (
                    await self.stream_last_seq(),
                    await observe.sql_counts(self.system.database_url),
                    len(self.system.sink.received),
                    await observe.consumer_backlog(self.nc, "notifier"),
                    await observe.consumer_backlog(self.nc, "persister"),
                )
            except Exception as exc:  # a server still recovering
                state = ("error", repr(exc), -1, None, None)
            if state != last:
                last, quiet_since = state, time.monotonic()
            elif state[3:] == (0, 0) and time.monotonic() - quiet_since >= self.mode.quiet:
                self.log(f"settled: stream seq {state[0]}, SQL {state[1]}, {state[2]} cards")
                return
            await asyncio.sleep(0.5)
        self.problems.append(f"did not settle within {self.mode.settle_timeout:.0f}s: last state {last}")
        self.log(f"NOT settled within {self.mode.settle_timeout:.0f}s: {last}")
        await self.dump_tasks()

    async def dump_tasks(self) -> None:
        """Have the consumers and watchers log where each of their tasks waits (SIGUSR1), so a run
        that did not settle shows what held it up."""
        procs = [p for p in (self.system.notifier, self.system.persister) if p is not None]
        procs += self.system.live_watchers
        for proc in procs:
            proc.signal(signal.SIGUSR1)
        await self.wait(
            lambda: all("task dump:" in proc.log_tail(100_000) for proc in procs if proc.alive),
            timeout=20,
            what="task dumps logged",
        )
        self.log(f"task dumps (SIGUSR1) in the logs of {[proc.name for proc in procs]}")

    async def compare(self) -> Report:
        assert self.nc is not None
        entries = (await self.kubesim("/truth"))["entries"]
        truth = [TruthRow.from_dict(d, position) for position, d in enumerate(entries)]
        stored = await observe.read_stream(self.nc)
        sql = await observe.read_sql(self.system.database_url)
        cards, other = observe.cards_by_uid(list(self.system.sink.received))
        seen = Observations(
            stream=observe.stream_by_uid(stored),
            sql=sql.history,
            sql_final=sql.finals,
            cards=cards,
            sql_diagnosis=sql.diagnoses,
        )
        diagnoses = await self.kubesim("/diagnoses")
        report = compare(truth, seen, diagnoses, self.blind_windows)
        self.print_report(report, by_uid(truth), seen, other, await observe.deadletters(self.nc))
        return report

    def print_report(
        self,
        report: Report,
        truth: dict[str, list[TruthRow]],
        seen: Observations,
        other_cards: int,
        dead: dict[str, int],
    ) -> None:
        """The table and the failing jobs on stdout; everything (all failing jobs with their whole
        truth and what each surface held, the timeline) in ``report.txt`` of the run dir."""
        sink = self.system.sink
        lines = [
            "",
            "=== chaos report",
            f"mode {self.mode.name}, seed {self.seed}: {report.jobs} jobs, "
            f"{report.transitions} true transitions",
            report.table(),
            "(collapsed: intermediate states a relist may skip; lost: terminal states and deletions;",
            " out of order in the last line also counts 'never true' states)",
            f"sink answers: {dict(sink.answers)} (11232: the notifier exceeded a bot's rate limit); "
            f"non-job cards: {other_cards}; "
            f"lease moves seen: {self.leases.moves if self.leases else '?'}",
        ]
        if dead:
            lines.append("dead letters: " + ", ".join(f"{k}={v}" for k, v in sorted(dead.items())))
        for s in ("stream", "sql", "cards"):
            if report.unknown_jobs[s]:
                unknown = report.unknown_jobs[s]
                lines.append(f"{s}: {len(unknown)} jobs not in the truth, e.g. {unknown[:3]}")
        lines += self.lost_by_step(report)
        tail = []
        if self.problems:
            tail.append("conditions not met in time (reported, not failed on: the comparison decides):")
            tail += ["  " + p for p in self.problems]
        tail.append(f"logs and report.txt: {self.system.run_dir}")
        failing = report.failing_jobs(truth)
        head = ["failing jobs (surface uid cluster/namespace/kind/name: what):"] if failing else []
        print("\n".join([*lines, *head, *("  " + f for f in failing), *tail]), flush=True)
        everything = [*lines, *head, *("  " + f for f in report.failing_jobs(truth, per_surface=None)), *tail]
        everything += ["", "=== failing jobs in full (truth, then each surface in its order)"]
        for uid in sorted({r.uid for s in SURFACES for r in report.results[s] if r.failed}):
            everything += job_detail(uid, truth.get(uid, []), seen)
        everything += ["", "=== timeline", *self.timeline]
        (self.system.run_dir / "report.txt").write_text("\n".join(everything) + "\n")

    def lost_by_step(self, report: Report) -> list[str]:
        """Lost states by the step during which they were *written* (the cause may be a later
        step: a state kept only in a checkpoint that a later Redis wipe forgets)."""
        if not any(report.lost_positions.values()):
            return []
        starts = [start for _, start in self.steps]
        counts: dict[str, dict[str, int]] = {}
        for surface, positions in report.lost_positions.items():
            for position in positions:
                name = self.steps[bisect.bisect_right(starts, position) - 1][0]
                counts.setdefault(name, {}).setdefault(surface, 0)
                counts[name][surface] += 1
        in_stream = set(report.lost_positions["cards"]) - set(report.lost_positions["stream"])
        lines = [
            f"lost cards whose state the stream does hold (the notifier's own losses): {len(in_stream)}"
            f" of {len(report.lost_positions['cards'])}",
            "lost, by the step during which the true state was written (stream/sql/cards):",
        ]
        for name, _ in self.steps:
            if name in counts:
                c = counts[name]
                lines.append(f"  {name}: {c.get('stream', 0)}/{c.get('sql', 0)}/{c.get('cards', 0)}")
        return lines

    async def close(self) -> None:
        if self.leases is not None:
            await self.leases.stop()
        if self.health is not None:
            await self.health.stop()
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await self.nc.close()
        await self.http.aclose()
        await self.system.stop_all()


def job_detail(uid: str, rows: list[TruthRow], seen: Observations) -> list[str]:
    def states(items: list[Seen]) -> str:
        return ", ".join(
            f"{fmt(state_key(i.change, i.phase, i.sub_phase, i.terminal))}[{i.detail}]" for i in items
        )

    first = rows[0] if rows else None
    who = f"{first.cluster}/{first.namespace}/{first.kind}/{first.name}" if first else "?"
    truth = ", ".join(fmt(state_key(r.change, r.phase, r.sub_phase, r.terminal)) for r in rows)
    cards = ", ".join(f"{c.phase}{'*' if c.terminal else ''}" for c in seen.cards.get(uid, []))
    return [
        f"{uid} {who}",
        f"  truth  {truth}",
        f"  stream {states(seen.stream.get(uid, []))}",
        f"  sql    {states(seen.sql.get(uid, []))}; final {fmt(seen.sql_final.get(uid, ABSENT))}",
        f"  cards  {cards}",
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m chaos", description="Trainwatch's bounded chaos run")
    parser.add_argument("--mode", choices=sorted(MODES), default="short")
    parser.add_argument("--seed", type=int, default=None, help="the fault schedule's seed (default: random)")
    parser.add_argument(
        "--run-dir", type=Path, default=None, help="logs and data (default .artifacts/chaos/...)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the run dir even when the run passes")
    parser.add_argument(
        "--nats-cluster",
        action="store_true",
        help="NATS as a three-node JetStream cluster (streams R3): its nodes killed and rolled "
        "instead of one server restarted, and every service restarted in turn (the ha mode's faults)",
    )
    return parser.parse_args(argv)


async def amain(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 100_000)
    mode = MODES[args.mode]
    run_dir = args.run_dir or ROOT / ".artifacts" / "chaos" / f"{mode.name}-{seed}-{time.strftime('%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    print(f"chaos seed: {seed}", flush=True)
    chaos = Chaos(mode, seed, run_dir, nats_cluster=args.nats_cluster)
    main_task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # Ctrl-C: cancel the run, then clean up below
        loop.add_signal_handler(sig, lambda: main_task.cancel() if main_task else None)
    began = time.monotonic()
    report: Report | None = None
    try:
        report = await chaos.run()
    except asyncio.CancelledError:
        print("chaos: interrupted; stopping every process", flush=True)
    except Exception as exc:
        print(f"chaos: the run failed: {exc!r}", flush=True)
    finally:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(chaos.close())
    took = time.monotonic() - began
    if report is None:
        print(f"chaos: run did not complete (seed {seed}, {took:.0f}s)")
        return 2
    print(f"seed {seed}, mode {mode.name}, {took:.0f}s")
    if not report.failed and not args.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    print(report.summary_line(), flush=True)
    return 1 if report.failed else 0


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return asyncio.run(amain(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
