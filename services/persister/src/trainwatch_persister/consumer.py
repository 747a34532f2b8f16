"""The durable JetStream consumer: fetch a batch, write it in one transaction, then ack.

Every replica binds to the same durable pull consumer (PERSISTER_CONSUMER), so JetStream
shares the messages among them. The rules:

- A message is acked only after its effect is committed (or, for a poison message, after it
  is safely in the dead-letter stream). A crash at any point means redelivery, never loss, and
  redelivery is harmless because every write is idempotent.
- When the database is down, the batch is kept and retried with exponential back-off; the
  messages are marked in-progress so JetStream does not hand them to another replica meanwhile.
  Nothing is fetched until the batch is written.
- A message that fails validation goes to DEADLETTER (``deadletter.v1.persister.<reason>``) with
  the reason and its original subject in headers, and is acked: it never blocks the batch.
  So does an event the database refuses as such (a constraint or data error), found by
  writing the failed batch event by event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

import nats.errors
import sqlalchemy as sa
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_common import deadletter_subject
from trainwatch_common.streams import PERSISTER_CONSUMER
from trainwatch_persister import batching, metrics, repository
from trainwatch_persister.settings import PersisterSettings

log = logging.getLogger(__name__)

SERVICE = "persister"
REASON_HEADER = "Trainwatch-Reason"
ERROR_HEADER = "Trainwatch-Error"
SUBJECT_HEADER = "Trainwatch-Original-Subject"
SEQUENCE_HEADER = "Trainwatch-Original-Sequence"
# How long a fetch for the rest of a batch lingers when nothing is ready (see _take_waiting).
_TAKE_TIMEOUT = 0.02


class RowsRejected(Exception):
    """The database refused the data itself (a constraint or data error), not the connection:
    retrying cannot help, so the failing event is isolated and dead-lettered."""


def _is_rejection(exc: BaseException) -> bool:
    if isinstance(exc, sa.exc.IntegrityError | sa.exc.DataError):
        return True
    # asyncpg data exceptions reach us as plain DBAPIError; their SQLSTATE class says what they are.
    sqlstate = getattr(getattr(exc, "orig", None), "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate[:2] in ("22", "23")  # data exception, integrity


class Backoff:
    """Exponential back-off: initial, 2x, 4x... capped at ``maximum``."""

    def __init__(self, *, initial: float, maximum: float) -> None:
        self._initial = initial
        self._maximum = maximum
        self._next = initial

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self._maximum)
        return delay

    def reset(self) -> None:
        self._next = self._initial


class JobEventConsumer:
    def __init__(self, *, js: JetStreamContext, engine: AsyncEngine, settings: PersisterSettings) -> None:
        self._js = js
        self._engine = engine
        self._settings = settings
        self.database_ok = True
        self.batches_written = 0

    def _backoff(self) -> Backoff:
        return Backoff(initial=self._settings.retry_initial_seconds, maximum=self._settings.retry_max_seconds)

    async def run(self) -> None:
        """Fetch and write batches until cancelled."""
        durable = PERSISTER_CONSUMER.config.durable_name
        subscription = await self._js.pull_subscribe_bind(durable=durable, stream=PERSISTER_CONSUMER.stream)
        backoff = self._backoff()
        try:
            while True:
                try:
                    # When coalescing, the wait is for the first message only (see _top_up).
                    first = 1 if self._settings.batch_coalesce_ms else self._settings.batch_size
                    messages = await subscription.fetch(
                        batch=first, timeout=self._settings.batch_max_wait_ms / 1000
                    )
                except (nats.errors.TimeoutError, TimeoutError):
                    continue  # nothing arrived within the wait: fetch again
                except Exception as exc:  # task boundary: NATS trouble is logged, counted, retried
                    metrics.CONSUMER_ERRORS.inc()
                    log.warning("fetch failed; retrying", extra={"error": repr(exc)})
                    await asyncio.sleep(backoff.next_delay())
                    continue
                backoff.reset()
                messages = await self._top_up(subscription, messages)
                try:
                    await self.handle(messages)
                except Exception as exc:  # e.g. NATS gone while dead-lettering or acking: redelivery follows
                    metrics.CONSUMER_ERRORS.inc()
                    log.warning(
                        "batch not settled; its messages will be redelivered", extra={"error": repr(exc)}
                    )
                    await asyncio.sleep(backoff.next_delay())
        finally:
            try:
                await subscription.unsubscribe()
            except Exception as exc:  # the connection may already be closed at shutdown
                log.debug("unsubscribe failed", extra={"error": repr(exc)})

    async def _top_up(
        self, subscription: JetStreamContext.PullSubscription, messages: list[Msg]
    ) -> list[Msg]:
        """After the first message, take what is waiting; if that does not fill the batch, wait
        ``batch_coalesce_ms`` and take what came meanwhile, so that one transaction holds them.

        Events arrive a few at a time (each watch delivers its own): written as they come, every
        few events would pay for a transaction, two statements and their round trips (issue 21:
        1.2 ms of CPU per event). The wait is a plain sleep with no pull request outstanding: the
        server then hands over what accumulated in one burst, where a pending pull has it push
        every message on its own (a wake-up, a read and a parse each). A backlog fills the batch
        at the first take and never waits. Nothing is acked before the whole batch is committed,
        and the messages stay in delivery order, so this changes neither exactly-once nor ordering.
        """
        messages = [*messages, *await self._take_waiting(subscription, len(messages))]
        wait = self._settings.batch_coalesce_ms / 1000
        if len(messages) >= self._settings.batch_size or wait <= 0:
            return messages
        await asyncio.sleep(wait)
        return [*messages, *await self._take_waiting(subscription, len(messages))]

    async def _take_waiting(self, subscription: JetStreamContext.PullSubscription, held: int) -> list[Msg]:
        """The messages the consumer has ready, up to the batch's room (nats-py asks with no_wait
        first, so this returns as soon as they are here; it lingers only when none is)."""
        room = self._settings.batch_size - held
        if room <= 0:
            return []
        try:
            return await subscription.fetch(batch=room, timeout=_TAKE_TIMEOUT)
        except (nats.errors.TimeoutError, TimeoutError):
            return []  # none ready: write what we hold
        except Exception as exc:  # NATS trouble: what we hold is written; the rest comes later
            log.debug("fetch for the rest of a batch failed", extra={"error": repr(exc)})
            return []

    async def handle(self, messages: Sequence[Msg]) -> None:
        """Write one fetched batch and ack it; returns only when every message is settled."""
        started = time.perf_counter()
        metrics.EVENTS_RECEIVED.inc(len(messages))
        metrics.BATCH_SIZE.observe(len(messages))
        decoded = batching.decode((message, message.data) for message in messages)
        for rejected in decoded.rejected:
            await self._deadletter(rejected)
        if decoded.received:
            written = await self._write(decoded.received)
            for received in written:
                await received.message.ack()
        self.batches_written += 1
        metrics.BATCH_SECONDS.observe(time.perf_counter() - started)

    async def _write(self, received: list[batching.Received[Msg]]) -> list[batching.Received[Msg]]:
        """Write the batch, retrying while the database is unavailable; returns what was written.

        Events the database refuses are found by writing the batch event by event, and dead-lettered.
        """
        try:
            await self._write_with_retry(received)
            return received
        except RowsRejected as exc:
            log.warning("database refused a batch; writing its events one by one", extra={"error": repr(exc)})
        written = []
        for item in received:
            try:
                await self._write_with_retry([item])
                written.append(item)
            except RowsRejected as row_exc:
                error = " ".join(str(row_exc).split())[:500]
                await self._deadletter(batching.Rejected(item.message, batching.REASON_DB_REJECTED, error))
        return written

    async def _write_with_retry(self, received: list[batching.Received[Msg]]) -> None:
        events = [item.event for item in received]
        backoff = self._backoff()
        while True:
            try:
                async with self._engine.begin() as conn:
                    result = await repository.write_events(conn, events)
            except Exception as exc:  # connection refused, server gone, timeout...: wait and retry
                if _is_rejection(exc):
                    raise RowsRejected(str(getattr(exc, "orig", exc))) from exc
                metrics.DATABASE_ERRORS.inc()
                metrics.DATABASE_UP.set(0)
                if self.database_ok:
                    log.warning("database write failed; retrying with back-off", extra={"error": repr(exc)})
                self.database_ok = False
                await self._keep_in_progress(received)
                await asyncio.sleep(backoff.next_delay())
                continue
            if not self.database_ok:
                log.info("database writes resumed")
            self.database_ok = True
            metrics.DATABASE_UP.set(1)
            metrics.TRANSITIONS_INSERTED.inc(result.new_transitions)
            metrics.DUPLICATES.inc(result.distinct_events - result.new_transitions)
            metrics.JOBS_CHANGED.inc(result.jobs_changed)
            return

    async def _keep_in_progress(self, received: list[batching.Received[Msg]]) -> None:
        """Tell JetStream we still hold these messages, so it does not redeliver them elsewhere."""
        for item in received:
            try:
                await item.message.in_progress()
            except Exception as exc:  # NATS unreachable too: redelivery later is harmless
                log.debug("in-progress signal failed", extra={"error": repr(exc)})
                return

    async def _deadletter(self, rejected: batching.Rejected[Msg]) -> None:
        message = rejected.message
        stream_sequence = message.metadata.sequence.stream if message.metadata.sequence else 0
        headers = {
            REASON_HEADER: rejected.reason,
            ERROR_HEADER: rejected.error,
            SUBJECT_HEADER: message.subject,
            SEQUENCE_HEADER: str(stream_sequence),
            # A redelivered poison message is dead-lettered once.
            "Nats-Msg-Id": f"{SERVICE}.{message.metadata.stream}.{stream_sequence}",
        }
        await self._js.publish(deadletter_subject(SERVICE, rejected.reason), message.data, headers=headers)
        await message.ack()
        metrics.DEADLETTERED.labels(reason=rejected.reason).inc()
        log.warning(
            "dead-lettered a message",
            extra={"reason": rejected.reason, "subject": message.subject, "error": rejected.error},
        )
