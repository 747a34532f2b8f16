"""Idempotency keys per (event id, channel), in a JetStream KV bucket: sent at most once.

The markers are kept in NATS, not in Redis: a marker is the only record that a card went out,
and Redis may lose its data (FLUSHALL, a fresh data dir) while copies of events it had seen are
still under way (an ack lost in a NATS restart, a replay on the stream). Redis losing its data
must cost a relist, never a card sent twice. The bucket (``trainwatch_notifier_deliveries``,
see ``trainwatch_common.streams``) has the notifier as its only writer; every change is a
compare-and-set on the key's revision, which gives what Redis's ``SET NX`` and scripts gave.

A key's value says where its delivery is, so a crash is never mistaken for "not sent":

1. ``claim``: create the key as ``"held|<instance>|<ts>"`` (only if it does not exist) when a
   sender takes the delivery on. Only the claimer sends; another copy of the event (a
   redelivery, a replay, another replica) finds the key and does not. Nothing has gone out yet,
   so a crash now loses nothing: a copy that finds a "held" marker older than
   ``unconfirmed_after`` takes it over and sends.
2. ``begin_request``: ``"sending|<instance>|<ts>"``, only if the marker is still ours (its
   revision unchanged), just before each HTTP attempt. After an attempt the bot answered with a
   refusal (429, 5xx, its rate-limit code) ``end_request`` puts "held" back for the back-off: it
   did not go out (unless an earlier attempt of the same delivery went unanswered: then it stays
   "sending").
3. ``mark_sent``: ``"sent|<ts>"`` once the bot confirmed, before the JetStream ack.

A crash after 3 and before the ack: the redelivered event finds "sent" and is acked, no resend.
A crash while a request was out (or in the back-off after one whose outcome is unknown, such as a
read timeout) leaves "sending": nobody knows whether the bot got it. A copy that finds a "sending"
marker older than ``unconfirmed_after`` treats it as such a crash (the policy decides: resend it,
flagged as a resend under the same idempotency key, or dead-letter it). A younger marker of
either kind means a live sender may still be at it, so the copy is put back for later.
A delivery that fails definitively is marked "dead"; one abandoned while "held" (shutdown during
a wait) has its claim released so a later copy can send it at once.

Any NATS failure (a restart, a timeout) raises ``MarkersUnavailable``: nothing may be claimed or
posted without the markers, so the caller waits and tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Literal, TypeVar

import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from trainwatch_notifier.clock import Clock

T = TypeVar("T")

ClaimState = Literal["held", "sending", "sent", "dead"]

_KEY_UNSAFE = re.compile(r"[^-_a-zA-Z0-9]")
_ID_UNSAFE = re.compile(r"[^-_a-zA-Z0-9.]")


class MarkersUnavailable(Exception):
    """The KV bucket cannot be read or written now (NATS away, a timeout): wait and retry."""


def _escape(text: str, unsafe: re.Pattern[str]) -> str:
    """KV keys allow ``[-_=./a-zA-Z0-9]``: any other byte becomes ``=XX`` (``=`` itself too)."""
    return unsafe.sub(lambda m: "".join(f"={b:02x}" for b in m.group().encode()), text)


@dataclass(frozen=True, slots=True)
class Claim:
    key: str
    state: ClaimState
    marker: str  # the value in the bucket: ours when ``mine``, the one found otherwise
    mine: bool = False
    age: float = 0.0  # for "held" and "sending": how long ago that marker was written
    revision: int = 0  # the key's revision holding ``marker``: a change must name it


class IdempotencyKeys:
    def __init__(
        self,
        kv: KeyValue,
        *,
        instance: str = "notifier",
        clock: Clock = time.time,
        timeout_seconds: float = 5.0,
    ) -> None:
        self._kv = kv
        self._instance = instance
        self._clock = clock
        self._timeout = timeout_seconds
        # A swap that NATS cut short: key -> (the revision the caller still knows, our newer claim).
        self._moved: dict[str, tuple[int, Claim]] = {}

    def key(self, event_id: str, channel: str) -> str:
        """``<channel>.<event id>``, escaped into what a KV key may hold."""
        event = _escape(event_id, _ID_UNSAFE)
        if not event or event.startswith(".") or event.endswith(".") or ".." in event:
            event = _escape(event_id, _KEY_UNSAFE)
        return f"{_escape(channel, _KEY_UNSAFE) or '=00'}.{event or '=00'}"

    def _marker(self, state: str) -> str:
        return f"{state}|{self._instance}|{self._clock():.3f}"

    async def _call(self, operation: Awaitable[T]) -> T:
        """Await one KV operation; NATS failures (but a revision mismatch) become unavailable."""
        try:
            async with asyncio.timeout(self._timeout):
                return await operation
        except nats.js.errors.KeyWrongLastSequenceError:
            raise
        except (nats.errors.Error, TimeoutError, OSError) as exc:
            if isinstance(exc, nats.js.errors.KeyNotFoundError):
                raise
            raise MarkersUnavailable(repr(exc)) from exc

    async def claim(self, keys: list[str], *, state: Literal["held", "sending"] = "held") -> list[Claim]:
        """Try to claim every key (concurrently); each result says what was found. A sender whose
        request follows at once (nothing to wait for) claims straight as "sending"."""
        marker = self._marker(state)
        results = await asyncio.gather(
            *(self._claim_one(key, state, marker) for key in keys), return_exceptions=True
        )
        claims = [result for result in results if isinstance(result, Claim)]
        failed = next((result for result in results if isinstance(result, BaseException)), None)
        if failed is None:
            return claims
        # Some keys could not be claimed: give back those that were, so the retry (which calls
        # again with every key) does not find our own fresh markers and take them for another's.
        with contextlib.suppress(MarkersUnavailable):
            await self.release(claims)
        raise failed

    async def _claim_one(self, key: str, state: ClaimState, marker: str) -> Claim:
        while True:
            try:
                revision = await self._call(self._kv.create(key, marker.encode()))
                return Claim(key, state, marker, mine=True, revision=int(revision))
            except nats.js.errors.KeyWrongLastSequenceError:
                pass
            try:
                entry = await self._call(self._kv.get(key))
            except nats.js.errors.KeyNotFoundError:  # deleted (released) in between: claim again
                continue
            return self._parse(key, entry.value or b"", int(entry.revision or 0))

    def _parse(self, key: str, found: bytes, revision: int) -> Claim:
        value = found.decode(errors="replace")
        state, _, rest = value.partition("|")
        if state in ("held", "sending"):
            _, _, taken = rest.rpartition("|")
            try:
                age = self._clock() - float(taken)
            except ValueError:
                age = float("inf")
            return Claim(key, "held" if state == "held" else "sending", value, age=age, revision=revision)
        if state == "dead":
            return Claim(key, "dead", value, revision=revision)
        return Claim(key, "sent", value, revision=revision)  # "sent", or unknown: never send again

    async def take_over(self, claim: Claim) -> Claim | None:
        """Replace an abandoned marker with our "held" one; None if it changed meanwhile."""
        taken = await self._swap_all_or_none([claim], "held")
        return taken[0] if taken else None

    async def begin_request(self, claims: list[Claim]) -> list[Claim] | None:
        """Just before an HTTP attempt: our markers become "sending" (a fresh time, so their age
        is that of the latest attempt); None if any was taken over (then none of ours stays)."""
        return await self._swap_all_or_none(claims, "sending")

    async def end_request(self, claims: list[Claim]) -> list[Claim] | None:
        """The bot refused the attempt, so nothing went out: back to "held" for the back-off."""
        return await self._swap_all_or_none(claims, "held")

    async def _swap_all_or_none(
        self, claims: list[Claim], state: Literal["held", "sending"]
    ) -> list[Claim] | None:
        """Each marker to ``state`` if it still has the revision we know. Should any have changed
        (another sender took it over), the ones we did change are released (nothing of them goes
        out) and None is returned. Should NATS fail part-way, the caller retries with the same
        claims: the keys already changed go on from their new revisions (``_moved``)."""
        if not claims:
            return []
        marker = self._marker(state)
        swapped: list[Claim] = []
        lost = False
        known: list[int] = []  # per swapped key, the revision the caller knows it by
        for claim in claims:
            caller_revision = claim.revision
            moved = self._moved.get(claim.key)
            if moved is not None and moved[0] == claim.revision:
                claim = moved[1]
            try:
                revision = await self._call(self._kv.update(claim.key, marker.encode(), last=claim.revision))
            except nats.js.errors.KeyWrongLastSequenceError:
                lost = True
                continue
            except MarkersUnavailable:
                for done, before in zip(swapped, known, strict=True):
                    self._moved[done.key] = (before, done)
                raise
            swapped.append(Claim(claim.key, state, marker, mine=True, revision=int(revision)))
            known.append(caller_revision)
        for claim in claims:
            self._moved.pop(claim.key, None)
        if lost:
            await self.release(swapped)
            return None
        return swapped

    async def state_of(self, key: str) -> Claim | None:
        """What the key says now; None if it has no marker."""
        try:
            entry = await self._call(self._kv.get(key))
        except nats.js.errors.KeyNotFoundError:
            return None
        return self._parse(key, entry.value or b"", int(entry.revision or 0))

    async def revive(self, claim: Claim) -> bool:
        """Remove a "dead" marker, so the delivery can be claimed and sent again (a replay asked
        for by a person); False if the marker changed since it was read."""
        assert claim.state == "dead"
        try:
            await self._call(self._kv.delete(claim.key, last=claim.revision))
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        return True

    async def mark_sent(self, keys: list[str]) -> None:
        await self._set_all(keys, f"sent|{self._clock():.3f}")

    async def mark_dead(self, keys: list[str], reason: str) -> None:
        await self._set_all(keys, f"dead|{reason}|{self._clock():.3f}")

    async def _set_all(self, keys: list[str], value: str) -> None:
        await asyncio.gather(*(self._call(self._kv.put(key, value.encode())) for key in keys))

    async def release(self, claims: list[Claim]) -> None:
        """Give our claims back (nothing was sent); markers found from others are left alone."""
        for claim in claims:
            if not claim.mine:
                continue
            with contextlib.suppress(nats.js.errors.KeyWrongLastSequenceError):  # someone else's now
                await self._call(self._kv.delete(claim.key, last=claim.revision))
