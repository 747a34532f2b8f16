"""Freeze what a listing cached out of the cyclic garbage collector's generations, at most once in
a while for the whole process.

A listing fills the process with objects that live as long as their jobs and pods (records,
evidence, diagnosis links). Left in the collector's oldest generation, every full collection
traverses them all: with 100k cached pods that was half of what diagnosis added to the CPU of a
job-status churn (bench/diagnosis). ``gc.freeze`` moves them out; refcounting still frees them
when their jobs and pods go, and what is cached later is collected as usual.

The freeze starts with a full collection, so no garbage is frozen with them. That collection
traverses the whole heap (~0.1-0.3 s at a million objects): a watcher that starts 1,000 clusters
lists ~10,000 times in its first minute, so requests are merged and one freeze runs at most every
``MIN_INTERVAL`` seconds, shortly after the last listing that asked for one.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable

MIN_INTERVAL = 5.0


class Freezer:
    """Merges freeze requests: one ``gc.collect(); gc.freeze()`` per ``min_interval`` at most, run
    from the event loop (a timer, not a task: it has nothing to await)."""

    def __init__(
        self,
        min_interval: float = MIN_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        freeze: Callable[[], None] | None = None,
    ) -> None:
        self._min_interval = min_interval
        self._clock = clock
        self._freeze = freeze or _collect_and_freeze
        self._last = -float("inf")
        self._pending: asyncio.TimerHandle | None = None
        self._pending_loop: asyncio.AbstractEventLoop | None = None
        self.freezes = 0

    def request(self) -> None:
        """Freeze soon: now when the last freeze is ``min_interval`` old, else when it will be."""
        loop = asyncio.get_running_loop()
        if self._pending is not None and self._pending_loop is loop:
            return  # one is due: it will freeze what this listing cached too
        delay = max(0.0, self._last + self._min_interval - self._clock())
        # (A timer of a loop that has ended never runs: tests run one loop after another.)
        self._pending, self._pending_loop = loop.call_later(delay, self._run), loop

    @property
    def pending(self) -> bool:
        return self._pending is not None

    def cancel(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None

    def _run(self) -> None:
        self._pending = None
        self._last = self._clock()
        self.freezes += 1
        self._freeze()


def _collect_and_freeze() -> None:
    gc.collect()
    gc.freeze()


# The collector is one per process, so is its freezer.
FREEZER = Freezer()
