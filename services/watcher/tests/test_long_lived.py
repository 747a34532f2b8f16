"""The freezer merges the freeze requests of many listings into one collection per interval."""

from __future__ import annotations

import asyncio
import gc
import time

from trainwatch_common.testing import eventually
from trainwatch_watcher.long_lived import Freezer


async def test_a_burst_of_listings_freezes_once_and_a_later_one_after_the_interval() -> None:
    freezes: list[float] = []
    freezer = Freezer(min_interval=0.3, freeze=lambda: freezes.append(time.monotonic()))
    for _ in range(1000):  # 1,000 clusters' pod listings at start-up
        freezer.request()
    await eventually(lambda: len(freezes) == 1, message="the first freeze")
    for _ in range(1000):
        freezer.request()
    assert freezer.pending
    await eventually(lambda: len(freezes) == 2, message="the second freeze")
    assert freezes[1] - freezes[0] >= 0.3
    assert not freezer.pending
    assert freezer.freezes == 2


async def test_the_first_request_freezes_at_once() -> None:
    freezes: list[float] = []
    freezer = Freezer(min_interval=3600, freeze=lambda: freezes.append(time.monotonic()))
    asked = time.monotonic()
    freezer.request()
    await eventually(lambda: freezes, message="the freeze")
    assert freezes[0] - asked < 1.0  # not after the interval: nothing was frozen before


def test_a_request_in_a_later_event_loop_is_not_lost_to_the_ended_loops_timer() -> None:
    now = [0.0]
    freezes: list[float] = []
    freezer = Freezer(min_interval=60, clock=lambda: now[0], freeze=lambda: freezes.append(now[0]))

    async def freeze_then_request_again() -> None:
        freezer.request()
        await eventually(lambda: freezes, timeout=5, message="the first freeze")
        freezer.request()  # due in 60 s, on this loop's clock: this loop ends before it fires

    async def request_later() -> None:
        freezer.request()
        await eventually(lambda: len(freezes) == 2, timeout=5, message="the freeze of the second loop")

    asyncio.run(freeze_then_request_again())
    now[0] = 61.0
    asyncio.run(request_later())
    assert freezes == [0.0, 61.0]


async def test_the_real_freeze_moves_the_live_objects_out_of_the_collectors_generations() -> None:
    cached = [[index] for index in range(1_000)]  # lists: always tracked by the collector
    tracked = {id(obj) for obj in gc.get_objects()}
    assert all(id(obj) in tracked for obj in cached)
    freezer = Freezer()
    freezer.request()
    try:
        await eventually(lambda: freezer.freezes == 1, message="the freeze")
        # gc.get_objects() lists the three generations, not the permanent one they went to.
        tracked = {id(obj) for obj in gc.get_objects()}
        assert not any(id(obj) in tracked for obj in cached)
    finally:
        gc.unfreeze()  # the test process's objects back where they were
