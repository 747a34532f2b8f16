"""The ownership loop: which clusters this replica watches, proven by Redis leases.

Every ``tick`` (TTL/10, at most 1 s) one ``ClaimLoop``:

1. stops every cluster whose lease it can no longer prove (below);
2. renews the leases due (every TTL/3, by compare-and-set in ``trainwatch_common.leases``, all
   due leases in one pipelined round trip);
3. heartbeats (``membership``) and learns the live replicas;
4. asks ``sharding.plan`` what to do: clusters no longer desired and clusters beyond my quota
   are handed off (``stop_cluster``, which returns once the cluster's checkpoint is written,
   then release, so the next owner resumes where I stopped); under my quota, it reads who holds
   the other clusters (one MGET) and takes free ones in rendezvous order, each with a new
   fencing epoch, calling ``start_cluster(cluster_id, epoch)``. A renewal that finds the lease
   in someone else's name stops that cluster at once.

**Never two owners at once.** A lease is proven until ``sent + TTL * 2/3``, where ``sent`` is when
the last successful acquire or renew was *sent* (Redis started the TTL no earlier). Past that
deadline the cluster is stopped, whether Redis is down, slow or the loop itself was blocked:
deadlines are checked before anything else in a tick, the loop sleeps no longer than the next
deadline, and every Redis call is cut off at the next deadline. That leaves TTL/3 for
``stop_cluster`` before anyone else can acquire. ``holds(cluster_id, epoch)`` answers the same
question synchronously, for a publisher to check before each publish: after a process pause
(SIGSTOP, a long GC) the informers may run before this loop does, and ``holds`` is already false.
Leases given up this way are released (compare-and-set) once Redis answers again, so reclaiming
after an outage waits for no TTL; the reclaim takes a new epoch.

**Replicated Redis.** With ``lease_replicas`` (default 1 under Sentinel) an acquisition or a
renewal counts only once that many replicas confirmed it (``LeaseManager``: ``WAIT``); one that
they did not confirm is treated as Redis trouble (retried next tick, the deadline unchanged). So
the sentence above holds across a failover that loses the master's last writes: the promoted
replica has every lease and epoch counter a replica acted on (README, "Redis Sentinel").

**The callbacks.** ``start_cluster(cluster_id, epoch)`` must return quickly (start a task).
``stop_cluster(cluster_id, reason)`` must return only once nothing of that cluster can publish
any more. For a reason in ``GRACEFUL_REASONS`` (handoff, removed, shutdown) the lease was
renewed just before, and the callback may drain (confirm in-flight publishes, write the
checkpoint) for up to ``stop_budget`` seconds (TTL/3 less a tick and a Redis timeout: 3.2 s at
TTL 10 s), so the next owner resumes where this one stopped. Any other reason (deadline, lost,
failed) means the lease is not proven: cancel at once, publish nothing more.

**Shutdown.** Cancel the task running ``run()`` (nothing is released: that is a crash), then
await ``release_all()``: renews, stops every cluster (reason "shutdown"), releases every lease
and leaves the membership, so the others take over within a tick.

Time comes from an injectable ``clock`` (monotonic seconds), so tests can jump it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import Field
from redis.asyncio import Redis
from redis.exceptions import RedisError

from trainwatch_common.leases import Lease, LeaseManager, LeaseNotReplicated, new_holder
from trainwatch_common.redis_connection import uses_sentinel
from trainwatch_common.settings import ServiceSettings
from trainwatch_watcher import sharding
from trainwatch_watcher.membership import Membership

log = logging.getLogger(__name__)

T = TypeVar("T")
StartCluster = Callable[[str, int], Awaitable[None]]
StopCluster = Callable[[str, str], Awaitable[None]]  # (cluster_id, reason)

# Reasons a cluster is stopped while its lease is still proven: the callback may drain (finish
# acknowledging in-flight publishes and write the checkpoint) within ``ClaimLoop.stop_budget``.
# Any other reason ("deadline", "lost", "failed") means: stop now, publish nothing more.
GRACEFUL_REASONS = frozenset({"handoff", "removed", "shutdown"})


class ClaimSettings(ServiceSettings):
    """The claim loop's settings (TRAINWATCH_LEASE_TTL_MS, ...), for the watcher's settings to inherit."""

    lease_ttl_ms: int = Field(10_000, ge=300, description="Cluster lease TTL; renewed every TTL/3")
    claim_tick: float | None = Field(
        None, gt=0, description="Seconds between claim ticks (default TTL/10, at most 1 s)"
    )
    redis_prefix: str = Field(
        "trainwatch", description="Prefix of lease, epoch and membership keys (the notifier reads the epochs)"
    )
    lease_replicas: int | None = Field(
        None,
        ge=0,
        description="Redis replicas that must confirm (WAIT) a lease acquisition or renewal before it "
        "counts; default 1 with TRAINWATCH_REDIS_SENTINELS, 0 with a URL (README: Redis Sentinel)",
    )

    def lease_replicas_required(self) -> int:
        if self.lease_replicas is not None:
            return self.lease_replicas
        return 1 if uses_sentinel(self) else 0


class ClaimMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.owned_clusters = Gauge(
            "trainwatch_watcher_owned_clusters", "Clusters whose lease this replica holds", registry=r
        )
        self.quota = Gauge(
            "trainwatch_watcher_cluster_quota", "Clusters this replica should hold", registry=r
        )
        self.live_replicas = Gauge(
            "trainwatch_watcher_live_replicas", "Watcher replicas heartbeating", registry=r
        )
        self.lease_renew_failures = Counter(
            "trainwatch_watcher_lease_renew_failures",
            "Lease renewals that failed: error (Redis unreachable or slow), lost (someone else holds it)",
            ["reason"],
            registry=r,
        )
        self.lease_unconfirmed = Counter(
            "trainwatch_watcher_lease_unconfirmed",
            "Lease acquisitions and renewal batches that too few Redis replicas confirmed (WAIT): "
            "not counted, as if Redis were unreachable",
            ["operation"],
            registry=r,
        )
        self.lease_acquisitions = Counter(
            "trainwatch_watcher_lease_acquisitions", "Leases acquired (each with a new epoch)", registry=r
        )
        self.clusters_released = Counter(
            "trainwatch_watcher_clusters_given_up",
            "Clusters stopped, by reason: handoff, removed, lost, deadline, shutdown, failed",
            ["reason"],
            registry=r,
        )


@dataclass(slots=True)
class _Held:
    lease: Lease
    proven_at: float  # clock() when the last successful acquire/renew was sent


class _DeadlineReached(Exception):
    """A lease's safety deadline arrives before this Redis call could finish."""


