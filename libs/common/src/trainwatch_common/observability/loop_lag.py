"""How late the event loop runs: the lag of a timer, measured every ``interval``.

Everything a service does waits its turn on one event loop. A callback that holds it (a large
JSON decode, a garbage collection of a big heap, a blocking call) delays every other task by as
much, and nothing else says so: the informers' health, the notifier's sends and the leases all
look slow for no visible reason. The lag is what a sleep overshoots its deadline by.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from prometheus_client import Histogram

LOOP_LAG = Histogram(
    "trainwatch_event_loop_lag_seconds",
    "How much later than due the event loop ran a timer (time other work held the loop)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)

INTERVAL_SECONDS = 0.25


async def measure_loop_lag(
    interval: float = INTERVAL_SECONDS, observe: Callable[[float], None] = LOOP_LAG.observe
) -> None:
    """Run until cancelled, observing each timer's lag (a named task of the service's own)."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + interval
        await asyncio.sleep(interval)
        observe(max(0.0, loop.time() - due))
