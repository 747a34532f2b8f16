"""Dead letters: deliveries the notifier gave up on, on deadletter.v1.notifier.<reason>.

``DeadLetters`` publishes them; ``DeadLetterBox`` reads, and deletes the ones a replay delivered
(``trainwatch notifications dead-letters list / replay``, the admin API, the dashboard).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import Header

from trainwatch_common import deadletter_subject
from trainwatch_common.streams import DEADLETTER_STREAM
from trainwatch_common.subjects import DEADLETTER_PREFIX

REASON_HEADER = "Trainwatch-Reason"
CHANNEL_HEADER = "Trainwatch-Channel"
EVENT_ID_HEADER = "Trainwatch-Event-Id"
DETAIL_HEADER = "Trainwatch-Detail"
NOTIFIER_LETTERS = f"{DEADLETTER_PREFIX}.notifier.>"  # every reason


class DeadLetters:
    def __init__(self, js: JetStreamContext) -> None:
        self._js = js

    async def publish(
        self, *, payload: bytes, event_id: str, channel: str, reason: str, detail: str = ""
    ) -> None:
        """Publish once per (event, channel, reason): the Msg-Id makes a retried publish a no-op."""
        headers = {
            REASON_HEADER: reason,
            CHANNEL_HEADER: channel,
            EVENT_ID_HEADER: event_id,
            Header.MSG_ID: f"notifier:{channel}:{event_id}:{reason}",
        }
        if detail:
            headers[DETAIL_HEADER] = detail[:500]
        await self._js.publish(deadletter_subject("notifier", reason), payload, headers=headers)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    seq: int  # its sequence on the DEADLETTER stream: what a replay names
    reason: str
    channel: str  # empty for an event that never reached a channel (malformed)
    event_id: str
    detail: str
    time: datetime | None
    payload: bytes


class DeadLetterBox:
    """The notifier's dead letters on the DEADLETTER stream, read by sequence."""

    def __init__(self, js: JetStreamContext, stream: str = DEADLETTER_STREAM.name or "DEADLETTER") -> None:
        self._js = js
        self._stream = stream

    async def page(self, *, after: int = 0, limit: int = 50, reason: str | None = None) -> list[DeadLetter]:
        """Oldest first, from the first after sequence ``after``; at most ``limit``."""
        subject = deadletter_subject("notifier", reason) if reason else NOTIFIER_LETTERS
        letters: list[DeadLetter] = []
        seq = after + 1
        while len(letters) < limit:
            try:
                raw = await self._js.get_msg(self._stream, seq=seq, subject=subject, next=True)
            except nats.js.errors.NotFoundError:
                break
            letters.append(_letter(raw))
            seq = int(raw.seq or seq) + 1
        return letters

    async def get(self, seq: int) -> DeadLetter | None:
        try:
            raw = await self._js.get_msg(self._stream, seq=seq)
        except nats.js.errors.NotFoundError:
            return None
        if not str(raw.subject or "").startswith(NOTIFIER_LETTERS.removesuffix(">")):
            return None  # another service's letter
        return _letter(raw)

    async def delete(self, seq: int) -> bool:
        try:
            return await self._js.delete_msg(self._stream, seq)
        except (nats.js.errors.NotFoundError, nats.js.errors.APIError):
            return False  # already gone (another replay, or its age)


def _letter(raw: object) -> DeadLetter:
    headers: dict[str, str] = getattr(raw, "headers", None) or {}
    return DeadLetter(
        seq=int(getattr(raw, "seq", 0) or 0),
        reason=headers.get(REASON_HEADER, ""),
        channel=headers.get(CHANNEL_HEADER, ""),
        event_id=headers.get(EVENT_ID_HEADER, ""),
        detail=headers.get(DETAIL_HEADER, ""),
        time=getattr(raw, "time", None),
        payload=getattr(raw, "data", None) or b"",
    )
