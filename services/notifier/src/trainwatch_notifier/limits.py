"""Per-bot rate limits: local buckets with an injected clock, or buckets shared through Redis.

Each limit is a bucket of ``count`` tokens where a spent token comes back ``per_seconds`` after
it was spent. That guarantees at most ``count`` sends in ANY window of ``per_seconds`` (which is
how Feishu's "5/s and 100/min" reads), whereas a bucket refilled at a constant rate lets up to
``2*count - 1`` through in one window (a full bucket, then the refill). A margin (0.2 s) absorbs
the difference between when we send and when the bot counts the request.

A token is taken before the request, but the bot counts the request when it arrives, which can
be much later: the sender may wait for Redis to mark the send, or be stalled. So once the bot has
answered, the token is stamped again with the time of the answer (``answered``): it comes back
``per_seconds`` after the bot counted the request, however late the request went out.

Replicas that post to the same bot must share its budget, so by default the buckets live in
Redis (one sorted set per bot and limit, checked and taken in one Lua script on Redis's clock).
The process's own bucket counts its sends too, and a token is taken only when both have one: if
Redis loses its data (FLUSHALL, a fresh data dir) the shared sets are empty, but this process's
sends of the last minute still count. If Redis cannot be reached the local bucket decides alone.
A process that has just started has an empty bucket of its own, so each process also records its
sends in NATS (``SendWindows``) and a new one counts its predecessors' (and, on a refusal from the
bot, the other replicas') recorded sends too.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import hashlib
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import nats.errors
import nats.js.errors
import orjson
from nats.js.kv import KeyValue
from redis.asyncio import Redis
from redis.exceptions import RedisError

from trainwatch_notifier.clock import Clock, Sleep

log = logging.getLogger(__name__)

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

# KEYS: the sorted sets of one bucket. ARGV: window_ms_1, ..., member. The token ``member`` is
# stamped with Redis's time now (added back if it had expired meanwhile).
_SHARED_ANSWERED = """
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, now, ARGV[#ARGV])
  redis.call('PEXPIRE', key, tonumber(ARGV[i]) + 1000)
end
return 0
"""


@dataclass(frozen=True, slots=True)
class Token:
    """One spent token: how long it took to get, and how to find it again to stamp it."""

    waited: float
    local: float | None = None  # when the local bucket counted it
    member: str | None = None  # its name in the shared sorted sets


class Bucket(Protocol):
    limits: tuple[tuple[int, float], ...]

    async def acquire(self) -> Token:
        """Wait for a token (returns it, with the time waited)."""
        ...

    async def answered(self, token: Token) -> None:
        """The bot answered the request this token was taken for: it counts from now."""
        ...

    async def refused(self) -> None:
        """The bot refused a request for its rate limit: it counts sends this bucket does not."""
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
        self._spent: list[list[float]] = [[] for _ in self.limits]  # sorted times of spent tokens
        self._lock = asyncio.Lock()

    def wait_time(self) -> float:
        """How long until every limit has a token (0: now); takes nothing."""
        now = self._clock()
        wait = 0.0
        for (count, per_seconds), spent in zip(self.limits, self._spent, strict=True):
            window = per_seconds + self._margin
            expired = bisect.bisect_right(spent, now - window)
            del spent[:expired]
            if len(spent) >= count:
                wait = max(wait, spent[-count] + window - now)
        return wait

    def take(self) -> float:
        """Count a token spent now in every limit (whether or not there was room); returns now."""
        now = self._clock()
        for spent in self._spent:
            bisect.insort(spent, now)
        return now

    def try_acquire(self) -> float:
        """Take a token from every limit and return 0, or return how long to wait (taking nothing)."""
        wait = self.wait_time()
        if wait > 0:
            return wait
        self.take()
        return 0.0

    def add(self, spent: Sequence[float]) -> None:
        """Count tokens spent elsewhere (by a predecessor, another replica) at these clock times."""
        for times in self._spent:
            for at in spent:
                bisect.insort(times, at)

    def restamp(self, spent_at: float) -> None:
        """The token spent at ``spent_at`` counts from now (if it had expired, it counts again)."""
        now = self._clock()
        for spent in self._spent:
            i = bisect.bisect_left(spent, spent_at)
            if i < len(spent) and spent[i] == spent_at:
                del spent[i]
            bisect.insort(spent, now)

    async def acquire(self) -> Token:
        """Wait for a token. Waiters are served in order."""
        waited = 0.0
        async with self._lock:
            while (wait := self.wait_time()) > 0:
                await self._sleep(wait)
                waited += wait
            return Token(waited, local=self.take())

    async def answered(self, token: Token) -> None:
        if token.local is not None and self.limits:
            self.restamp(token.local)

    async def refused(self) -> None:
        return None  # nothing else to learn from: this process's sends are all it knows


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
        windows: SendWindows | None = None,
    ) -> None:
        self.limits = tuple(limits)
        self._keys = [f"{key}:{count}:{per}" for count, per in self.limits]
        self._windows = [(count, round((per + margin) * 1000)) for count, per in self.limits]
        self._fallback = fallback
        self._sleep = sleep
        self._script = redis.register_script(_SHARED_ACQUIRE)
        self._answered = redis.register_script(_SHARED_ANSWERED)
        self._lock = asyncio.Lock()
        self._durable = windows
        self._seeded = windows is None

    async def acquire(self) -> Token:
        if not self.limits:
            return Token(0.0)
        args: list[int | str] = [value for pair in self._windows for value in pair]
        waited = 0.0
        async with self._lock:
            if not self._seeded and self._durable is not None:  # first use: what others sent lately
                self._seeded = await self._durable.seed(self._fallback)
            while True:
                # Our own sends count whatever Redis remembers (it may have lost its data).
                if (local_wait := self._fallback.wait_time()) > 0:
                    await self._sleep(local_wait)
                    waited += local_wait
                    continue
                member = uuid.uuid4().hex
                try:
                    wait_ms = int(await self._script(keys=self._keys, args=[*args, member]))
                except RedisError as exc:
                    log.warning(
                        "shared rate limit unavailable, using the local one", extra={"error": repr(exc)}
                    )
                    token = await self._fallback.acquire()
                    return Token(waited + token.waited, local=token.local)
                if wait_ms <= 0:
                    token = Token(waited, local=self._fallback.take(), member=member)
                    if self._durable is not None:
                        await self._durable.spent(token.local)
                    return token
                await self._sleep(wait_ms / 1000)
                waited += wait_ms / 1000

    async def answered(self, token: Token) -> None:
        await self._fallback.answered(token)
        if self._durable is not None and token.local is not None:
            await self._durable.answered(token.local)
        if token.member is None:
            return
        try:
            await self._answered(
                keys=self._keys, args=[*(window for _, window in self._windows), token.member]
            )
        except RedisError as exc:  # the local bucket has it; the shared one counts it from its spend
            log.warning("cannot stamp a spent token in redis", extra={"error": repr(exc)})

    async def refused(self) -> None:
        """Another notifier's sends (a replica, after Redis lost its sets) fill the bot's window:
        count the ones it recorded."""
        if self._durable is not None:
            async with self._lock:
                await self._durable.seed(self._fallback)


class SendWindows:
    """One bot's recent sends by this process, kept in a JetStream KV bucket, so a successor knows.

    Redis holds the shared buckets, and the process's own bucket counts its sends; but a notifier
    that starts again (a new process, an empty bucket) right before Redis loses its data (FLUSHALL,
    a fresh data dir) knows nothing of its predecessor's sends of the last minute, and the bot
    answers 11232. So each process writes the wall-clock times of its sends within the longest
    window under ``<bot digest>.<process token>`` (a token per process start: a successor never
    overwrites what its predecessor wrote), and a bucket's first use, and every rate-limit refusal
    from the bot, adds what the other keys of that bot hold to the process's own bucket. Best
    effort: while NATS is away the buckets count as before (nothing can be acked then anyway).
    """

    def __init__(
        self,
        kv: KeyValue,
        bot_digest: str,
        *,
        process: str,
        longest_seconds: float,
        clock: Clock,
        wall: Clock = time.time,
        timeout_seconds: float = 1.0,
    ) -> None:
        self._kv = kv
        self._prefix = bot_digest
        self._key = f"{bot_digest}.{process}"
        self._longest = longest_seconds
        self._clock = clock
        self._wall = wall
        self._timeout = timeout_seconds
        self._mine: list[float] = []  # wall-clock times of this process's sends, sorted
        self._counted: set[tuple[str, float]] = set()  # others' sends already in the bucket

    def _to_local(self, wall_time: float) -> float:
        return self._clock() - (self._wall() - wall_time)

    def _to_wall(self, local_time: float) -> float:
        return self._wall() - (self._clock() - local_time)

    async def seed(self, bucket: TokenBucket) -> bool:
        """Add the sends the other keys of this bot hold to ``bucket``; False if NATS did not answer."""
        try:
            async with asyncio.timeout(self._timeout):
                keys = await self._bot_keys()
                since = self._wall() - self._longest
                found: list[tuple[str, float]] = []
                for key in keys:
                    if key == self._key:
                        continue
                    with contextlib.suppress(nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
                        entry = await self._kv.get(key)
                        found += [(key, t) for t in orjson.loads(entry.value or b"[]") if t > since]
        except (nats.errors.Error, TimeoutError, OSError, orjson.JSONDecodeError) as exc:
            log.warning("cannot read the bot's recent sends", extra={"error": repr(exc)})
            return False
        # Each send once, however often it is read (a refusal reads them again).
        self._counted = {sent for sent in self._counted if sent[1] > since}
        found = [sent for sent in found if sent not in self._counted]
        self._counted.update(found)
        bucket.add([self._to_local(t) for _, t in found])
        if found:
            log.info("counting recent sends of other notifiers", extra={"sends": len(found)})
        return True

    async def _bot_keys(self) -> list[str]:
        """This bot's keys, from the subjects of the bucket's stream: one request, nothing left
        subscribed if the timeout cuts it short. (nats-py's ``kv.keys()`` opens a watcher that it
        never stops when cancelled or failing mid-way; the leaked watcher's callback then waits on
        a set-up that never completes, and ``drain()`` at SIGTERM waited on it for 30 s.)"""
        kv = self._kv
        pre = kv._pre  # "$KV.<bucket>."; KeyValue has no public handle on its stream
        info = await kv._js.stream_info(kv._stream, subjects_filter=f"{pre}{self._prefix}.>")
        return [subject.removeprefix(pre) for subject in info.state.subjects or {}]

    async def spent(self, local_time: float | None) -> None:
        if local_time is not None:
            bisect.insort(self._mine, self._to_wall(local_time))
            await self._write()

    async def answered(self, local_spent_at: float) -> None:
        """The send counts from now (as the buckets do): its time moves to the answer's."""
        spent = self._to_wall(local_spent_at)
        i = bisect.bisect_left(self._mine, spent - 0.001)
        if i < len(self._mine) and abs(self._mine[i] - spent) < 0.01:
            del self._mine[i]
        bisect.insort(self._mine, self._wall())
        await self._write()

    async def _write(self) -> None:
        since = self._wall() - self._longest
        del self._mine[: bisect.bisect_right(self._mine, since)]
        try:
            async with asyncio.timeout(self._timeout):
                await self._kv.put(self._key, orjson.dumps([round(t, 3) for t in self._mine]))
        except (nats.errors.Error, TimeoutError, OSError) as exc:
            log.warning("cannot record a send for a successor", extra={"error": repr(exc)})


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
        windows: KeyValue | None = None,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._clock = clock
        self._sleep = sleep
        self._windows = windows
        self._process = uuid.uuid4().hex[:16]  # per start: never a predecessor's key
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
        windows = None
        if self._windows is not None:
            windows = SendWindows(
                self._windows,
                digest,
                process=self._process,
                longest_seconds=max(per for _, per in limits) + DEFAULT_MARGIN,
                clock=self._clock,
            )
        shared = SharedTokenBucket(
            self._redis,
            f"{self._prefix}:ratelimit:{digest}",
            limits,
            fallback=local,
            sleep=self._sleep,
            windows=windows,
        )
        self._buckets[bot_key] = shared
        return shared
