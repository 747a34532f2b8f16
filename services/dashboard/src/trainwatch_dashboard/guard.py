"""Who is signed in: tokens checked with the registry, and a limit on failed attempts.

The dashboard keeps no token list of its own. A token is good when the registry accepts it for
reading; the answer is remembered for ``session_check_seconds`` (by a digest, never the token),
so a page view does not cost a registry call, and a revoked token stops working within that time.
Failed attempts are counted per client address: past the limit in a minute the answer is 429,
whatever the token, so guessing tokens is slow. Each failure is logged, without the token.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import deque
from collections.abc import Callable

from trainwatch_dashboard.backends import RegistryClient

log = logging.getLogger(__name__)

WINDOW_SECONDS = 60.0
MAX_REMEMBERED = 4096  # accepted-token digests kept; beyond this the oldest are checked again
MAX_CLIENTS = 10_000  # failure counters kept; beyond this the stalest are forgotten


class TooManyFailures(Exception):
    """This client failed to authenticate too often in the last minute."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"too many failed sign-ins; retry in {retry_after}s")
        self.retry_after = retry_after


def token_id(token: str) -> str:
    """A short, stable name for a token in audit lines: which token acted, without the token.

    Tokens are long random strings (start-up refuses short or placeholder ones), so a prefix of
    their SHA-256 cannot be turned back into one.
    """
    return hashlib.sha256(token.encode()).hexdigest()[:12]


class SignInGuard:
    def __init__(
        self,
        registry: RegistryClient,
        *,
        failures_per_minute: int,
        remember_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._registry = registry
        self._limit = failures_per_minute
        self._remember = remember_seconds
        self._clock = clock
        self._accepted: dict[str, float] = {}  # token digest -> when the registry's yes expires
        self._failures: dict[str, deque[float]] = {}  # client address -> failure times in the window

    def _recent_failures(self, client: str, now: float) -> deque[float]:
        times = self._failures.get(client)
        if times is None:
            return deque()
        while times and times[0] <= now - WINDOW_SECONDS:
            times.popleft()
        if not times:
            del self._failures[client]
        return times

    async def verify(self, token: str, *, client: str, path: str) -> bool:
        """True when the registry accepts ``token``; raises TooManyFailures past the limit and
        BackendError when the registry cannot be asked."""
        now = self._clock()
        digest = hashlib.sha256(token.encode()).hexdigest()
        expires = self._accepted.get(digest)
        if expires is not None and expires > now:
            return True
        failures = self._recent_failures(client, now)
        if len(failures) >= self._limit:
            raise TooManyFailures(max(1, int(failures[0] + WINDOW_SECONDS - now) + 1))
        if await self._registry.accepts(token):
            if len(self._accepted) >= MAX_REMEMBERED:
                self._accepted.pop(next(iter(self._accepted)))
            self._accepted[digest] = now + self._remember
            return True
        self._record_failure(client, now)
        log.warning(
            "authentication failed", extra={"client": client, "path": path, "reason": "token refused"}
        )
        return False

    def _record_failure(self, client: str, now: float) -> None:
        if client not in self._failures and len(self._failures) >= MAX_CLIENTS:
            self._failures.pop(next(iter(self._failures)))
        self._failures.setdefault(client, deque()).append(now)
