"""Which clusters this replica runs: the registry's desired set, intersected with the leases held.

Two sources change it, and both await between reading ownership and acting on it:

- the cluster feed calls ``apply(desired)`` with the registry's whole set after every change:
  removed clusters are stopped and their checkpoints forgotten, owned clusters get their new
  spec (the supervisor rebuilds a worker only when the connection or the epoch changed), and
  the claim loop learns what to share out;
- the claim loop calls ``start_owned`` after it acquired a lease and ``stop_owned`` when it gives
  one up.

One lock makes these changes one at a time, so a cluster removed from the registry while its
lease was being acquired is never started. The one exception is on purpose: a graceful stop
(handoff, removed, shutdown) drains the cluster *outside* the lock. The claim loop stops many
clusters at once, and their drains must overlap to fit in one stop budget; the stop itself
(after which nothing of the cluster publishes) happens under the lock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from trainwatch_common.events.clusters import ClusterSpec
from trainwatch_watcher.claims import GRACEFUL_REASONS

log = logging.getLogger(__name__)


class Supervisor(Protocol):
    """What ownership needs of ``supervisor.ClusterSupervisor``."""

    def cluster_ids(self) -> set[str]: ...

    async def start_cluster(self, spec: ClusterSpec, *, epoch: int = 0) -> None: ...

    async def drain_cluster(self, cluster_id: str, *, timeout: float) -> bool: ...

    async def stop_cluster(self, cluster_id: str, *, forget_state: bool = False) -> None: ...


class Claims(Protocol):
    """What ownership needs of ``claims.ClaimLoop``."""

    stop_budget: float

    def owned(self) -> dict[str, int]: ...

    def holds(self, cluster_id: str, epoch: int | None = None) -> bool: ...

    def set_desired(self, cluster_ids: Iterable[str]) -> None: ...


class ClusterOwnership:
    """The watched set of one replica. Bind the claim loop (``bind``) before the first ``apply``.

    ``on_change(n)`` is told the number of clusters watched after every change (a gauge);
    ``applied`` is set once the first desired set was applied (readiness)."""

    def __init__(
        self,
        supervisor: Supervisor,
        *,
        on_change: Callable[[int], None] = lambda n: None,
        applied: asyncio.Event | None = None,
    ) -> None:
        self._supervisor = supervisor
        self._on_change = on_change
        self._claims: Claims | None = None
        self._specs: dict[str, ClusterSpec] = {}  # the desired clusters, whoever owns them
        self._changing = asyncio.Lock()
        self.applied = applied or asyncio.Event()

    def bind(self, claims: Claims) -> None:
        self._claims = claims

    @property
    def claims(self) -> Claims:
        if self._claims is None:
            raise RuntimeError("ClusterOwnership used before bind(claims)")
        return self._claims

    def desired(self) -> dict[str, ClusterSpec]:
        return dict(self._specs)

    async def apply(self, desired: Mapping[str, ClusterSpec]) -> None:
        """A new desired set: forget removed clusters, give owned ones their new spec, and let
        the claim loop share out the rest."""
        claims = self.claims
        async with self._changing:
            removed = set(self._specs) - set(desired)
            self._specs = dict(desired)
            for cluster_id in sorted(removed & self._supervisor.cluster_ids()):
                await self._supervisor.stop_cluster(cluster_id, forget_state=True)
            for cluster_id, epoch in claims.owned().items():
                if cluster_id in desired and claims.holds(cluster_id, epoch):
                    await self._supervisor.start_cluster(desired[cluster_id], epoch=epoch)
            claims.set_desired(self._specs.keys())
            self._changed()
        self.applied.set()

    async def start_owned(self, cluster_id: str, epoch: int) -> None:
        """The claim loop acquired ``cluster_id`` with ``epoch``: watch it, unless it left the
        registry meanwhile."""
        async with self._changing:
            spec = self._specs.get(cluster_id)
            if spec is not None:
                await self._supervisor.start_cluster(spec, epoch=epoch)
            self._changed()

    async def stop_owned(self, cluster_id: str, reason: str) -> None:
        """The claim loop gives ``cluster_id`` up; returns once nothing of it can publish."""
        log.info("stopping cluster", extra={"cluster": cluster_id, "reason": reason})
        if reason in GRACEFUL_REASONS:
            # The lease was just renewed: finish what was handed to JetStream and write its
            # checkpoint, so the next owner resumes exactly here (outside the lock: see above).
            await self._supervisor.drain_cluster(cluster_id, timeout=self.claims.stop_budget)
        async with self._changing:
            await self._supervisor.stop_cluster(cluster_id)
            self._changed()

    def _changed(self) -> None:
        self._on_change(len(self._supervisor.cluster_ids()))
