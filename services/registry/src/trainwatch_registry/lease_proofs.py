"""Which clusters' kubeconfigs a watcher may read: those whose Redis lease it holds (issue 15, V13).

The watcher token is shared by every replica, so the token alone cannot say which replica asks.
A replica proves it owns a cluster by sending the value of its lease (``holder|epoch``, where the
holder carries a random nonce made at acquisition: ``trainwatch_common.leases.new_holder``). Only
the holder and Redis know that value, so a leaked watcher token is not enough to read any
kubeconfig; reading one also needs Redis, which can hand out leases anyway.
"""

from __future__ import annotations

import hmac

from redis.asyncio import Redis

from trainwatch_common.leases import LeaseManager


class LeaseProofs:
    def __init__(self, redis: Redis, *, prefix: str) -> None:
        self._redis = redis
        self._leases = LeaseManager(redis, prefix=prefix)

    async def proven(self, cluster_id: str, presented: str | None) -> bool:
        """True if ``presented`` is the current value of the cluster's lease. Redis errors
        propagate (the caller answers 503: unknown is not "no")."""
        if not presented:
            return False
        current = await self._redis.get(self._leases.lease_key(cluster_id))
        if current is None:
            return False
        stored = current if isinstance(current, bytes) else str(current).encode()
        return hmac.compare_digest(stored, presented.encode())

    async def close(self) -> None:
        await self._redis.aclose()
