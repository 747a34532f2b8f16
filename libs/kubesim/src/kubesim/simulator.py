"""Many simulated clusters in one process, each on its own port."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Coroutine, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

from kubesim.cluster import Cluster
from kubesim.kinds import ALL_KINDS, KindSpec

__all__ = ["Simulator"]


class Simulator:
    """An async context manager owning clusters and their background tasks::

    async with Simulator() as sim:
        alpha = await sim.add_cluster("alpha")
    """

    def __init__(self, workdir: str | Path | None = None, *, host: str = "127.0.0.1") -> None:
        self.host = host
        self._given_workdir = Path(workdir) if workdir is not None else None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.workdir = Path()
        self.clusters: dict[str, Cluster] = {}
        self._tg: asyncio.TaskGroup | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> Simulator:
        if self._given_workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="kubesim-")
            self.workdir = Path(self._tmp.name)
        else:
            self.workdir = self._given_workdir
            self.workdir.mkdir(parents=True, exist_ok=True)
        self._tg = asyncio.TaskGroup()
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            for task in list(self._tasks):
                task.cancel()
            for cluster in list(self.clusters.values()):
                await cluster.stop()
            self.clusters.clear()
        finally:
            if self._tg is not None:
                await self._tg.__aexit__(exc_type, exc, tb)
                self._tg = None
            if self._tmp is not None:
                self._tmp.cleanup()
                self._tmp = None

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run a background task owned by the simulator (cancelled on exit)."""
        if self._tg is None:
            coro.close()
            raise RuntimeError("the Simulator is not running")
        task = self._tg.create_task(coro, name=f"kubesim:{getattr(coro, '__qualname__', 'task')}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def add_cluster(
        self,
        name: str,
        *,
        kinds: Iterable[KindSpec] = ALL_KINDS,
        tls: bool = True,
        port: int = 0,
        token: str | None = None,
        history_limit: int = 10_000,
        bookmark_interval: float = 60.0,
        watch_timeout: float | None = None,
        seed: int | None = None,
        watch_cache: bool = True,
        storage_init_seconds: float = 0.0,
        core: bool = True,
        kueue: bool = False,
        volcano_podgroups: bool = False,
        coscheduling: bool = False,
        forbidden: Iterable[str] = (),
    ) -> Cluster:
        """Start a cluster listening on ``port`` (0: a free one).

        ``kinds``: what it serves; ``history_limit``: events kept for watch resumption;
        ``bookmark_interval``: seconds between watch bookmarks (a real server: ~60);
        ``watch_timeout``: lifetime of watches without ``timeoutSeconds``; ``seed``: makes
        uids reproducible; ``watch_cache=False``: no periodic bookmarks (``--watch-cache=false``);
        ``storage_init_seconds``: how long a kind answers 429 "storage is (re)initializing" after
        its first request or a restart (0: never).

        Evidence for diagnosis: ``core`` serves pods (with ``pods/log``) and Events (core/v1 and
        events.k8s.io/v1), as every real cluster does; ``kueue`` installs Kueue's Workload,
        LocalQueue and ClusterQueue CRDs and its visibility API; ``volcano_podgroups`` Volcano's
        ``scheduling.volcano.sh`` PodGroups; ``coscheduling`` scheduler-plugins'
        ``scheduling.x-k8s.io`` PodGroups. ``forbidden``: resources every token gets 403 for
        (``Cluster.forbid``).
        """
        if name in self.clusters:
            raise ValueError(f"cluster {name!r} exists")
        cluster = Cluster(
            name,
            workdir=self.workdir,
            spawn=self.spawn,
            kinds=kinds,
            tls=tls,
            host=self.host,
            port=port,
            token=token,
            history_limit=history_limit,
            bookmark_interval=bookmark_interval,
            watch_timeout=watch_timeout,
            seed=seed,
            watch_cache=watch_cache,
            storage_init_seconds=storage_init_seconds,
            core=core,
            kueue=kueue,
            volcano_podgroups=volcano_podgroups,
            coscheduling=coscheduling,
            forbidden=forbidden,
        )
        await cluster.start()
        self.clusters[name] = cluster
        return cluster

    async def remove_cluster(self, name: str) -> None:
        cluster = self.clusters.pop(name)
        await cluster.stop()

    def __getitem__(self, name: str) -> Cluster:
        return self.clusters[name]
