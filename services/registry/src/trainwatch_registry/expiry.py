"""Warn before a cluster's credentials expire: the ``trainwatch_registry_credentials_expiring``
gauge and one warning log line per cluster and expiry (the id and the time, never the token).

The expiry comes from intake (a JWT's ``exp``, ``SanitizedKubeconfig.credentials_expire_at``).
The count is refreshed after every commit and every ``interval_seconds`` (time passing makes a
cluster enter the window without any write).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime, timedelta

from prometheus_client import Gauge
from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_registry import repository
from trainwatch_registry.bus import reraise_if_cancelling

__all__ = ["CREDENTIALS_EXPIRING", "ExpiryMonitor"]

log = logging.getLogger("trainwatch.registry.expiry")

CREDENTIALS_EXPIRING = Gauge(
    "trainwatch_registry_credentials_expiring",
    "Clusters whose credentials expire within TRAINWATCH_REGISTRY_CREDENTIALS_WARNING_DAYS "
    "(expired ones included)",
)


class ExpiryMonitor:
    def __init__(self, engine: AsyncEngine, *, warning_days: float, interval_seconds: float = 300.0) -> None:
        self._engine = engine
        self._window = timedelta(days=warning_days)
        self._interval = interval_seconds
        self._wake = asyncio.Event()
        self._warned: dict[str, datetime] = {}

    def wake(self) -> None:
        self._wake.set()

    async def refresh(self) -> list[tuple[str, datetime]]:
        """Recount (and warn about newly expiring clusters); returns (id, expiry) of each."""
        now = datetime.now(UTC)
        async with self._engine.connect() as conn:
            expiring = await repository.credentials_expiring(conn, before=now + self._window)
        CREDENTIALS_EXPIRING.set(len(expiring))
        current = dict(expiring)
        for cluster_id, expires in expiring:
            if self._warned.get(cluster_id) != expires:
                state = "expired" if expires <= now else "expire soon"
                log.warning(
                    f"cluster credentials {state}; renew them (trainwatch clusters rotate-token)",
                    extra={"cluster_id": cluster_id, "credentials_expire_at": expires.isoformat()},
                )
        self._warned = current
        return expiring

    async def run(self) -> None:
        while True:
            self._wake.clear()
            reraise_if_cancelling()
            try:
                await self.refresh()
            except Exception as exc:  # task boundary: SQL trouble; the next round retries
                reraise_if_cancelling()
                log.warning("credentials expiry check failed; will retry", extra={"error": repr(exc)})
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await self._wake.wait()
