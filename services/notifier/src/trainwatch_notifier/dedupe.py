"""Idempotency keys per (event id, channel) in Redis: a notification is sent at most once.

Two phases, so a crash is never mistaken for "not sent":

1. ``claim``: ``SET key "sending|<instance>|<ts>" NX`` just before the HTTP request. Only the
   claimer sends; any other copy of the event (a redelivery, a replay, another replica) finds
   the key and does not.
2. ``mark_sent``: ``SET key "sent|<ts>"`` once the bot confirmed, before the JetStream ack.

A crash after 2 and before the ack: the redelivered event finds "sent" and is acked, no resend.
A crash between the request and 2 leaves "sending": nobody knows whether the bot got it. A copy
that finds a "sending" marker older than ``unconfirmed_after`` treats it as such a crash (the
policy decides: dead-letter it, which keeps "never twice", or resend). A younger marker means
a live sender may still be retrying, so the copy is put back for later.
A delivery that fails definitively is marked "dead"; one abandoned without a send attempt in
flight (shutdown during a back-off) has its claim released so a later copy can send it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from redis.asyncio import Redis

from trainwatch_notifier.limits import Clock

# One round trip for any number of keys (a digest claims many): per key, 1 if we claimed it,
# else the value found. Scripts rather than pipelines: a third of the client CPU.
_CLAIM = """
local found = {}
for i, key in ipairs(KEYS) do
  if redis.call('SET', key, ARGV[1], 'NX', 'EX', ARGV[2]) then
    found[i] = 1
  else
    found[i] = redis.call('GET', key) or ''
  end
end
return found
"""

_SET_ALL = """
for _, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[1], 'EX', ARGV[2])
end
return #KEYS
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

_TAKE_OVER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
  return 1
end
return 0
"""

ClaimState = Literal["claimed", "sent", "dead", "sending"]


@dataclass(frozen=True, slots=True)
class Claim:
    key: str
    state: ClaimState
    marker: str  # our marker when claimed, the one found otherwise
    age: float = 0.0  # for "sending": how long ago that claim was taken


class IdempotencyKeys:
    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str = "trainwatch",
        ttl_seconds: int = 14 * 24 * 3600,
        instance: str = "notifier",
        clock: Clock = time.time,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._ttl = ttl_seconds
        self._instance = instance
        self._clock = clock
        self._claim = redis.register_script(_CLAIM)
        self._set = redis.register_script(_SET_ALL)
        self._release = redis.register_script(_RELEASE)
        self._take_over = redis.register_script(_TAKE_OVER)

    def key(self, event_id: str, channel: str) -> str:
        return f"{self._prefix}:notified:{channel}:{event_id}"

    async def claim(self, keys: list[str]) -> list[Claim]:
        """Try to claim every key in one round trip; each result says what was found."""
        marker = f"sending|{self._instance}|{self._clock():.3f}"
        results = await self._claim(keys=keys, args=[marker, self._ttl])
        return [
            Claim(key, "claimed", marker) if found == 1 else self._parse(key, found)
            for key, found in zip(keys, results, strict=True)
        ]

    def _parse(self, key: str, found: bytes | str | None) -> Claim:
        value = found.decode() if isinstance(found, bytes) else (found or "")
        state, _, rest = value.partition("|")
        if state == "sending":
            _, _, taken = rest.rpartition("|")
            try:
                age = self._clock() - float(taken)
            except ValueError:
                age = float("inf")
            return Claim(key, "sending", value, age)
        if state == "dead":
            return Claim(key, "dead", value)
        return Claim(key, "sent", value)  # "sent", or a value we do not know: never send again

    async def take_over(self, claim: Claim) -> Claim | None:
        """Replace an abandoned "sending" marker with ours (the resend policy); None if it changed."""
        marker = f"sending|{self._instance}|{self._clock():.3f}"
        taken = await self._take_over(keys=[claim.key], args=[claim.marker, marker, self._ttl])
        return Claim(claim.key, "claimed", marker) if taken else None

    async def mark_sent(self, keys: list[str]) -> None:
        await self._set_all(keys, f"sent|{self._clock():.3f}")

    async def mark_dead(self, keys: list[str], reason: str) -> None:
        await self._set_all(keys, f"dead|{reason}|{self._clock():.3f}")

    async def _set_all(self, keys: list[str], value: str) -> None:
        if keys:
            await self._set(keys=keys, args=[value, self._ttl])

    async def release(self, claims: list[Claim]) -> None:
        """Give our claims back (nothing was sent); markers found from others are left alone."""
        for claim in claims:
            if claim.state == "claimed":
                await self._release(keys=[claim.key], args=[claim.marker])