_REDIS_TROUBLE = (RedisError, OSError, TimeoutError, _DeadlineReached)
_RENEW_BATCH = 500  # leases per pipelined round trip


class ClaimLoop:
    def __init__(
        self,
        redis: Redis,
        *,
        replica_id: str,
        start_cluster: StartCluster,
        stop_cluster: StopCluster,
        ttl_ms: int = 10_000,
        tick: float | None = None,
        prefix: str = "trainwatch",
        lease_replicas: int = 0,
        clock: Callable[[], float] = time.monotonic,
        metrics: ClaimMetrics | None = None,
    ) -> None:
        self.replica_id = replica_id
        self._redis = redis
        self._start_cluster = start_cluster
        self._stop_cluster = stop_cluster
        self._clock = clock
        self.metrics = metrics or ClaimMetrics()
        # WAIT for the replicas within TTL/10: well inside a Redis call's budget (TTL/4, _call).
        self.leases = LeaseManager(redis, prefix=prefix, ttl_ms=ttl_ms, replicas=lease_replicas)
        self.membership = Membership(redis, replica_id=replica_id, prefix=prefix, ttl_ms=ttl_ms)
        ttl = ttl_ms / 1000
        self.ttl = ttl
        self.renew_every = ttl / 3
        self.proven_for = ttl * 2 / 3
        self.tick_interval = tick if tick is not None else min(1.0, ttl / 10)
        self._op_timeout = ttl / 4
        # A graceful stop starts right after a renewal, so the lease stays proven this long.
        self.stop_budget = self.proven_for - self.tick_interval - self._op_timeout
        self._held: dict[str, _Held] = {}
        self._stale: dict[str, Lease] = {}  # given up without releasing: release when Redis answers
        self._desired: set[str] | None = None  # None: not known yet, acquire nothing
        self.replicas: list[str] = []
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._closed = False
        self._redis_ok = True

    # -- what callers read and say -------------------------------------------------------------
    def owned(self) -> dict[str, int]:
        """Cluster → epoch of the leases I hold (proven or not yet given up)."""
        return {cluster_id: held.lease.epoch for cluster_id, held in self._held.items()}

    def holds(self, cluster_id: str, epoch: int | None = None) -> bool:
        """True while my lease on ``cluster_id`` (with ``epoch``, if given) is proven."""
        held = self._held.get(cluster_id)
        if held is None or (epoch is not None and held.lease.epoch != epoch):
            return False
        return self._clock() < held.proven_at + self.proven_for

    def connection_proof(self, cluster_id: str) -> str | None:
        """The value of my lease on ``cluster_id`` (it holds a secret nonce), which the registry
        asks for before it hands out the cluster's kubeconfig; None if I do not hold it."""
        held = self._held.get(cluster_id)
        return held.lease.value if held is not None else None

    @property
    def redis_ok(self) -> bool:
        """Whether the last tick reached Redis (for /readyz)."""
        return self._redis_ok

    def set_desired(self, cluster_ids: Iterable[str]) -> None:
        """The clusters that should be watched by someone (from the registry); wakes the loop."""
        self._desired = set(cluster_ids)
        self._wake.set()

    # -- the loop ------------------------------------------------------------------------------
    async def run(self) -> None:
        """Tick forever. Cancelling it releases nothing; call ``release_all`` for that."""
        task = asyncio.current_task()
        while True:
            try:
                await self.tick()
            except Exception:  # a bug, not an outage (those are handled in tick): log, keep going
                log.exception("claims: tick failed", extra={"replica": self.replica_id})
            # Python 3.11's asyncio.wait_for (used inside redis-py) can swallow a cancellation that
            # races with a completed read; honour the request here instead of ticking on forever.
            if task is not None and task.cancelling():
                raise asyncio.CancelledError
            await self._sleep()

    async def _sleep(self) -> None:
        # Renewals ride on ticks (see _renew_due); only a lease deadline (Redis down) wakes earlier.
        now = self._clock()
        delay = self.tick_interval
        for held in self._held.values():
            due = held.proven_at + self.proven_for
            if due > now:
                delay = min(delay, due - now)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(delay, 0.0)):
                await self._wake.wait()

    async def tick(self) -> None:
        async with self._lock:
            if self._closed:
                return
            self._wake.clear()  # a set_desired from now on wakes the sleep after this tick
            await self._enforce_deadlines()
            try:
                await self._sync()
            except _REDIS_TROUBLE as exc:
                if self._redis_ok:  # log the change, not every tick of an outage
                    log.warning(
                        "claims: Redis unavailable",
                        extra={"replica": self.replica_id, "error": f"{type(exc).__name__}: {exc}"},
                    )
                self._redis_ok = False
            else:
                if not self._redis_ok:
                    log.info("claims: Redis reachable again", extra={"replica": self.replica_id})
                self._redis_ok = True
            await self._enforce_deadlines()
            self.metrics.owned_clusters.set(len(self._held))

    async def _sync(self) -> None:
        await self._renew_due()  # first: the leases I hold matter more than anything else here
        await self._release_stale()
        self.replicas = await self._call(self.membership.heartbeat)
        self.metrics.live_replicas.set(len(self.replicas))
        if self._desired is None:
            return
        step = sharding.plan(
            me=self.replica_id, replicas=self.replicas, desired=self._desired, owned=self._held
        )
        self.metrics.quota.set(step.quota)
        if step.drop or step.hand_off:
            await self._renew_due(force=True)  # a full stop budget for the graceful stops below
        await self._give_up(step.drop, reason="removed", release=True)
        await self._give_up(step.hand_off, reason="handoff", release=True)
        if step.want == 0:
            return  # at my quota: no need to read who holds the rest (the steady state)
        free = set(self._desired) - set(self._held)
        holders = await self._read_holders(free)
        others = {c: value for c, value in holders.items() if value is not None}
        step = sharding.plan(
            me=self.replica_id, replicas=self.replicas, desired=self._desired, owned=self._held, others=others
        )
        await self._acquire(step.acquire, step.want)

    async def _call(self, operation: Callable[[], Awaitable[T]]) -> T:
        """One Redis call, cut off at the next lease deadline (and at TTL/4 in any case)."""
        now = self._clock()
        budget = self._op_timeout
        for held in self._held.values():
            budget = min(budget, held.proven_at + self.proven_for - now)
        if budget <= 0:
            raise _DeadlineReached
        try:
            async with asyncio.timeout(budget):
                return await operation()
        except TimeoutError:
            raise _DeadlineReached from None

    async def _release_stale(self) -> None:
        for cluster_id, lease in list(self._stale.items()):
            await self._call(partial(self.leases.release, lease))
            del self._stale[cluster_id]

    async def _renew_due(self, *, force: bool = False) -> None:
        # Renew what falls due before the next tick too, all in one pipelined round trip: leases
        # acquired a few ms apart are renewed together instead of each costing a tick.
        horizon = math.inf if force else self._clock() + self.tick_interval
        due = [held for held in self._held.values() if horizon >= held.proven_at + self.renew_every]
        for start in range(0, len(due), _RENEW_BATCH):
            batch = due[start : start + _RENEW_BATCH]
            sent = self._clock()
            try:
                renewed = await self._call(partial(self.leases.renew_many, [held.lease for held in batch]))
            except LeaseNotReplicated:
                self.metrics.lease_unconfirmed.labels("renew").inc()
                self.metrics.lease_renew_failures.labels("error").inc()
                raise
            except _REDIS_TROUBLE:
                self.metrics.lease_renew_failures.labels("error").inc()
                raise
            lost = []
            for held, ok in zip(batch, renewed, strict=True):
                if ok:
                    held.proven_at = sent
                else:
                    lost.append(held.lease.name)
            if lost:
                self.metrics.lease_renew_failures.labels("lost").inc(len(lost))
                await self._give_up(lost, reason="lost", release=False)

    async def _read_holders(self, cluster_ids: Collection[str]) -> dict[str, str | None]:
        ordered = sorted(cluster_ids)
        if not ordered:
            return {}
        keys = [self.leases.lease_key(c) for c in ordered]
        values = await self._call(partial(self._redis.mget, keys))
        return {c: (v.decode() if isinstance(v, bytes) else v) for c, v in zip(ordered, values, strict=True)}

    async def _acquire(self, candidates: list[str], want: int) -> None:
        got = 0
        renew_check_at = self._clock() + self.tick_interval
        for cluster_id in candidates:
            if got >= want:
                return
            if self._clock() >= renew_check_at:
                # Taking a thousand clusters (each one round trip, each starting a worker that
                # opens its watches on this event loop) can outlast the first leases' renewal
                # time: renew them between acquisitions, or they lapse and their clusters stop.
                await self._renew_due()
                renew_check_at = self._clock() + self.tick_interval
            sent = self._clock()
            holder = new_holder(self.replica_id)  # a nonce per acquisition: see connection_proof
            try:
                lease = await self._call(partial(self.leases.acquire, cluster_id, holder))
            except LeaseNotReplicated:
                self.metrics.lease_unconfirmed.labels("acquire").inc()
                raise  # like Redis trouble: try again next tick
            if lease is None:
                continue  # someone was quicker
            self._held[cluster_id] = _Held(lease, proven_at=sent)
            self.metrics.lease_acquisitions.inc()
            self.metrics.owned_clusters.set(len(self._held))
            got += 1
            log.info("claims: acquired", extra={"replica": self.replica_id, "cluster": cluster_id,
                                                "epoch": lease.epoch})  # fmt: skip
            try:
                await self._start_cluster(cluster_id, lease.epoch)
            except Exception:
                log.exception("claims: start_cluster failed", extra={"cluster": cluster_id})
                await self._give_up([cluster_id], reason="failed", release=True)

    async def _enforce_deadlines(self) -> None:
        now = self._clock()
        expired = [c for c, held in self._held.items() if now >= held.proven_at + self.proven_for]
        if expired:
            log.warning(
                "claims: leases no longer proven, stopping",
                extra={"replica": self.replica_id, "clusters": len(expired)},
            )
        await self._give_up(expired, reason="deadline", release=False)

    # -- giving clusters up --------------------------------------------------------------------
    async def _give_up(self, cluster_ids: Iterable[str], *, reason: str, release: bool) -> None:
        """Stop the clusters (concurrently: a deadline may cover many), then release their leases.

        A cluster whose ``stop_cluster`` fails stays held (and renewed) and is tried again next
        tick: releasing a cluster that may still be emitting could make two owners.
        """
        targets = [c for c in cluster_ids if c in self._held]
        if not targets:
            return
        stopped: list[str] = []

        async def stop(cluster_id: str) -> None:
            try:
                await self._stop_cluster(cluster_id, reason)
            except Exception:
                log.exception("claims: stop_cluster failed", extra={"cluster": cluster_id})
                return
            stopped.append(cluster_id)

        async with asyncio.TaskGroup() as group:
            for cluster_id in targets:
                group.create_task(stop(cluster_id), name=f"claims stop {cluster_id}")
        for cluster_id in stopped:
            held = self._held.pop(cluster_id)
            self.metrics.clusters_released.labels(reason).inc()
            log.info("claims: gave up", extra={"replica": self.replica_id, "cluster": cluster_id,
                                               "epoch": held.lease.epoch, "reason": reason})  # fmt: skip
            if reason != "lost":
                self._stale[cluster_id] = held.lease  # released below, or when Redis answers
        self.metrics.owned_clusters.set(len(self._held))
        if release:
            await self._release_stale()

    async def release_all(self, *, timeout: float | None = None) -> None:
        """Graceful shutdown: stop every cluster, release every lease, leave the membership.

        The loop does nothing afterwards. Redis errors are logged (the leases then expire by TTL).
        """
        async with self._lock:
            self._closed = True
            with contextlib.suppress(*_REDIS_TROUBLE):
                await self._renew_due(force=True)  # a full stop budget for draining
            await self._enforce_deadlines()
            await self._give_up(list(self._held), reason="shutdown", release=False)
            try:
                async with asyncio.timeout(timeout if timeout is not None else self.ttl):
                    for lease in list(self._stale.values()):
                        await self.leases.release(lease)
                    self._stale.clear()
                    await self.membership.leave()
            except (RedisError, OSError, TimeoutError) as exc:
                log.warning("claims: release at shutdown incomplete", extra={"error": str(exc)})
            self.metrics.owned_clusters.set(0)

    @property
    def next_deadline(self) -> float:
        """The clock time when the first held lease stops being proven (inf if none)."""
        return min((h.proven_at + self.proven_for for h in self._held.values()), default=math.inf)
