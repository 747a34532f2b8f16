"""Per-bot rate limits: local buckets with an injected clock, or buckets shared through Redis.

Each limit is a bucket of ``count`` tokens where a spent token comes back ``per_seconds`` after
it was spent. That guarantees at most ``count`` sends in ANY window of ``per_seconds`` (which is
how Feishu's "5/s and 100/min" reads), whereas a bucket refilled at a constant rate lets up to
``2*count - 1`` through in one window (a full bucket, then the refill). A margin (0.2 s) absorbs
the difference between when we send and when the bot counts the request.

Replicas that post to the same bot must share its budget, so by default the buckets live in
Redis (one sorted set per bot and limit, checked and taken in one Lua script on Redis's clock).
If Redis cannot be reached the process falls back to its local bucket for that send.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

DEFAULT_MARGIN = 0.2  # seconds: covers network and scheduling jitter between our send and the bot's count

# KEYS: one sorted set per limit. ARGV: count_1, window_ms_1, ..., member. Returns ms to wait (0: taken).
# The member names one spent token: it must be unique, or ZADD overwrites a token already spent.
_SHARED_ACQUIRE = """
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local wait = 0
for i, key in ipairs(KEYS) do
  local count, window = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  if redis.call('ZCARD', key) >= count then
    local oldest = tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2])
    wait = math.max(wait, oldest + window - now)
  end
end
if wait > 0 then return wait end
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, now, ARGV[#ARGV])
  redis.call('PEXPIRE', key, tonumber(ARGV[2 * i]) + 1000)
end
return 0
"""


class Bucket(Protocol):
    limits: tuple[tuple[int, float], ...]

    async def acquire(self) -> float:
        """Wait for a token; returns the time waited."""
        ...


class TokenBucket:
    def __init__(
        self,
        limits: Sequence[tuple[int, float]],
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        margin: float = DEFAULT_MARGIN,
    ) -> None:
        self.limits = tuple(limits)
        self._clock = clock
        self._sleep = sleep
        self._margin = margin
        self._spent: list[deque[float]] = [deque() for _ in self.limits]
        self._lock = asyncio.Lock()

    def try_acquire(self) -> float:
        """Take a token from every limit and return 0, or return how long to wait (taking nothing)."""
        now = self._clock()
        wait = 0.0
        for (count, per_seconds), spent in zip(self.limits, self._spent, strict=True):
            window = per_seconds + self._margin
            while spent and spent[0] <= now - window:
                spent.popleft()
            if len(spent) >= count:
                wait = max(wait, spent[0] + window - now)
        if wait > 0:
            return wait
        for spent in self._spent:
            spent.append(now)
        return 0.0

    async def acquire(self) -> float:
        """Wait for a token; returns the time waited. Waiters are served in order."""
        waited = 0.0
        async with self._lock:
            while (wait := self.try_acquire()) > 0:
                await self._sleep(wait)
                waited += wait
        return waited


class SharedTokenBucket:
    """The same limits, counted in Redis for every replica that posts to this bot.

    A spent token is a member of each limit's sorted set, named by a random UUID. Not by the
    process's identity: a restarted container has the same host name and pid, and a counter that
    starts again at 0 would overwrite its predecessor's tokens, so it could exceed the limit.
    """

    def __init__(
        self,
        redis: Redis,
        key: str,
        limits: Sequence[tuple[int, float]],
        *,
        fallback: TokenBucket,
        sleep: Sleep = asyncio.sleep,
        margin: float = DEFAULT_MARGIN,
    ) -> None:
        self.limits = tuple(limits)
        self._keys = [f"{key}:{count}:{per}" for count, per in self.limits]
        self._windows = [(count, round((per + margin) * 1000)) for count, per in self.limits]
        self._fallback = fallback
        self._sleep = sleep
        self._script = redis.register_script(_SHARED_ACQUIRE)
        self._lock = asyncio.Lock()

    async def acquire(self) -> float:
        if not self.limits:
            return 0.0
        args: list[int | str] = [value for pair in self._windows for value in pair]
        waited = 0.0
        async with self._lock:
            while True:
                member = uuid.uuid4().hex
                try:
                    wait_ms = int(await self._script(keys=self._keys, args=[*args, member]))
                except RedisError as exc:
                    log.warning(
                        "shared rate limit unavailable, using the local one", extra={"error": repr(exc)}
                    )
                    return waited + await self._fallback.acquire()
                if wait_ms <= 0:
                    self._fallback.try_acquire()  # keep the local view warm for a fallback
                    return waited
                await self._sleep(wait_ms / 1000)
                waited += wait_ms / 1000


class BotLimits:
    """The buckets of all bots, keyed by bot (type + URL): channels sharing a bot share its bucket.

    With ``redis`` the buckets are shared by all replicas; the key is a hash of the bot, whose
    URL is a credential.
    """

    def __init__(
        self,
        *,
        redis: Redis | None = None,
        prefix: str = "trainwatch",
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._clock = clock
        self._sleep = sleep
        self._buckets: dict[str, Bucket] = {}

    def bucket(self, bot_key: str, limits: Sequence[tuple[int, float]]) -> Bucket:
        bucket = self._buckets.get(bot_key)
        if bucket is not None and bucket.limits == tuple(limits):
            return bucket
        local = TokenBucket(limits, clock=self._clock, sleep=self._sleep)
        if self._redis is None or not limits:
            self._buckets[bot_key] = local
            return local
        digest = hashlib.sha256(bot_key.encode()).hexdigest()[:16]
        shared = SharedTokenBucket(
            self._redis,
            f"{self._prefix}:ratelimit:{digest}",
            limits,
            fallback=local,
            sleep=self._sleep,
        )
        self._buckets[bot_key] = shared
        return shared
