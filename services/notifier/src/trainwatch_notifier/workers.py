"""The set of channel workers, kept in line with the rules in force.

Like a supervisor's ``reconcile``: a new channel gets a worker (a named task), a changed one
keeps its worker and queue with the new configuration, and a removed one finishes what is
queued and then stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import httpx

from trainwatch_notifier.channels import build_channel
from trainwatch_notifier.dispatch import ChannelWorker, Item, WorkerDeps
from trainwatch_notifier.ruleset import Ruleset

log = logging.getLogger(__name__)


class ChannelWorkers:
    def __init__(self, deps: WorkerDeps, client: httpx.AsyncClient) -> None:
        self._deps = deps
        self._client = client
        self._workers: dict[str, ChannelWorker] = {}
        self._tasks: dict[str, list[asyncio.Task[None]]] = {}
        self._retired: set[asyncio.Task[None]] = set()

    def apply(self, ruleset: Ruleset) -> None:
        # A refusal was the old configuration's answer: a changed channel (its secret fixed) is
        # ready again until its bot refuses the new one too.
        unchanged = {
            name
            for name, config in ruleset.channels.items()
            if (worker := self._workers.get(name)) is not None and worker.channel.config == config
        }
        self._deps.health.forget(keep=unchanged)
        for name in list(self._workers):
            if name not in ruleset.channels:
                self._retire(name)
        for name, config in ruleset.channels.items():
            channel = build_channel(name, config, self._client)
            existing = self._workers.get(name)
            if existing is not None and len(existing.lanes) == config.concurrency:
                existing.update(channel)
                continue
            if existing is not None:
                self._retire(name)  # a new lane count: the old worker finishes its queues
            worker = ChannelWorker(channel, self._deps)
            self._workers[name] = worker
            self._tasks[name] = [
                asyncio.create_task(worker.run(lane), name=f"notifier-channel {name} lane {lane}")
                for lane in range(len(worker.lanes))
            ]

    def _retire(self, name: str) -> None:
        worker = self._workers.pop(name)
        worker.retiring = True
        for lane, task in zip(worker.lanes, self._tasks.pop(name), strict=True):
            if not lane.busy and lane.queue.empty():
                task.cancel()  # waiting on an empty queue: nothing to finish
            self._retired.add(task)
            task.add_done_callback(self._retired.discard)

    def has(self, channel: str) -> bool:
        return channel in self._workers

    def submit(self, item: Item) -> bool:
        """Queue a delivery; False if its channel is gone (a reload raced with routing)."""
        worker = self._workers.get(item.delivery.channel)
        if worker is None:
            return False
        worker.submit(item)
        return True

    def idle(self) -> bool:
        return all(worker.idle() for worker in self._workers.values())

    async def drain(self, grace_seconds: float) -> bool:
        """Wait up to ``grace_seconds`` for every queue to empty and every send to finish."""
        deadline = asyncio.get_running_loop().time() + grace_seconds
        while not self.idle():
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def close(self) -> None:
        tasks = [task for lanes in self._tasks.values() for task in lanes] + list(self._retired)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers.clear()
        self._tasks.clear()
        self._retired.clear()
