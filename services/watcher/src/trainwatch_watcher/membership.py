"""Which watcher replicas are alive: heartbeats in one Redis sorted set.

The set ``<prefix>:watcher:replicas`` maps replica id → the time (Redis server milliseconds) its
heartbeat expires. One Lua script refreshes my entry, drops every expired one and returns the
rest, so a heartbeat is one round trip. Expiry uses the Redis server's clock, never a replica's,
so clock skew between hosts cannot make a live replica look dead or a dead one look alive. A
replica that stops heartbeating is gone ``ttl_ms`` after its last heartbeat; one that shuts
down cleanly leaves at once (``leave``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from redis.asyncio import Redis

# TIME before a write is allowed: Redis >= 5 replicates a script's effects, not the script.
_HEARTBEAT = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 10)
return redis.call('ZRANGE', KEYS[1], 0, -1)
"""

_LIVE = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf')
"""


def _decode(members: Sequence[bytes | str]) -> list[str]:
    return sorted(m.decode() if isinstance(m, bytes) else str(m) for m in members)


class Membership:
    """My heartbeat and the live replica list."""

    def __init__(
        self, redis: Redis, *, replica_id: str, prefix: str = "trainwatch", ttl_ms: int = 10_000
    ) -> None:
        if "|" in replica_id:
            raise ValueError("a replica id may not contain '|' (it separates holder and epoch in leases)")
        self._redis = redis
        self.replica_id = replica_id
        self.ttl_ms = ttl_ms
        self.key = f"{prefix}:watcher:replicas"
        self._heartbeat = redis.register_script(_HEARTBEAT)
        self._live = redis.register_script(_LIVE)

    async def heartbeat(self) -> list[str]:
        """Say I am alive for another ``ttl_ms``; returns the live replicas (me included), sorted."""
        members = await self._heartbeat(keys=[self.key], args=[self.replica_id, self.ttl_ms])
        return _decode(cast(Sequence[bytes], members))

    async def live(self) -> list[str]:
        """The live replicas, without heartbeating."""
        return _decode(cast(Sequence[bytes], await self._live(keys=[self.key])))

    async def leave(self) -> None:
        """Leave at once (graceful shutdown), so the others rebalance without waiting for the TTL."""
        await self._redis.zrem(self.key, self.replica_id)
