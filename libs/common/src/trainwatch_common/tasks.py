"""How a service owns its background tasks: one way, for every service.

``ServiceTasks`` owns a service's long-running loops (its consumers, relays, feeds, health
server). Each runs as one asyncio task under a name, and:

- a crash is logged with the task's name and traceback and counted (``crashes``);
- the task is then restarted with exponential back-off (``restart_initial`` doubling up to
  ``restart_max``; the back-off starts over after a run that lasted ``restart_max``). Restart,
  not "stay dead": every loop already retries the failures it expects (NATS, Redis or the
  database away); what escapes is unexpected, and under our probes (liveness is "the process
  answers") a task left dead would leave a pod up and doing nothing, forever;
- ``ready`` is False from a crash until the task runs again, and ``states()`` names each
  task's state, so ``/readyz`` shows which task is down (see ``health_routes(tasks=...)``);
- returning is as unexpected as raising for a long-running loop, and handled the same way;
- ``stop()`` (or leaving ``async with``) cancels the tasks newest first (users of a
  connection stop before the connection), waiting at most ``stop_timeout`` for each.

``report_exit`` and ``cancel_and_wait`` are the two halves every other owner of tasks uses too
(the watcher's per-key ``TaskMap``), so a crash reads the same in every log.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

log = logging.getLogger(__name__)

TaskState = Literal["running", "restarting", "stopped"]
LoopFactory = Callable[[], Coroutine[Any, Any, None]]


def report_exit(name: str, error: BaseException | None, *, consequence: str) -> None:
    """Log a task that ended without being asked to: a crash with its traceback, else a warning.
    ``consequence`` says what happens next ("restarting in 2.0 s", "restarts on the next reconcile")."""
    if error is None:
        log.error("task ended on its own; %s", consequence, extra={"task": name})
    else:
        log.error("task crashed; %s", consequence, extra={"task": name, "error": repr(error)}, exc_info=error)


def awaiting(task: asyncio.Task[Any]) -> list[str]:
    """Where a suspended task waits: each coroutine of its await chain as "file:line function",
    outermost first, then what the innermost awaits (a future, a task). ``Task.get_stack()`` gives
    only the outermost frame of a coroutine, which does not say what a stuck task waits on."""
    where: list[str] = []
    awaitable: Any = task.get_coro()
    while awaitable is not None and len(where) < 40:
        frame = getattr(awaitable, "cr_frame", None) or getattr(awaitable, "gi_frame", None)
        if frame is None:
            where.append(type(awaitable).__name__)  # a Future, a Task, a C-level awaitable
            break
        where.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        awaitable = getattr(awaitable, "cr_await", None) or getattr(awaitable, "gi_yieldfrom", None)
    return where


async def cancel_and_wait(task: asyncio.Task[Any], *, timeout: float | None, quiet: bool = False) -> bool:
    """Cancel ``task`` and wait until it finished, at most ``timeout`` seconds (None: as long as it
    takes). False if it did not finish in time: it is left behind, and the log says so (unless
    ``quiet``: the caller decides what happens next)."""
    if not task.cancelling():  # asked once only: a second request would cut its clean-up short
        task.cancel()
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        if not quiet:
            log.error(
                "task did not stop in time; left behind",
                extra={"task": task.get_name(), "timeout": timeout, "waiting_in": awaiting(task)},
            )
        return False
    if not task.cancelled() and (error := task.exception()) is not None:
        log.error("task failed while stopping", extra={"task": task.get_name()}, exc_info=error)
    return True


def _being_cancelled() -> bool:
    # nats-py and TaskGroup sometimes turn a cancellation into another exception; the task's
    # own cancellation count tells a stop apart from a crash.
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


@dataclass
class _Owned:
    name: str
    run: LoopFactory
    task: asyncio.Task[None] | None = None
    state: TaskState = "running"
    crashes: int = 0


class ServiceTasks:
    """A service's long-running tasks: named, crash logged and restarted, readiness-aware, stopped
    newest first. Start them with ``start(name, loop)``, where ``loop`` makes a fresh coroutine
    for each (re)start."""

    def __init__(
        self, *, restart_initial: float = 1.0, restart_max: float = 30.0, stop_timeout: float = 10.0
    ) -> None:
        self._restart_initial = restart_initial
        self._restart_max = restart_max
        self._stop_timeout = stop_timeout
        self._owned: dict[str, _Owned] = {}  # in start order
        self._stopping = False

    def start(self, name: str, loop: LoopFactory) -> asyncio.Task[None]:
        if self._stopping:
            raise RuntimeError(f"task {name!r} started while its owner is stopping")
        if name in self._owned:
            raise ValueError(f"a task named {name!r} is already owned")
        owned = _Owned(name=name, run=loop)
        owned.task = asyncio.create_task(self._supervise(owned), name=name)
        self._owned[name] = owned
        return owned.task

    async def _supervise(self, owned: _Owned) -> None:
        clock = asyncio.get_running_loop()
        consecutive = 0
        while True:
            owned.state = "running"
            started = clock.time()
            error: BaseException | None = None
            try:
                await owned.run()
                if _being_cancelled():  # the loop swallowed stop()'s cancellation and returned
                    raise asyncio.CancelledError
            except asyncio.CancelledError as exc:
                if _being_cancelled():
                    raise  # stop() asked
                error = exc  # a cancellation leaked from a library, not ours: the loop has ended
            except Exception as exc:
                if _being_cancelled():
                    raise asyncio.CancelledError from exc
                error = exc
            owned.state = "restarting"
            owned.crashes += 1
            consecutive = 1 if clock.time() - started >= self._restart_max else consecutive + 1
            delay = min(self._restart_max, self._restart_initial * 2.0 ** (consecutive - 1))
            delay *= 0.8 + 0.4 * random.random()  # jitter: replicas do not restart in lockstep
            report_exit(owned.name, error, consequence=f"restarting in {delay:.1f} s")
            await asyncio.sleep(delay)

    # -- state ------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """Every task is running (and the owner is not stopping)."""
        return not self._stopping and all(o.state == "running" for o in self._owned.values())

    def states(self) -> dict[str, TaskState]:
        return {name: owned.state for name, owned in self._owned.items()}

    def crashes(self, name: str) -> int:
        """How many times the task named ``name`` ended without being asked to."""
        return self._owned[name].crashes

    # -- stopping ---------------------------------------------------------------------------
    async def stop_task(self, name: str) -> None:
        """Stop one task ahead of the rest (a consumer before the drain that follows it)."""
        owned = self._owned[name]
        owned.state = "stopped"
        if owned.task is not None:
            await cancel_and_wait(owned.task, timeout=self._stop_timeout)

    async def stop(self) -> None:
        """Stop every task, newest first, each within ``stop_timeout``. Idempotent."""
        self._stopping = True
        try:
            for name in reversed(list(self._owned)):
                await self.stop_task(name)
        finally:
            # Cancelled while stopping: the tasks not yet stopped are still cancelled, unawaited.
            for owned in self._owned.values():
                owned.state = "stopped"
                if owned.task is not None:
                    owned.task.cancel()

    async def __aenter__(self) -> ServiceTasks:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
