"""The injectable time of the notifier's pure logic: tests pass their own clock and sleep."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

Clock = Callable[[], float]  # monotonic seconds
Sleep = Callable[[float], Awaitable[None]]
