"""The durable JetStream consumer shared by the replicas: fetch, order, route, hand over, ack.

An event is acked only when every channel it was routed to has settled it: sent, found already
sent, or dead-lettered. Anything else (a reload race, a live sender's marker found, shutdown)
naks it for later. While Redis is away nothing is routed: the fetched events are held (and kept
alive) until it answers again, in the order they came.

A job's events are routed in sequence order across replicas and restarts (see ``order.py``):
an event waits while an older event of its job is still held, here or by another notifier.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TypeVar

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from pydantic import ValidationError
from redis.exceptions import RedisError

from trainwatch_common import JobStatusEvent, parse_job_event
from trainwatch_common.streams import NOTIFIER_CONSUMER
from trainwatch_notifier import metrics
from trainwatch_notifier.deadletter import DeadLetters
from trainwatch_notifier.dispatch import Item
from trainwatch_notifier.order import JobKey, JobOrder, job_key
from trainwatch_notifier.rules import route
from trainwatch_notifier.ruleset import Ruleset
from trainwatch_notifier.workers import ChannelWorkers

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_DELAY_SECONDS = 5.0
ORDER_POLL_SECONDS = 0.5  # how often a held-back event looks again when its elder is held elsewhere
# How long an elder that nobody holds (neither settled nor registered in the job order) may take
# to come: one on its way to a replica arrives within milliseconds, but one JetStream delivered
# to a notifier that died before registering it comes back only after the consumer's ack wait.
ORDER_GRACE_MARGIN_SECONDS = 5.0
REDIS_RETRY_SECONDS = 1.0


class PendingMessage:
    """One fetched message: held back for its job's order, then waiting for its deliveries."""

    def __init__(
        self,
        msg: Msg,
        event: JobStatusEvent,
        on_done: Callable[[PendingMessage, bool], Awaitable[None]],
    ) -> None:
        self.msg = msg
        self.event = event
        self._remaining = 0
        self._settled: set[str] = set()
        self._retry = False
        self._on_done = on_done

    def expect(self, deliveries: int) -> None:
        self._remaining = deliveries

    async def settle(self, channel: str, *, retry: bool) -> None:
        if channel in self._settled:  # a worker's catch-all may repeat an outcome already given
            return
        self._settled.add(channel)
        self._remaining -= 1
        self._retry = self._retry or retry
        if self._remaining > 0:
            return
        await self._on_done(self, self._retry)


