"""Idempotency keys per (event id, channel) in Redis: a notification is sent at most once.

A key's value says where its delivery is, so a crash is never mistaken for "not sent":

1. ``claim``: ``SET key "held|<instance>|<ts>" NX`` when a sender takes the delivery on. Only the
   claimer sends; another copy of the event (a redelivery, a replay, another replica) finds the
   key and does not. Nothing has gone out yet, so a crash now loses nothing: a copy that finds a
   "held" marker older than ``unconfirmed_after`` takes it over and sends.
2. ``begin_request``: ``"sending|<instance>|<ts>"``, only if the marker is still ours, just
   before each HTTP attempt. After an attempt the bot answered with a refusal (429, 5xx, its
   rate-limit code) ``end_request`` puts "held" back for the back-off: it did not go out (unless
   an earlier attempt of the same delivery went unanswered: then it stays "sending"). A marker
   of ours that Redis lost (FLUSHALL, a fresh data dir) is written back by the next swap.
3. ``mark_sent``: ``SET key "sent|<ts>"`` once the bot confirmed, before the JetStream ack.

A crash after 3 and before the ack: the redelivered event finds "sent" and is acked, no resend.
A crash while a request was out (or in the back-off after one whose outcome is unknown, such as a
read timeout) leaves "sending": nobody knows whether the bot got it. A copy that finds a "sending"
marker older than ``unconfirmed_after`` treats it as such a crash (the policy decides: dead-letter
it, which keeps "never twice", or resend). A younger marker of either kind means a live sender may
still be at it, so the copy is put back for later.
A delivery that fails definitively is marked "dead"; one abandoned while "held" (shutdown during
a wait) has its claim released so a later copy can send it at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from redis.asyncio import Redis

from trainwatch_notifier.clock import Clock

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

# KEYS[i] holds ARGV[i] (the marker we expect); all of them or none are set to ARGV[#KEYS + 1].
# Returns 1 if they were set, 0 if any marker had changed (another sender took that one over).
# A key that is gone (Redis lost its data: FLUSHALL, a fresh data dir) is not a marker someone
# else wrote: nobody has claimed it since, so ours is written back and the delivery goes on in
# its place (putting it back would let the job's newer events, whose order entries were lost
# too, overtake it).
_SWAP = """
for i, key in ipairs(KEYS) do
  local found = redis.call('GET', key)
  if found and found ~= ARGV[i] then
    return 0
  end
end
for _, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[#KEYS + 1], 'EX', ARGV[#KEYS + 2])
end
return 1
"""

# Delete each KEYS[i] that still holds ARGV[i]; markers that changed are someone else's.
_RELEASE = """
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[i] then
    redis.call('DEL', key)
  end
end
return #KEYS
"""

ClaimState = Literal["held", "sending", "sent", "dead"]


@dataclass(frozen=True, slots=True)
class Claim:
    key: str
    state: ClaimState
    marker: str  # the value in Redis: ours when ``mine``, the one found otherwise
    mine: bool = False
    age: float = 0.0  # for "held" and "sending": how long ago that marker was written


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
        self._swap = redis.register_script(_SWAP)
        self._release = redis.register_script(_RELEASE)

    def key(self, event_id: str, channel: str) -> str:
        return f"{self._prefix}:notified:{channel}:{event_id}"

    def _marker(self, state: str) -> str:
        return f"{state}|{self._instance}|{self._clock():.3f}"

    async def claim(self, keys: list[str], *, state: Literal["held", "sending"] = "held") -> list[Claim]:
        """Try to claim every key in one round trip; each result says what was found. A sender
        whose request follows at once (nothing to wait for) claims straight as "sending"."""
        marker = self._marker(state)
        results = await self._claim(keys=keys, args=[marker, self._ttl])
        return [
            Claim(key, state, marker, mine=True) if found == 1 else self._parse(key, found)
            for key, found in zip(keys, results, strict=True)
        ]

    def _parse(self, key: str, found: bytes | str | None) -> Claim:
        value = found.decode() if isinstance(found, bytes) else (found or "")
        state, _, rest = value.partition("|")
        if state in ("held", "sending"):
            _, _, taken = rest.rpartition("|")
            try:
                age = self._clock() - float(taken)
            except ValueError:
                age = float("inf")
            return Claim(key, "held" if state == "held" else "sending", value, age=age)
        if state == "dead":
            return Claim(key, "dead", value)
        return Claim(key, "sent", value)  # "sent", or a value we do not know: never send again

    async def take_over(self, claim: Claim) -> Claim | None:
        """Replace an abandoned marker with our "held" one; None if it changed meanwhile."""
        taken = await self._swap_all_or_none([claim], "held")
        return taken[0] if taken else None

    async def begin_request(self, claims: list[Claim]) -> list[Claim] | None:
        """Just before an HTTP attempt: our markers become "sending" (a fresh time, so their age
        is that of the latest attempt); None, changing nothing, if any was taken over."""
        return await self._swap_all_or_none(claims, "sending")

    async def end_request(self, claims: list[Claim]) -> list[Claim] | None:
        """The bot refused the attempt, so nothing went out: back to "held" for the back-off."""
        return await self._swap_all_or_none(claims, "held")

    async def _swap_all_or_none(self, claims: list[Claim], state: str) -> list[Claim] | None:
        if not claims:
            return []
        marker = self._marker(state)
        swapped = await self._swap(
            keys=[claim.key for claim in claims],
            args=[*(claim.marker for claim in claims), marker, self._ttl],
        )
        if not swapped:
            return None
        new_state: ClaimState = "sending" if state == "sending" else "held"
        return [Claim(claim.key, new_state, marker, mine=True) for claim in claims]

    async def mark_sent(self, keys: list[str]) -> None:
        await self._set_all(keys, f"sent|{self._clock():.3f}")

    async def mark_dead(self, keys: list[str], reason: str) -> None:
        await self._set_all(keys, f"dead|{reason}|{self._clock():.3f}")

    async def _set_all(self, keys: list[str], value: str) -> None:
        if keys:
            await self._set(keys=keys, args=[value, self._ttl])

    async def release(self, claims: list[Claim]) -> None:
        """Give our claims back (nothing was sent); markers found from others are left alone."""
        ours = [claim for claim in claims if claim.mine]
        if ours:
            await self._release(keys=[claim.key for claim in ours], args=[claim.marker for claim in ours])
