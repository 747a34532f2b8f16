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
from collections.abc import Callable

from trainwatch_common.auth import AuthFailures
from trainwatch_dashboard.backends import RegistryClient

log = logging.getLogger(__name__)

MAX_REMEMBERED = 4096  # accepted-token digests kept; beyond this the oldest are checked again


class TooManyFailures(Exception):
    """This client failed to authenticate too often in the last minute."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"too many failed sign-ins; retry in {retry_after}s")
        self.retry_after = retry_after


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
        self._remember = remember_seconds
        self._clock = clock
        self._accepted: dict[str, float] = {}  # token digest -> when the registry's yes expires
        self._failures = AuthFailures(failures_per_minute, clock=clock)

    async def verify(self, token: str, *, client: str, path: str) -> bool:
        """True when the registry accepts ``token``; raises TooManyFailures past the limit and
        BackendError when the registry cannot be asked."""
        now = self._clock()
        digest = hashlib.sha256(token.encode()).hexdigest()
        expires = self._accepted.get(digest)
        if expires is not None and expires > now:
            return True
        wait = self._failures.retry_after(client)
        if wait is not None:
            raise TooManyFailures(wait)
        if await self._registry.accepts(token):
            if len(self._accepted) >= MAX_REMEMBERED:
                self._accepted.pop(next(iter(self._accepted)))
            self._accepted[digest] = now + self._remember
            return True
        self._failures.record(client)
        log.warning(
            "authentication failed", extra={"client": client, "path": path, "reason": "token refused"}
        )
        return False
