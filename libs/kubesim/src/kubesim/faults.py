"""Fault knobs of one simulated cluster.

Durations are seconds on the monotonic clock; ``None`` means "until cleared". Faults that
need no action when they end (delays, error answers, stalls) are checked lazily on each
request; refusing connections re-opens the listener from a task owned by the cluster.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from kubesim.errors import ApiError

if TYPE_CHECKING:
    from kubesim.watch import WatchHub

__all__ = ["Faults"]

_FOREVER = float("inf")

# Which requests an injected error answers: (method, path, query) -> whether it does.
RequestFilter = Callable[[str, str, Mapping[str, str]], bool]

_MESSAGES = {
    429: "Too many requests, please try again later.",
    500: "Internal error occurred: kubesim injected fault",
    503: "The server is currently unable to handle the request",
    504: "Timeout: request did not complete within the allowed duration",
}


def _until(seconds: float | None) -> float:
    return _FOREVER if seconds is None else time.monotonic() + seconds


class Faults:
    """Injected failures; obtained as ``cluster.faults``."""

    def __init__(
        self,
        hub: WatchHub,
        *,
        stop_listening: Callable[[], Awaitable[None]],
        start_listening: Callable[[], Awaitable[None]],
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
    ) -> None:
        self._hub = hub
        self._stop_listening = stop_listening
        self._start_listening = start_listening
        self._spawn = spawn
        self._delay = 0.0
        self._delay_until = 0.0
        self._error_code = 0
        self._error_until = 0.0
        self._error_count: int | None = None
        self._retry_after = 1
        self._error_only: RequestFilter | None = None
        self._stall_until = 0.0
        self._refusing = False
        self._refuse_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------- watches
    def drop_watches(self) -> int:
        """Close every open watch connection abruptly (no final chunk). Returns how many."""
        return self._hub.drop_all()

    def stall_watches(self, seconds: float | None = None) -> None:
        """Open watches (and new ones) send nothing, not even bookmarks, but stay open:
        a silent partition. They resume when the stall ends."""
        self._stall_until = _until(seconds)

    def unstall_watches(self) -> None:
        self._stall_until = 0.0
        self._hub.store.wake()

    def stalled_for(self) -> float:
        """Seconds of stall left (0 when not stalled)."""
        left = self._stall_until - time.monotonic()
        return left if left > 0 else 0.0

    # ------------------------------------------------------------ requests
    def delay(self, seconds: float, duration: float | None = None) -> None:
        """Delay every response by ``seconds`` (for ``duration`` seconds, or until cleared)."""
        self._delay = seconds
        self._delay_until = _until(duration)

    def current_delay(self) -> float:
        return self._delay if time.monotonic() < self._delay_until else 0.0

    def error_responses(
        self,
        code: int = 503,
        seconds: float | None = None,
        *,
        count: int | None = None,
        retry_after: int = 1,
        only: RequestFilter | None = None,
    ) -> None:
        """Answer every API request with ``code`` (429, 500, 503, ...) as a ``Status``, for
        ``seconds`` or for the next ``count`` requests (or until cleared). 429 and 503 carry
        ``Retry-After``. Watches already open are not affected. ``only``: answer just the
        requests it accepts (method, path, query), and count only those (one kind of request
        failing while the others go through)."""
        self._error_code = code
        self._error_until = _until(seconds)
        self._error_count = count
        self._retry_after = retry_after
        self._error_only = only

    def errors_left(self) -> int | None:
        """How many more requests the injected error answers (None: not counted)."""
        return self._error_count if self._error_code else 0

    def check_error(
        self, method: str = "GET", path: str = "", query: Mapping[str, str] | None = None
    ) -> ApiError | None:
        """The injected error for this request, if any (counts it)."""
        if not self._error_code or time.monotonic() >= self._error_until:
            return None
        if self._error_only is not None and not self._error_only(method, path, query or {}):
            return None
        if self._error_count is not None:
            if self._error_count <= 0:
                return None
            self._error_count -= 1
        code = self._error_code
        headers: dict[str, str] = {}
        details: dict[str, Any] | None = None
        if code in (429, 503):
            headers["Retry-After"] = str(self._retry_after)
            details = {"retryAfterSeconds": self._retry_after}
        return ApiError(
            code, _MESSAGES.get(code, f"kubesim injected HTTP {code}"), details=details, headers=headers
        )

    # --------------------------------------------------------- connections
    @property
    def refusing(self) -> bool:
        return self._refusing

    async def refuse_connections(self, seconds: float | None = None) -> None:
        """Stop listening and close every connection: clients get "connection refused"
        (unreachable). After ``seconds`` (or :meth:`accept_connections`) the same port
        listens again."""
        if self._refuse_task is not None:
            self._refuse_task.cancel()
            self._refuse_task = None
        if not self._refusing:
            self._refusing = True
            self._hub.drop_all()
            await self._stop_listening()
        if seconds is not None:
            self._refuse_task = self._spawn(self._reopen_after(seconds))

    async def _reopen_after(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self._refuse_task = None
        await self.accept_connections()

    async def accept_connections(self) -> None:
        """Listen again after :meth:`refuse_connections`."""
        task, self._refuse_task = self._refuse_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        if self._refusing:
            await self._start_listening()
            self._refusing = False

    async def clear(self) -> None:
        """End every fault."""
        self._delay_until = 0.0
        self._error_code = 0
        self._error_only = None
        self.unstall_watches()
        await self.accept_connections()
