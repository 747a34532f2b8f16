"""Consumes the watchers' cluster-health reports (clusters.v1.health.*) into ``cluster_health``.

A durable pull consumer (REGISTRY_HEALTH_CONSUMER); messages are acked after the commit, so a
crash re-delivers rather than loses. NATS or the database being away is waited out (the
unacked reports come back). A single report that cannot be parsed, or that the database
refuses, is counted, logged and dropped, and the others are recorded: one bad message never
stops the consumer.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import nats.errors
from nats.aio.msg import Msg
from prometheus_client import Counter
from pydantic import ValidationError
from sqlalchemy import exc as sql_errors
from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_common import ClusterHealth, ensure_consumer, parse_cluster_health
from trainwatch_common.observability.database import database_unavailable
from trainwatch_common.streams import REGISTRY_HEALTH_CONSUMER
from trainwatch_registry import repository
from trainwatch_registry.bus import Bus, reraise_if_cancelling

log = logging.getLogger(__name__)

HEALTH_RECEIVED = Counter("trainwatch_registry_health_reports_total", "Health reports received", ["outcome"])

# Failures of the bus or the database itself, not of one report: retried, never blamed on a message.
UNAVAILABLE = (
    nats.errors.Error,
    OSError,
    TimeoutError,
    sql_errors.OperationalError,
    sql_errors.InterfaceError,
)


class HealthConsumer:
    def __init__(self, *, engine: AsyncEngine, bus: Bus, batch: int = 100) -> None:
        self._engine = engine
        self._bus = bus
        self._batch = batch

    async def run(self) -> None:
        while True:
            await self._bus.ready.wait()
            reraise_if_cancelling()
            try:
                await self._consume()
            except UNAVAILABLE as exc:
                reraise_if_cancelling()
                log.warning("health consumer interrupted; resubscribing", extra={"error": repr(exc)})
                await asyncio.sleep(1.0)  # back-off before resubscribing, not a synchronisation

    async def _consume(self) -> None:
        js = self._bus.js
        assert js is not None
        await ensure_consumer(js, REGISTRY_HEALTH_CONSUMER)
        durable = REGISTRY_HEALTH_CONSUMER.config.durable_name
        subscription = await js.pull_subscribe_bind(durable=durable, stream=REGISTRY_HEALTH_CONSUMER.stream)
        try:
            while True:
                reraise_if_cancelling()  # nats-py may have turned a cancellation into a timeout
                try:
                    messages = await subscription.fetch(self._batch, timeout=2)
                except TimeoutError:  # nats-py raises asyncio.TimeoutError or its subclass
                    continue
                await self.handle(messages)
        finally:
            await subscription.unsubscribe()

    async def handle(self, messages: list[Msg]) -> None:
        reports: list[tuple[Msg, ClusterHealth]] = []
        for message in messages:
            try:
                reports.append((message, parse_cluster_health(message.data)))
            except ValidationError as exc:
                HEALTH_RECEIVED.labels("malformed").inc()
                log.warning(
                    "dropping malformed health report",
                    extra={"subject": message.subject, "error": str(exc)[:300]},
                )
                await message.term()
        now = datetime.now(UTC)
        try:
            await self._record_when_reachable(reports, received_at=now)  # one transaction: the usual case
        except Exception as exc:
            if isinstance(exc, UNAVAILABLE):
                raise
            # One report in the batch is refused: record them one at a time, so only it is lost.
            for report in reports:
                await self._record_or_drop(report, received_at=now)

    async def _record_when_reachable(
        self, reports: list[tuple[Msg, ClusterHealth]], *, received_at: datetime
    ) -> None:
        """Record, waiting out a database that is away (a restart, a failover) with the messages
        held in progress: given up, they would come back only after the consumer's ack wait."""
        delay = 0.2
        while True:
            try:
                await self._record(reports, received_at=received_at)
                return
            except Exception as exc:
                if not database_unavailable(exc):
                    raise
                reraise_if_cancelling()
                log.warning(
                    "database unavailable; health reports held",
                    extra={"error": repr(exc)[:300], "retry_in": delay},
                )
            for message, _ in reports:
                await message.in_progress()  # NATS away too: the error ends this subscription
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _record(self, reports: list[tuple[Msg, ClusterHealth]], *, received_at: datetime) -> None:
        outcomes = []
        async with self._engine.begin() as conn:
            for _, report in reports:
                newer = await repository.record_health(conn, report, received_at=received_at)
                outcomes.append("recorded" if newer else "stale")
        for outcome in outcomes:
            HEALTH_RECEIVED.labels(outcome).inc()
        for message, _ in reports:
            await message.ack()

    async def _record_or_drop(self, report: tuple[Msg, ClusterHealth], *, received_at: datetime) -> None:
        message, health = report
        try:
            await self._record_when_reachable([report], received_at=received_at)
        except UNAVAILABLE:
            raise
        except Exception as exc:  # this report's fault: redelivering it would fail the same way
            HEALTH_RECEIVED.labels("failed").inc()
            log.error(
                "dropping a health report the database refused",
                extra={"cluster": health.cluster_id, "subject": message.subject, "error": repr(exc)[:300]},
                exc_info=exc,
            )
            await message.term()
