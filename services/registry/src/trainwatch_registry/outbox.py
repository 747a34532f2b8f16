"""The outbox relay: publishes committed cluster events to JetStream, in commit order.

A change and its event are committed together (``registrations.py``); this task then
1. reads the oldest unsent outbox rows,
2. publishes each to the CLUSTERS stream with ``Nats-Msg-Id`` = its event id and waits for the ack,
3. mirrors the new desired state into the ``trainwatch_clusters`` KV bucket (put, or delete on removal),
4. marks the row sent.
A crash anywhere leaves the row unsent, so it is published again after restart; JetStream drops
the duplicate by its message id, and the KV write is idempotent. Nothing is lost, nothing doubles.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime, timedelta

from nats.js.errors import NoKeysError
from prometheus_client import Counter, Gauge
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_registry import repository
from trainwatch_registry.bus import Bus, reraise_if_cancelling
from trainwatch_registry.registrations import spec_of
from trainwatch_registry.repository import OutboxRow

log = logging.getLogger(__name__)

EVENTS_PUBLISHED = Counter("trainwatch_registry_events_published_total", "Cluster events published", ["type"])
PUBLISH_FAILURES = Counter(
    "trainwatch_registry_publish_failures_total", "Outbox publish attempts that failed"
)
OUTBOX_BACKLOG = Gauge("trainwatch_registry_outbox_unsent", "Outbox rows not yet published")

BATCH = 100
KEEP_SENT = timedelta(days=7)  # sent rows are kept a while for audit, then pruned


class OutboxRelay:
    def __init__(self, *, engine: AsyncEngine, bus: Bus, poll_seconds: float = 1.0) -> None:
        self._engine = engine
        self._bus = bus
        self._poll_seconds = poll_seconds
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Called after each commit that wrote an outbox row."""
        self._wake.set()

    async def run(self) -> None:
        """Drain whenever woken (or every ``poll_seconds`` as a safety net) until cancelled."""
        failures = 0
        reconciled = False
        while True:
            self._wake.clear()
            reraise_if_cancelling()
            try:
                if self._bus.connected:
                    await self.drain()
                    if not reconciled:
                        await self.reconcile_bucket()
                        reconciled = True
                    failures = 0
            except Exception as exc:  # task boundary: NATS or SQL trouble; retry with back-off
                reraise_if_cancelling()
                failures += 1
                PUBLISH_FAILURES.inc()
                log.warning(
                    "outbox relay failed; will retry", extra={"error": repr(exc), "attempt": failures}
                )
            delay = self._poll_seconds if failures == 0 else min(self._poll_seconds * 2**failures, 10.0)
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
            # arrives as the event is set, and the relay would outlive its shutdown.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()

    async def drain(self) -> int:
        """Publish every unsent row in order; returns how many were sent."""
        sent = 0
        async with self._relay_lock() as held:
            if not held:
                return 0  # another replica is draining
            while True:
                async with self._engine.connect() as conn:
                    batch = await repository.unsent_outbox(conn, limit=BATCH)
                if not batch:
                    break
                acked: list[int] = []
                try:
                    for row in batch:
                        await self._publish(row)  # returns after JetStream's ack
                        acked.append(row.id)
                finally:
                    # Only acked rows are marked; if the marking itself is lost, the rows are
                    # published again and JetStream drops the duplicates by Nats-Msg-Id.
                    if acked:
                        async with self._engine.begin() as conn:
                            await repository.mark_sent(conn, acked, at=datetime.now(UTC))
                        sent += len(acked)
            async with self._engine.begin() as conn:
                await repository.prune_sent(conn, before=datetime.now(UTC) - KEEP_SENT)
                OUTBOX_BACKLOG.set(await repository.count_unsent(conn))
        return sent

    async def reconcile_bucket(self) -> None:
        """Safety net, once per start: make the KV bucket hold exactly the live clusters (a bucket
        lost or purged on the NATS side is rebuilt). Runs in the relay's task, after a drain, so
        every later change still reaches the bucket after this snapshot."""
        kv = self._bus.kv
        if kv is None:
            return
        async with self._relay_lock() as held:
            if not held:
                return
            async with self._engine.connect() as conn:
                live = {row.id: spec_of(row) for row in await repository.all_live_clusters(conn)}
            try:
                present = set(await kv.keys())
            except NoKeysError:
                present = set()
            for cluster_id in sorted(present - live.keys()):
                await kv.delete(cluster_id)
            repaired = 0
            for cluster_id, spec in live.items():
                value = spec.model_dump_json().encode()
                if cluster_id not in present or (await kv.get(cluster_id)).value != value:
                    await kv.put(cluster_id, value)
                    repaired += 1
            if repaired or present - live.keys():
                log.warning(
                    "repaired the clusters KV bucket",
                    extra={"put": repaired, "deleted": len(present - live.keys())},
                )

    async def _publish(self, row: OutboxRow) -> None:
        js, kv = self._bus.js, self._bus.kv
        if js is None or kv is None:
            raise ConnectionError("NATS is not connected")
        ack = await js.publish(row.subject, row.payload, headers={"Nats-Msg-Id": row.msg_id}, timeout=5)
        if row.kv_value is None:
            await kv.delete(row.cluster_id)
        else:
            await kv.put(row.cluster_id, row.kv_value)
        EVENTS_PUBLISHED.labels(row.event_type).inc()
        log.info(
            "published cluster event",
            extra={
                "cluster_id": row.cluster_id,
                "revision": row.revision,
                "type": row.event_type,
                "stream_seq": ack.seq,
                "duplicate": bool(ack.duplicate),
            },
        )

    @contextlib.asynccontextmanager
    async def _relay_lock(self):  # type: ignore[no-untyped-def]
        """On PostgreSQL a session advisory lock makes one replica the drainer at a time, so
        events keep their order; SQLite is single-writer and needs none."""
        if self._engine.dialect.name != "postgresql":
            yield True
            return
        async with self._engine.connect() as conn:
            held = bool(
                (await conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": _LOCK_KEY})).scalar()
            )
            await conn.commit()
            try:
                yield held
            finally:
                if held:
                    await conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _LOCK_KEY})
                    await conn.commit()


_LOCK_KEY = 0x7472_6177_6F78  # any constant shared by every replica
