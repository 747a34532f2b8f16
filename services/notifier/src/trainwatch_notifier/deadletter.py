"""Dead letters: deliveries the notifier gave up on, on deadletter.v1.notifier.<reason>."""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.api import Header

from trainwatch_common import deadletter_subject

REASON_HEADER = "Trainwatch-Reason"


class DeadLetters:
    def __init__(self, js: JetStreamContext) -> None:
        self._js = js

    async def publish(
        self, *, payload: bytes, event_id: str, channel: str, reason: str, detail: str = ""
    ) -> None:
        """Publish once per (event, channel, reason): the Msg-Id makes a retried publish a no-op."""
        headers = {
            REASON_HEADER: reason,
            "Trainwatch-Channel": channel,
            "Trainwatch-Event-Id": event_id,
            Header.MSG_ID: f"notifier:{channel}:{event_id}:{reason}",
        }
        if detail:
            headers["Trainwatch-Detail"] = detail[:500]
        await self._js.publish(deadletter_subject("notifier", reason), payload, headers=headers)
