"""JetStream publishing: deterministic Nats-Msg-Id, acknowledgements awaited, never dropped.

``submit`` sends at once (``publish_async``) and returns a handle; ``confirm`` waits for the
acknowledgement and, when it does not come (NATS down, restarting, a timeout), publishes the
same message again with the same id until it is acknowledged. JetStream drops the copies
within its duplicate window, so a retry can never make two events of one.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass, field

from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from nats.js.api import Header, PubAck

from trainwatch_watcher.metrics import WatcherMetrics

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PendingPublish:
    subject: str
    payload: bytes
    msg_id: str
    kind_key: str
    started: float = field(default_factory=time.monotonic)
    future: asyncio.Future[PubAck] | None = None
    error: BaseException | None = None


class Publisher:
    def __init__(
        self,
        nc: NatsClient,
        *,
        ack_timeout: float = 5.0,
        metrics: WatcherMetrics | None = None,
        retry_max: float = 5.0,
    ) -> None:
        self._nc = nc
        self._js: JetStreamContext = nc.jetstream()
        self._ack_timeout = ack_timeout
        self._metrics = metrics
        self._retry_max = retry_max

    async def submit(self, *, subject: str, payload: bytes, msg_id: str, kind_key: str) -> PendingPublish:
        pending = PendingPublish(subject, payload, msg_id, kind_key)
        await self._send(pending)
        return pending

    async def _send(self, pending: PendingPublish) -> None:
        pending.error = None
        try:
            pending.future = await self._js.publish_async(
                pending.subject,
                pending.payload,
                headers={Header.MSG_ID: pending.msg_id},
                wait_stall=self._ack_timeout,
            )
        except Exception as exc:  # not connected, buffer full, stalled: confirm() retries
            reraise_cancellation(exc)
            pending.future = None
            pending.error = exc
        reraise_cancellation(None)

    async def confirm(self, pending: PendingPublish) -> PubAck:
        """Wait until JetStream has stored the message (or already had it)."""
        delay = 0.05
        while True:
            if pending.future is not None:
                try:
                    ack = await asyncio.wait_for(pending.future, self._ack_timeout)
                except (TimeoutError, Exception) as exc:  # no ack, no stream, disconnected
                    reraise_cancellation(exc)
                    pending.error = exc
                else:
                    if self._metrics is not None:
                        self._metrics.publish_latency.labels(pending.kind_key).observe(
                            time.monotonic() - pending.started
                        )
                    return ack
            if self._metrics is not None:
                self._metrics.publish_retries.inc()
            log.warning(
                "publish not acknowledged; retrying with the same id",
                extra={"msg_id": pending.msg_id, "error": repr(pending.error), "retry_in": round(delay, 2)},
            )
            await asyncio.sleep(delay * (0.5 + random.random() / 2))
            delay = min(self._retry_max, delay * 2)
            await self._send(pending)

    async def publish(self, *, subject: str, payload: bytes, msg_id: str, kind_key: str = "") -> PubAck:
        return await self.confirm(
            await self.submit(subject=subject, payload=payload, msg_id=msg_id, kind_key=kind_key)
        )


def reraise_cancellation(exc: BaseException | None) -> None:
    """Re-raise a cancellation that nats-py swallowed.

    nats-py turns a cancellation that lands while it waits for a publish slot into
    TooManyStalledMsgsError, and its flush step (``_flush_pending``) swallows CancelledError
    outright; a task being cancelled must still stop, so callers check after every publish.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError from exc
