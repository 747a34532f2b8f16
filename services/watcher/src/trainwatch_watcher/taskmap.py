"""Lifecycles by diffing desired against running: a map of keys → named tasks (after kopf's
``adjust_tasks`` and Karmada's informer managers).

Unwanted or changed tasks are stopped *first*, then missing ones started; a key leaves the map
before its task is awaited, so no check-then-act race can stop a task twice. A task that ends
on its own (a crash) is logged and dropped, so the next ``reconcile`` starts it again.

The keyed, dynamic counterpart of ``trainwatch_common.tasks.ServiceTasks`` (a service's fixed
set of loops), built on the same two halves: ``report_exit`` logs a crash the same way, and
``cancel_and_wait`` stops a task the same way.

A stop waits until the task has ended: a key's task never outlives its stop. A cancellation that
a library swallowed (Python 3.11's ``asyncio.wait_for`` inside redis-py can lose one that races
with a completed read; nats-py turns some into other errors) would make that wait endless, and a
cluster's stop that never returns stalls the claim loop until every lease lapses. So a task still
running ``recancel_after`` seconds after its cancellation is cancelled again, until it ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Generic, TypeVar

from trainwatch_common.tasks import cancel_and_wait, report_exit

log = logging.getLogger(__name__)

K = TypeVar("K")
S = TypeVar("S")


class TaskMap(Generic[K, S]):
    """One named task per key; a task that ends on its own is dropped so ``reconcile`` restarts it."""

    def __init__(
        self,
        start: Callable[[K, S], Coroutine[Any, Any, None]],
        name: Callable[[K], str],
        *,
        recancel_after: float = 2.0,
    ) -> None:
        self._start = start
        self._name = name
        self._recancel_after = recancel_after
        self._tasks: dict[K, asyncio.Task[None]] = {}
        self._specs: dict[K, S] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    def keys(self) -> set[K]:
        return set(self._tasks)

    def spec(self, key: K) -> S | None:
        return self._specs.get(key)

    async def reconcile(self, desired: Mapping[K, S]) -> None:
        for key in [k for k in self._tasks if k not in desired or self._specs[k] != desired[k]]:
            await self.stop(key)
        for key, spec in desired.items():
            if key not in self._tasks:
                self.start(key, spec)

    def start(self, key: K, spec: S) -> None:
        if key in self._tasks:
            return
        task = asyncio.create_task(self._start(key, spec), name=self._name(key))
        self._tasks[key] = task
        self._specs[key] = spec
        task.add_done_callback(lambda t, k=key: self._finished(k, t))  # type: ignore[misc]

    def _finished(self, key: K, task: asyncio.Task[None]) -> None:
        if self._tasks.get(key) is not task:
            return  # already stopped on purpose
        del self._tasks[key]
        self._specs.pop(key, None)
        if task.cancelled():
            error: BaseException | None = asyncio.CancelledError("cancelled by someone other than its owner")
        else:
            error = task.exception()
        report_exit(task.get_name(), error, consequence="it restarts on the next reconcile")

    async def stop(self, key: K) -> None:
        task = self._tasks.pop(key, None)  # remove before awaiting: no double stop
        self._specs.pop(key, None)
        if task is None:
            return
        await self._stop_task(task)

    async def stop_all(self) -> None:
        keys = list(self._tasks)
        tasks = [self._tasks.pop(k) for k in keys]
        for key in keys:
            self._specs.pop(key, None)
        for task in tasks:
            task.cancel()  # all at once: they stop concurrently
        for task in tasks:
            await self._stop_task(task)

    async def _stop_task(self, task: asyncio.Task[None]) -> None:
        while not await cancel_and_wait(task, timeout=self._recancel_after, quiet=True):
            log.warning(
                "task still running after its cancellation; cancelling it again",
                extra={"task": task.get_name(), "after": self._recancel_after},
            )
            task.cancel()
