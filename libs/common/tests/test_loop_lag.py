"""The loop-lag measurement sees a callback that holds the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import time

from trainwatch_common.observability.loop_lag import measure_loop_lag
from trainwatch_common.testing import eventually


async def test_a_callback_that_holds_the_loop_shows_as_lag_and_a_free_loop_as_next_to_none() -> None:
    lags: list[float] = []
    task = asyncio.create_task(measure_loop_lag(0.02, lags.append), name="loop lag")
    try:
        await eventually(lambda: len(lags) >= 3, message="a few free-loop measurements")
        assert min(lags) < 0.2  # a free loop runs its timer nearly on time
        before = len(lags)
        asyncio.get_running_loop().call_soon(time.sleep, 0.3)  # holds the loop, as a blocking call would
        await eventually(lambda: any(lag >= 0.25 for lag in lags[before:]), message="the held loop's lag")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
