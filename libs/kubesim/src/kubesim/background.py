"""Run a :class:`Simulator` on its own event loop in a background thread, for synchronous code.

    with kubesim.BackgroundSimulator() as bg:
        alpha = bg.add_cluster("alpha")
        bg.call(alpha.store.create, "PyTorchJob", kubesim.manifest(kubesim.PYTORCHJOB, "a", "default"))
        bg.run(kubesim.ScenarioDriver(alpha, rate=None).run_lifecycle("TFJob"))

The store is not thread-safe: touch clusters only through :meth:`call` and :meth:`run`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from kubesim.cluster import Cluster
from kubesim.simulator import Simulator

__all__ = ["BackgroundSimulator"]

T = TypeVar("T")


class BackgroundSimulator:
    """A context manager: starts the loop thread and the simulator, stops both on exit."""

    def __init__(self, workdir: str | Path | None = None, *, timeout: float = 30.0) -> None:
        self.simulator = Simulator(workdir)
        self.timeout = timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._done: Future[None] = Future()

    def __enter__(self) -> BackgroundSimulator:
        self._thread = threading.Thread(target=self._main, name="kubesim-background", daemon=True)
        self._thread.start()
        self._ready.wait(self.timeout)
        if self._done.done():
            self._done.result()  # re-raise a start-up failure
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._done.result(self.timeout)
        if self._thread is not None:
            self._thread.join(self.timeout)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            if not self._done.done():
                self._done.set_exception(exc)
            self._ready.set()
        else:
            self._done.set_result(None)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with self.simulator:
            self._ready.set()
            await self._stop.wait()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the simulator's loop and wait for its result."""
        if self._loop is None:
            coro.close()
            raise RuntimeError("the BackgroundSimulator is not running")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(self.timeout)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call a synchronous function (e.g. a store method) on the simulator's loop."""

        async def invoke() -> T:
            return fn(*args, **kwargs)

        return self.run(invoke())

    def add_cluster(self, name: str, **kwargs: Any) -> Cluster:
        """``Simulator.add_cluster`` from synchronous code."""
        return self.run(self.simulator.add_cluster(name, **kwargs))
