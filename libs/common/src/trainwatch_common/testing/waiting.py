"""Wait on a condition with a timeout: the honest replacement for a sleep in a test."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


@overload
async def eventually(
    condition: Callable[[], Awaitable[T]], *, timeout: float = ..., interval: float = ..., message: str = ...
) -> T: ...


@overload
async def eventually(
    condition: Callable[[], T], *, timeout: float = ..., interval: float = ..., message: str = ...
) -> T: ...


async def eventually(
    condition: Callable[[], Any],
    *,
    timeout: float = 10.0,
    interval: float = 0.02,
    message: str = "condition",
) -> Any:
    """Poll ``condition`` until it returns something truthy (and return it), or fail after ``timeout``.

    An exception from the condition counts as "not yet"; the last one is chained into the failure.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = condition()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value
        except Exception as exc:  # AssertionError included: a failing check means "not yet"
            last_error = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"{message} not met within {timeout:.1f}s") from last_error
        await asyncio.sleep(interval)


def wait_until(condition: Callable[[], object], *, timeout: float = 10.0, message: str = "condition") -> None:
    """The blocking twin of ``eventually`` for synchronous tests."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{message} not met within {timeout:.1f}s")
        time.sleep(0.02)
