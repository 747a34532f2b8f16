"""In-process watcher replicas for the scaling tests: a real ``ClaimLoop`` each, on real Redis,
with fake per-cluster machinery that records what it was told to start and stop.

``Ledger`` is shared by all replicas of a test and checks, at every start, the two promises of
the claims layer: the epoch of a cluster only grows, and no other replica still *proves* the
cluster (``holds``) when a new owner starts it, i.e. two owners never emit at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field

from redis.asyncio import Redis

from trainwatch_watcher.claims import GRACEFUL_REASONS, ClaimLoop


@dataclass
class Ledger:
    replicas: dict[str, Replica] = field(default_factory=dict)
    # (time, replica, "start" or "stop", cluster, epoch)
    log: list[tuple[float, str, str, str, int]] = field(default_factory=list)
    last_epoch: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def started(self, replica: Replica, cluster_id: str, epoch: int) -> None:
        if epoch <= self.last_epoch.get(cluster_id, 0):
            self.violations.append(f"{cluster_id}: epoch {epoch} after {self.last_epoch[cluster_id]}")
        self.last_epoch[cluster_id] = epoch
        for other in self.replicas.values():
            if other is not replica and cluster_id in other.running and other.loop.holds(cluster_id):
                self.violations.append(f"{cluster_id}: {replica.id} started while {other.id} still owns it")
        self.log.append((time.monotonic(), replica.id, "start", cluster_id, epoch))

    def stopped(self, replica: Replica, cluster_id: str, epoch: int) -> None:
        self.log.append((time.monotonic(), replica.id, "stop", cluster_id, epoch))

    def starts_since(self, mark: int) -> int:
        return sum(1 for entry in self.log[mark:] if entry[2] == "start")

    def owners(self) -> dict[str, str]:
        """Cluster → the replica running it now."""
        return {c: r.id for r in self.replicas.values() for c in r.running}

    def shares(self) -> dict[str, int]:
        counts = Counter(self.owners().values())
        return {r.id: counts.get(r.id, 0) for r in self.replicas.values() if r.task is not None}


class Replica:
    """One watcher replica as far as claims go: a ClaimLoop whose clusters are a dict."""

    def __init__(self, ledger: Ledger, redis_url: str, replica_id: str, *, ttl_ms: int, prefix: str) -> None:
        self.id = replica_id
        self.ledger = ledger
        self.redis = Redis.from_url(redis_url)
        self.running: dict[str, int] = {}  # cluster → epoch, as the per-cluster machinery would hold
        self.loop = self.make_loop(ttl_ms=ttl_ms, prefix=prefix)
        self.task: asyncio.Task[None] | None = None
        ledger.replicas[replica_id] = self

    def make_loop(self, *, ttl_ms: int, prefix: str) -> ClaimLoop:
        return ClaimLoop(
            self.redis,
            replica_id=self.id,
            start_cluster=self.start_cluster,
            stop_cluster=self.stop_cluster,
            ttl_ms=ttl_ms,
            prefix=prefix,
        )

    async def start_cluster(self, cluster_id: str, epoch: int) -> None:
        self.running[cluster_id] = epoch
        self.ledger.started(self, cluster_id, epoch)

    async def stop_cluster(self, cluster_id: str, reason: str) -> None:
        epoch = self.running.pop(cluster_id)
        if reason in GRACEFUL_REASONS and not self.loop.holds(cluster_id, epoch):
            self.ledger.violations.append(f"{cluster_id}: graceful stop ({reason}) without a proven lease")
        self.ledger.stopped(self, cluster_id, epoch)

    def start(self, desired: list[str]) -> None:
        self.loop.set_desired(desired)
        self.task = asyncio.create_task(self.loop.run(), name=f"claim loop {self.id}")

    async def _cancel(self) -> None:
        task, self.task = self.task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def crash(self) -> dict[str, int]:
        """Die without releasing anything (kill -9): returns what it was running."""
        await self._cancel()
        running, self.running = self.running, {}
        return running

    async def shutdown(self) -> None:
        """SIGTERM: stop the loop, then release every lease at once."""
        await self._cancel()
        await self.loop.release_all()

    async def close(self) -> None:
        await self._cancel()
        await self.redis.aclose()


class Fleet:
    """The replicas of one test; ``close`` stops them all."""

    def __init__(self, redis_url: str, clusters: list[str], *, ttl_ms: int, prefix: str = "tw") -> None:
        self.ledger = Ledger()
        self.redis_url = redis_url
        self.clusters = clusters
        self.ttl_ms = ttl_ms
        self.prefix = prefix
        self._next = 0

    def add(self, replica_type: type[Replica] = Replica) -> Replica:
        replica = replica_type(
            self.ledger, self.redis_url, f"r{self._next}", ttl_ms=self.ttl_ms, prefix=self.prefix
        )
        self._next += 1
        replica.start(self.clusters)
        return replica

    @property
    def live(self) -> list[Replica]:
        return [r for r in self.ledger.replicas.values() if r.task is not None]

    def settled(self, share: int | None = None) -> bool:
        """Every cluster runs on exactly one live replica and the shares differ by at most one."""
        owners = self.ledger.owners()
        shares = self.ledger.shares()
        if sorted(owners) != sorted(self.clusters) or not shares:
            return False
        low, high = min(shares.values()), max(shares.values())
        if share is not None:
            return low == high == share
        return high - low <= 1 and all(len(r.loop.replicas) == len(self.live) for r in self.live)

    async def close(self) -> None:
        for replica in self.ledger.replicas.values():
            await replica.close()
