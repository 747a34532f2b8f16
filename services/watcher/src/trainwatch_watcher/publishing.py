"""JetStream publishing: deterministic Nats-Msg-Id, acknowledgements awaited, never dropped.

``submit`` sends at once and returns a handle; ``confirm`` waits for the acknowledgement and,
when it does not come (NATS down, restarting, a timeout), publishes the same message again with
the same id until it is acknowledged. JetStream drops the copies within its duplicate window,
so a retry can never make two events of one.

Acknowledgements come back on one wildcard inbox of this publisher, matched to their futures by
a token in the reply subject: what nats-py's ``publish_async`` does, without its per-message
costs (a ``wait_for`` task for its slot semaphore, random token bytes, a done-callback), which
measured at a sixth of the watcher's CPU per event. The informers' bounded queues limit how
many publishes are in flight.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.api import Header, PubAck
from nats.js.errors import APIError, NoStreamResponseError
from prometheus_client import Histogram

from trainwatch_watcher.errors import LeaseNotProven
from trainwatch_watcher.metrics import WatcherMetrics

log = logging.getLogger(__name__)

NO_RESPONDERS_STATUS = "503"


@dataclass(slots=True)
class PendingPublish:
    subject: str
    payload: bytes
    msg_id: str
    kind_key: str
    started: float = field(default_factory=time.monotonic)
    token: str = ""  # of the last send: its acknowledgement comes to "<inbox>.<token>"
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
        self._ack_timeout = ack_timeout
        self._metrics = metrics
        self._retry_max = retry_max
        self._latency_by_kind: dict[str, Histogram] = {}  # labelled children, looked up once
        self._inbox: str | None = None  # "<inbox>." once subscribed
        self._tokens = itertools.count()
        self._acks: dict[str, asyncio.Future[PubAck]] = {}

    async def submit(self, *, subject: str, payload: bytes, msg_id: str, kind_key: str) -> PendingPublish:
        pending = PendingPublish(subject, payload, msg_id, kind_key)
        await self._send(pending)
        return pending

    async def _send(self, pending: PendingPublish) -> None:
        pending.error = None
        pending.future = None
        try:
            if self._inbox is None:
                inbox = f"{self._nc.new_inbox()}."
                await self._nc.subscribe(inbox + "*", cb=self._on_ack)
                self._inbox = inbox
            pending.token = str(next(self._tokens))
            pending.future = asyncio.get_running_loop().create_future()
            self._acks[pending.token] = pending.future
            await self._nc.publish(
                pending.subject,
                pending.payload,
                reply=self._inbox + pending.token,
                headers={Header.MSG_ID: pending.msg_id},
            )
        except Exception as exc:  # not connected, buffer full: confirm() retries
            reraise_cancellation(exc)
            self._forget(pending)
            pending.error = exc
        reraise_cancellation(None)

    def _forget(self, pending: PendingPublish) -> None:
        """Stop waiting for the last send's acknowledgement (a retry gets a token of its own).

        Tokens leave ``_acks`` here or when their acknowledgement arrives, not by a callback on
        the future: one more callback per message measured at ~1.5 us.
        """
        if pending.future is not None:
            self._acks.pop(pending.token, None)
            pending.future.cancel()
            pending.future = None

    async def _on_ack(self, msg: Msg) -> None:
        assert self._inbox is not None
        future = self._acks.pop(msg.subject[len(self._inbox) :], None)
        if future is None or future.done():
            return  # given up on already (the retry has its own token), or a stray reply
        if msg.headers and msg.headers.get(Header.STATUS) == NO_RESPONDERS_STATUS:
            future.set_exception(NoStreamResponseError())
            return
        try:
            response = orjson.loads(msg.data)
            if "error" in response:
                APIError.from_error(response["error"])  # raises the APIError of that code
            future.set_result(_pub_ack(response))
        except Exception as exc:  # a refusal, or an unreadable acknowledgement: no acknowledgement
            future.set_exception(exc)

    async def confirm(
        self, pending: PendingPublish, *, may_resend: Callable[[], bool] | None = None
    ) -> PubAck:
        """Wait until JetStream has stored the message (or already had it).

        ``may_resend`` is asked before each resend: an informer whose lease is no longer proven
        (a pause past its TTL) must not send its old epoch's event again beside the new owner.
        """
        delay = 0.05
        while True:
            if pending.future is not None:
                try:
                    if pending.future.done():  # the common case under load: no timer needed
                        ack = pending.future.result()
                    else:
                        async with asyncio.timeout(self._ack_timeout):
                            ack = await pending.future
                except asyncio.CancelledError:
                    self._forget(pending)
                    raise
                except Exception as exc:  # no ack in time (TimeoutError), no stream, disconnected
                    self._forget(pending)
                    reraise_cancellation(exc)
                    pending.error = exc
                else:
                    if self._metrics is not None:
                        self._latency(pending.kind_key).observe(time.monotonic() - pending.started)
                    return ack
            if self._metrics is not None:
                self._metrics.publish_retries.inc()
            log.warning(
                "publish not acknowledged; retrying with the same id",
                extra={"msg_id": pending.msg_id, "error": repr(pending.error), "retry_in": round(delay, 2)},
            )
            await asyncio.sleep(delay * (0.5 + random.random() / 2))
            delay = min(self._retry_max, delay * 2)
            if may_resend is not None and not may_resend():
                raise LeaseNotProven(f"not resending {pending.msg_id}: the lease is no longer proven")
            await self._send(pending)

    def _latency(self, kind_key: str) -> Histogram:
        histogram = self._latency_by_kind.get(kind_key)
        if histogram is None:
            assert self._metrics is not None
            histogram = self._latency_by_kind[kind_key] = self._metrics.publish_latency.labels(kind_key)
        return histogram

    async def publish(self, *, subject: str, payload: bytes, msg_id: str, kind_key: str = "") -> PubAck:
        return await self.confirm(
            await self.submit(subject=subject, payload=payload, msg_id=msg_id, kind_key=kind_key)
        )


def _pub_ack(response: dict[str, Any]) -> PubAck:
    """``PubAck.from_response`` without its walk over ``dataclasses.fields`` (~3 us a message):
    the fields of a plain publish's acknowledgement (no batch or counter fields here)."""
    return PubAck(
        stream=response["stream"],
        seq=response["seq"],
        domain=response.get("domain"),
        duplicate=response.get("duplicate"),
    )


def reraise_cancellation(exc: BaseException | None, task: asyncio.Task[Any] | None = None) -> None:
    """Re-raise a cancellation that nats-py swallowed.

    nats-py turns a cancellation that lands while it waits for a publish slot into
    TooManyStalledMsgsError, and its flush step (``_flush_pending``) swallows CancelledError
    outright; a task being cancelled must still stop, so callers check after every publish.
    """
    if task is None:
        task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError from exc