class JobConsumer:
    def __init__(
        self,
        js: JetStreamContext,
        *,
        order: JobOrder,
        workers: ChannelWorkers,
        ruleset: Callable[[], Ruleset | None],
        cluster_labels: Callable[[str], dict[str, str]],
        deadletters: DeadLetters,
        silenced: Callable[[JobStatusEvent, bytes, list[str]], Awaitable[str | None]] | None = None,
        fetch_batch: int = 100,
        max_in_flight: int = 1000,
        ack_wait_seconds: float = 60.0,
        in_flight_full: asyncio.Event | None = None,
    ) -> None:
        self._js = js
        self._order = order
        self._workers = workers
        self._ruleset = ruleset
        self._cluster_labels = cluster_labels
        self._deadletters = deadletters
        self._silenced = silenced
        self._fetch_batch = fetch_batch
        self._grace = ack_wait_seconds + ORDER_GRACE_MARGIN_SECONDS
        self._max_in_flight = max_in_flight
        self.pending: set[PendingMessage] = set()
        self._room = asyncio.Event()
        self._room.set()
        # The inverse of ``_room``, for the channel workers: digests go out when it is set.
        self._full = in_flight_full or asyncio.Event()
        self._held_back: set[asyncio.Task[None]] = set()  # events waiting for an elder of their job
        # The sequences of each job's events this process holds (fetched, not yet acked or put
        # back): the job order in Redis says the same, unless Redis lost its data meanwhile.
        self._here: dict[JobKey, Counter[int]] = {}
        self._news: dict[JobKey, asyncio.Event] = {}  # set when one of the job's events is settled
        self._to_acknowledge: asyncio.Queue[tuple[PendingMessage, bool]] = asyncio.Queue()

    def _hold(self, pending: PendingMessage) -> None:
        self.pending.add(pending)
        self._here.setdefault(job_key(pending.event), Counter())[pending.event.sequence] += 1
        metrics.PENDING.set(len(self.pending))
        if len(self.pending) >= self._max_in_flight:
            self._room.clear()
            self._full.set()

    def _release(self, pending: PendingMessage) -> None:
        if pending in self.pending:
            key = job_key(pending.event)
            here = self._here[key]
            here[pending.event.sequence] -= 1
            if here[pending.event.sequence] <= 0:
                del here[pending.event.sequence]
            if not here:
                del self._here[key]
        self.pending.discard(pending)
        metrics.PENDING.set(len(self.pending))
        if len(self.pending) < self._max_in_flight:
            self._room.set()
            self._full.clear()
        news = self._news.pop(job_key(pending.event), None)
        if news is not None:
            news.set()

    def _older_here(self, event: JobStatusEvent) -> bool:
        """An older event of the job is held by this process: it goes first, whatever Redis says
        (a FLUSHALL or a fresh data dir loses the job order while events are under way)."""
        return any(sequence < event.sequence for sequence in self._here.get(job_key(event), ()))

    async def _settled(self, pending: PendingMessage, retry: bool) -> None:
        """All its channels are done with it: hand it to ``acknowledge`` (a channel's sender goes
        on with its next message instead of waiting for Redis and NATS)."""
        self._to_acknowledge.put_nowait((pending, retry))

    async def acknowledge(self) -> None:
        """The one task that acks: settled events are recorded in their jobs' order (one Redis call
        for all that are waiting) and then acked, or naked for a later retry."""
        while True:
            batch = [await self._to_acknowledge.get()]
            while not self._to_acknowledge.empty():
                batch.append(self._to_acknowledge.get_nowait())
            done = [pending.event for pending, retry in batch if not retry]
            # Before the acks: newer events of these jobs must not wait for events that are done.
            await self._until_redis_answers(functools.partial(self._order.finish, done), "finish events")
            for pending, retry in batch:
                await self._answer(pending, retry=retry)

    async def _answer(self, pending: PendingMessage, *, retry: bool) -> None:
        self._release(pending)
        try:
            if retry:
                await pending.msg.nak(delay=RETRY_DELAY_SECONDS)
            else:
                await pending.msg.ack()
        except Exception as exc:  # connection gone: JetStream redelivers it; the keys make that safe
            log.warning("cannot ack or nak", extra={"error": repr(exc)})

    async def _until_redis_answers(self, operation: Callable[[], Awaitable[T]], what: str) -> T:
        """Back-pressure, not loss: nothing is routed or acked without Redis, so wait for it."""
        while True:
            try:
                return await operation()
            except RedisError as exc:
                log.warning("redis unavailable, waiting", extra={"action": what, "error": repr(exc)})
                await asyncio.sleep(REDIS_RETRY_SECONDS)

    async def run(self) -> None:
        durable = NOTIFIER_CONSUMER.config.durable_name
        assert durable
        subscription = await self._js.pull_subscribe_bind(durable, stream=NOTIFIER_CONSUMER.stream)
        this = asyncio.current_task()
        try:
            while True:
                # nats-py's fetch waits with asyncio.wait_for, which on Python 3.11 swallows a
                # cancellation arriving as a message does: the fetch returns, the task is still
                # marked cancelling, and the loop fetched on until SIGTERM's grace ran out.
                if this is not None and this.cancelling():
                    raise asyncio.CancelledError
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
        """Take a fetched batch's places in their jobs' order, then route what may go now.

        No event is dropped for its epoch: fencing stops a stale watcher from publishing, but a
        copy it did publish may be the only one (the new owner's has the same event id and
        JetStream drops it as a duplicate). Copies are told apart by event id, not by epoch.
        """
        held: list[PendingMessage] = []
        for msg in messages:
            event = await self._parse(msg)
            if event is not None:
                pending = PendingMessage(msg, event, self._settled)
                self._hold(pending)  # kept alive from now on, even while Redis is away
                held.append(pending)
        if not held:
            return
        places = await self._until_redis_answers(
            lambda: self._order.take_places([pending.event for pending in held]), "order events"
        )
        for pending, place in zip(held, places, strict=True):
            if place.ready(waited_seconds=0.0, grace_seconds=self._grace) and not self._older_here(
                pending.event
            ):
                await self._route(pending, late=place.late)
            else:
                task = asyncio.create_task(
                    self._route_in_order(pending), name=f"notifier-order {pending.event.event_id}"
                )
                self._held_back.add(task)
                task.add_done_callback(self._held_back.discard)

    async def _route_in_order(self, pending: PendingMessage) -> None:
        """Hold an event back until no older event of its job is held anywhere, then route it."""
        metrics.ORDER_WAITS.inc()
        loop = asyncio.get_running_loop()
        started = loop.time()
        key = job_key(pending.event)
        while True:
            # An elder held here goes first, whatever Redis says: wait for its news without asking
            # Redis. Hundreds of held-back events each asking on a timer queued on the connection
            # pool and starved the sends and acks (chaos, after the notifier's SIGSTOP).
            elder_settled_here = False
            while self._older_here(pending.event):
                await self._news.setdefault(key, asyncio.Event()).wait()
                elder_settled_here = True
            if not elder_settled_here:
                news = self._news.setdefault(key, asyncio.Event())
                with contextlib.suppress(TimeoutError):  # an elder held elsewhere is looked at again
                    async with asyncio.timeout(ORDER_POLL_SECONDS):
                        await news.wait()
            [place] = await self._until_redis_answers(
                lambda: self._order.take_places([pending.event]), "order an event"
            )
            if place.ready(
                waited_seconds=loop.time() - started, grace_seconds=self._grace
            ) and not self._older_here(pending.event):
                break
        try:
            await self._route(pending, late=place.late)
        except Exception:  # a task boundary: the event must not be lost, let it come back
            log.exception("routing a held-back event failed", extra={"event_id": pending.event.event_id})
            await self._settled(pending, retry=True)

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

    async def _route(self, pending: PendingMessage, *, late: bool) -> None:
        event = pending.event
        if late:  # a newer event of this job was settled first: still told, never dropped
            metrics.EVENTS_OUT_OF_ORDER.inc()
            log.info("an event arrived after a newer one of its job", extra={"event_id": event.event_id})
        ruleset = self._ruleset()
        labels = self._cluster_labels(event.job.cluster_id)
        deliveries = route(event, cluster_labels=labels, ruleset=ruleset) if ruleset else []
        if not deliveries:
            metrics.EVENTS.labels("unmatched").inc()
            await self._settled(pending, retry=False)
            return
        if self._silenced is not None:
            # The silence hook (issue 18): a silenced event's suppression is recorded (durably,
            # before the ack) instead of handing it to any channel.
            silence = await self._silenced(event, pending.msg.data, [d.channel for d in deliveries])
            if silence is not None:
                metrics.EVENTS.labels("silenced").inc()
                log.info("event silenced", extra={"event_id": event.event_id, "silence": silence})
                await self._settled(pending, retry=False)
                return
        metrics.EVENTS.labels("routed").inc()
        pending.expect(len(deliveries))
        for delivery in deliveries:
            if not self._workers.submit(Item(event, pending.msg.data, delivery, pending)):
                await pending.settle(delivery.channel, retry=True)

    async def keep_alive(self, interval: float) -> None:
        """Tell JetStream, and the other notifiers through the job order, that held messages (held
        back for order, in a digest, in back-off) are still being worked on."""
        while True:
            await asyncio.sleep(interval)
            held = list(self.pending)
            for pending in held:
                with contextlib.suppress(Exception):
                    await pending.msg.in_progress()
            with contextlib.suppress(RedisError):
                await self._order.refresh([pending.event for pending in held])

    async def put_back(self) -> None:
        """At shutdown: ack what is settled (if Redis answers at once), nak the rest so another
        replica takes it at once."""
        await self.close()
        settled: list[PendingMessage] = []
        while not self._to_acknowledge.empty():
            pending, retry = self._to_acknowledge.get_nowait()
            if not retry:
                settled.append(pending)
        with contextlib.suppress(RedisError):  # else they are naked too: their copies find "sent"
            await self._order.finish([pending.event for pending in settled])
            for pending in settled:
                await self._answer(pending, retry=False)
        for pending in list(self.pending):
            with contextlib.suppress(Exception):
                await pending.msg.nak()
        self.pending.clear()
        self._here.clear()

    async def close(self) -> None:
        """Stop the held-back events' tasks (their messages stay unacked: JetStream redelivers)."""
        tasks = list(self._held_back)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
