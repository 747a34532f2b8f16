"""Replaying a dead letter: a person asks for a notification the notifier gave up on to be sent
again (its channel fixed: the secret, the webhook, the bot's keyword).

The letter's event goes through its channel's worker like any delivery (rate limits, digests,
the idempotency markers), so it is sent at most once however many replays are asked for at once:
the "dead" marker is removed by a compare-and-set, and only the replay that removed it submits.
Once the bot confirmed it, the letter is deleted; refused again, it stays (and the new refusal is
dead-lettered as usual, with the same Msg-Id, so within the stream's duplicate window no second
letter appears).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from trainwatch_common import JobStatusEvent, parse_job_event
from trainwatch_notifier.deadletter import DeadLetter, DeadLetterBox
from trainwatch_notifier.dedupe import IdempotencyKeys
from trainwatch_notifier.dispatch import Item
from trainwatch_notifier.rules import Delivery, route
from trainwatch_notifier.ruleset import Ruleset
from trainwatch_notifier.workers import ChannelWorkers

Outcome = Literal["sent", "already-sent", "refused-again", "not-sent-yet"]


class ReplayRefused(Exception):
    """The letter cannot be replayed; the message says why (for a 404 or a 409)."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


@dataclass(frozen=True, slots=True)
class ReplayResult:
    outcome: Outcome
    letter: DeadLetter
    detail: str = ""


class _Settled:
    """The ``Settler`` of a replayed delivery: no JetStream message to ack, a person waiting."""

    def __init__(self) -> None:
        self.retry: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    async def settle(self, channel: str, *, retry: bool) -> None:
        if not self.retry.done():
            self.retry.set_result(retry)


class Replayer:
    def __init__(
        self,
        box: DeadLetterBox,
        workers: ChannelWorkers,
        keys: IdempotencyKeys,
        *,
        ruleset: Callable[[], Ruleset | None],
        cluster_labels: Callable[[str], dict[str, str]],
        wait_seconds: float = 20.0,  # under the CLI's 30 s request timeout
    ) -> None:
        self._box = box
        self._workers = workers
        self._keys = keys
        self._ruleset = ruleset
        self._cluster_labels = cluster_labels
        self._wait_seconds = wait_seconds

    async def replay(self, seq: int) -> ReplayResult:
        letter = await self._box.get(seq)
        if letter is None:
            raise ReplayRefused(f"no notifier dead letter at sequence {seq}", missing=True)
        event = _event_of(letter)
        if not self._workers.has(letter.channel):
            raise ReplayRefused(f"channel {letter.channel!r} is not in the rules any more")
        key = self._keys.key(event.event_id, letter.channel)
        marker = await self._keys.state_of(key)
        if marker is not None and marker.state == "sent":
            await self._box.delete(seq)  # a replay delivered it; its deletion was cut short
            return ReplayResult("already-sent", letter)
        if marker is not None and marker.state in ("held", "sending"):
            raise ReplayRefused("this notification is being sent now (another replay)")
        if marker is not None and not await self._keys.revive(marker):
            raise ReplayRefused("another replay of this letter is under way")
        settled = _Settled()
        item = Item(event, letter.payload, self._delivery(event, letter.channel), settled)
        if not self._workers.submit(item):
            raise ReplayRefused(f"channel {letter.channel!r} is not in the rules any more")
        try:
            async with asyncio.timeout(self._wait_seconds):
                retry = await asyncio.shield(settled.retry)
        except TimeoutError:
            return ReplayResult("not-sent-yet", letter, "still being sent (rate limit or retries)")
        after = await self._keys.state_of(key)
        if after is not None and after.state == "sent":
            await self._box.delete(seq)
            return ReplayResult("sent", letter)
        if after is not None and after.state == "dead":
            return ReplayResult("refused-again", letter, after.marker.split("|")[1])
        detail = "NATS or the markers were unavailable: replay it again" if retry else ""
        return ReplayResult("not-sent-yet", letter, detail)

    def _delivery(self, event: JobStatusEvent, channel: str) -> Delivery:
        """As the rules route it now (for the owner's mention), else the channel alone."""
        ruleset = self._ruleset()
        if ruleset is not None:
            labels = self._cluster_labels(event.job.cluster_id)
            for delivery in route(event, cluster_labels=labels, ruleset=ruleset):
                if delivery.channel == channel:
                    return delivery
        return Delivery(channel=channel, rules=("replay",), mention=None)


def _event_of(letter: DeadLetter) -> JobStatusEvent:
    if letter.channel in ("", "-"):  # "-": the consumer could not read it, so routed it nowhere
        raise ReplayRefused(f"a {letter.reason!r} letter names no channel: nothing to replay it to")
    try:
        return parse_job_event(letter.payload)
    except Exception as exc:  # what the consumer could not read, a replay cannot either
        raise ReplayRefused(f"the letter's event cannot be read: {str(exc)[:200]}") from None
