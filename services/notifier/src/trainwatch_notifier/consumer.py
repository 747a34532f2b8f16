"""The durable JetStream consumer shared by the replicas: fetch, check, route, hand over, ack.

An event is acked only when every channel it was routed to has settled it: sent, found already
sent, or dead-lettered. Anything else (Redis away, a reload race, shutdown) naks it for later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from pydantic import ValidationError
from redis.asyncio import Redis

from trainwatch_common import JobStatusEvent, parse_job_event
from trainwatch_common.streams import NOTIFIER_CONSUMER
from trainwatch_notifier import metrics
from trainwatch_notifier.deadletter import DeadLetters
from trainwatch_notifier.dispatch import Item
from trainwatch_notifier.rules import route
from trainwatch_notifier.ruleset import Ruleset
from trainwatch_notifier.workers import ChannelWorkers

log = logging.getLogger(__name__)

RETRY_DELAY_SECONDS = 5.0


class PendingMessage:
    """One fetched message and the deliveries it is waiting for."""

    def __init__(self, msg: Msg, deliveries: int, on_done: Callable[[PendingMessage], None]) -> None:
        self.msg = msg
        self._remaining = deliveries
        self._settled: set[str] = set()
        self._retry = False
        self._on_done = on_done

    async def settle(self, channel: str, *, retry: bool) -> None:
        if channel in self._settled:  # a worker's catch-all may repeat an outcome already given
            return
        self._settled.add(channel)
        self._remaining -= 1
        self._retry = self._retry or retry
        if self._remaining > 0:
            return
        self._on_done(self)
        try:
            if self._retry:
                await self.msg.nak(delay=RETRY_DELAY_SECONDS)
            else:
                await self.msg.ack()
        except Exception as exc:  # connection gone: JetStream redelivers it; the keys make that safe
            log.warning("cannot ack or nak", extra={"error": repr(exc)})


class JobConsumer:
    def __init__(
        self,
        js: JetStreamContext,
        *,
        redis: Redis,
        workers: ChannelWorkers,
        ruleset: Callable[[], Ruleset | None],
        cluster_labels: Callable[[str], dict[str, str]],
        deadletters: DeadLetters,
        fetch_batch: int = 100,
        max_in_flight: int = 1000,
    ) -> None:
        self._js = js
        self._redis = redis
        self._workers = workers
        self._ruleset = ruleset
        self._cluster_labels = cluster_labels
        self._deadletters = deadletters
        self._fetch_batch = fetch_batch
        self._max_in_flight = max_in_flight
        self.pending: set[PendingMessage] = set()
        self._room = asyncio.Event()
        self._room.set()

    def _done(self, message: PendingMessage) -> None:
        self.pending.discard(message)
        metrics.PENDING.set(len(self.pending))
        if len(self.pending) < self._max_in_flight:
            self._room.set()

    async def run(self) -> None:
        durable = NOTIFIER_CONSUMER.config.durable_name
        assert durable
        subscription = await self._js.pull_subscribe_bind(durable, stream=NOTIFIER_CONSUMER.stream)
        try:
            while True:
                await self._room.wait()
                batch = min(self._fetch_batch, self._max_in_flight - len(self.pending))
                try:
                    messages = await subscription.fetch(batch, timeout=1.0)
                except (nats.errors.TimeoutError, TimeoutError):  # both, depending on where it expired
                    continue
                except nats.errors.Error as exc:  # NATS away: the client reconnects; wait for it
                    log.warning("fetch failed, retrying", extra={"error": repr(exc)})
                    await asyncio.sleep(1.0)
                    continue
                await self.handle_batch(messages)
        finally:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()

    async def handle_batch(self, messages: list[Msg]) -> None:
        """Route a fetched batch.

        No event is dropped for its epoch: fencing stops a stale watcher from publishing, but a
        copy it did publish may be the only one (the new owner's has the same event id and
        JetStream drops it as a duplicate). Copies are told apart by event id, not by epoch.
        """
        for msg in messages:
            event = await self._parse(msg)
            if event is not None:
                await self._route(msg, event)

    async def _parse(self, msg: Msg) -> JobStatusEvent | None:
        try:
            return parse_job_event(msg.data)
        except (ValidationError, ValueError) as exc:
            metrics.EVENTS.labels("malformed").inc()
            sequence = msg.metadata.sequence.stream
            try:
                await self._deadletters.publish(
                    payload=msg.data,
                    event_id=f"seq-{sequence}",
                    channel="-",
                    reason="malformed",
                    detail=str(exc)[:400],
                )
            except Exception as publish_error:
                log.warning("cannot dead-letter a malformed event yet", extra={"error": repr(publish_error)})
                await msg.nak(delay=RETRY_DELAY_SECONDS)
                return None
            metrics.DEADLETTERS.labels("malformed").inc()
            await msg.ack()
            return None

    async def _route(self, msg: Msg, event: JobStatusEvent) -> None:
        ruleset = self._ruleset()
        labels = self._cluster_labels(event.job.cluster_id)
        deliveries = route(event, cluster_labels=labels, ruleset=ruleset) if ruleset else []
        if not deliveries:
            metrics.EVENTS.labels("unmatched").inc()
            await msg.ack()
            return
        metrics.EVENTS.labels("routed").inc()
        pending = PendingMessage(msg, len(deliveries), self._done)
        self.pending.add(pending)
        metrics.PENDING.set(len(self.pending))
        if len(self.pending) >= self._max_in_flight:
            self._room.clear()
        for delivery in deliveries:
            if not self._workers.submit(Item(event, msg.data, delivery, pending)):
                await pending.settle(delivery.channel, retry=True)

    async def keep_alive(self, interval: float) -> None:
        """Tell JetStream that held messages (in a digest, in back-off) are still being worked on."""
        while True:
            await asyncio.sleep(interval)
            for pending in list(self.pending):
                with contextlib.suppress(Exception):
                    await pending.msg.in_progress()

    async def put_back(self) -> None:
        """At shutdown: nak what is still held so another replica takes it at once."""
        for pending in list(self.pending):
            with contextlib.suppress(Exception):
                await pending.msg.nak()
        self.pending.clear()
