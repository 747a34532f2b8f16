"""What the JOBS stream already holds: the last event of each job, and one stored event.

Three questions an informer asks of the stream, the record of everything emitted:

- at start, the sequence of its scope's last event: when the checkpoint's mark equals it, the
  checkpoint already holds everything the stream does (one request instead of a read);
- otherwise, the last event of every job of its (cluster, kind, scope), to set its checkpoint
  right (``recovery.recover``). One ephemeral pull consumer with ``DeliverPolicy.LAST_PER_SUBJECT``
  reads one message per job subject: O(jobs), like the relist it may lead to;
- after a publish that JetStream acknowledged as a duplicate, the event that holds the id
  (the acknowledgement names its stream sequence), to tell a harmless resend of the same
  event from a different event that took the id first.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy
from nats.js.errors import NotFoundError
from pydantic import ValidationError

from trainwatch_common.events.diagnosis import Diagnosis
from trainwatch_common.events.jobs import Phase, SubPhase
from trainwatch_common.streams import JOBS_STREAM
from trainwatch_common.subjects import job_filter
from trainwatch_watcher.kinds.model import NormalizedStatus
from trainwatch_watcher.records import JobRecord, checkpointed
from trainwatch_watcher.recovery import StreamHead
from trainwatch_watcher.transitions import Slot

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """The identifying part of an event the stream holds."""

    event_id: str
    uid: str
    change: str
    sequence: int
    head: StreamHead


class StreamHistory:
    def __init__(
        self, nc: NatsClient, *, stream: str = JOBS_STREAM.name or "JOBS", read_timeout: float = 60.0
    ) -> None:
        self._js = nc.jetstream()
        self._stream = stream
        self._read_timeout = read_timeout

    async def last_events(
        self, cluster_id: str, kind_key: str, namespace: str | None
    ) -> dict[str, StreamHead]:
        """uid -> the last event of its job subject, for every job subject of this scope.

        A subject names a job by namespace and name, so a name reused by a new uid shows only the
        newest uid's events; the older uid is then closed already or the relist closes it.
        """
        subject = job_filter(cluster_id=cluster_id, namespace=namespace, kind_key=kind_key)
        heads: dict[str, StreamHead] = {}
        done = asyncio.Event()

        async def on_message(message: Msg) -> None:
            stored = parse_stored(message.data)
            if stored is not None:
                heads[stored.uid] = stored.head
            if message.metadata.num_pending == 0:
                done.set()

        # A push consumer with a callback: nats-py's pull fetch costs a task per message, which
        # measured at 12x the cost of the callback path for a few thousand jobs.
        subscription = await self._js.subscribe(
            subject,
            stream=self._stream,
            cb=on_message,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            inactive_threshold=60.0,  # removed by the server if we die before unsubscribing
        )
        try:
            info = await subscription.consumer_info()
            if (info.num_pending or 0) + (info.delivered.stream_seq if info.delivered else 0) == 0:
                return heads  # nothing of this scope in the stream
            async with asyncio.timeout(self._read_timeout):
                await done.wait()
        finally:
            try:
                await subscription.unsubscribe()
            except Exception as exc:  # tidying only: the server expires it anyway
                log.debug("could not remove a history consumer", extra={"error": repr(exc)})
        return heads

    async def last_sequence(self, cluster_id: str, kind_key: str, namespace: str | None) -> int:
        """The stream sequence of the scope's last event; 0 when the stream holds none."""
        subject = job_filter(cluster_id=cluster_id, namespace=namespace, kind_key=kind_key)
        try:
            message = await self._js.get_last_msg(self._stream, subject)
        except NotFoundError:
            return 0
        return int(message.seq or 0)

    async def stored_event(self, stream_sequence: int) -> StoredEvent | None:
        try:
            message = await self._js.get_msg(self._stream, seq=stream_sequence)
        except NotFoundError:
            return None  # aged out or purged: nothing left to compare with
        return parse_stored(message.data or b"")


def parse_stored(raw: bytes) -> StoredEvent | None:
    """The identifying part of a stored CloudEvent; None for what no watcher wrote."""
    try:
        data: dict[str, Any] = orjson.loads(raw)["data"]
        job = data["job"]
        sequence = int(data["sequence"])
        change = str(data["change"])
        slot = Slot(
            namespace=str(job["namespace"]),
            name=str(job["name"]),
            sequence=sequence,
            phase=Phase(data["phase"]),
            sub_phase=SubPhase(data["sub_phase"]) if data.get("sub_phase") else None,
            terminal=bool(data.get("terminal", False)),
        )
        restart_count = int(data.get("restart_count") or 0)
        last = NormalizedStatus(
            phase=slot.phase,
            sub_phase=slot.sub_phase,
            terminal=slot.terminal,
            reason=data.get("reason"),
            source=data.get("source"),
            restart_count=restart_count,
            # The raw counter is not published; every kind that infers restarts from one reports
            # it as its restart count, so this is the counter as of that event.
            restart_counter=restart_count,
            queue=data.get("queue"),
        )
        record = None
        if change != "deleted":
            record = JobRecord(
                slot=slot,
                last=last,
                diagnosis=checkpointed(Diagnosis.model_validate(data["diagnosis"]))
                if data.get("diagnosis")
                else None,
                first_running_at=_first_running_at(data),
            )
        return StoredEvent(
            event_id=str(data["event_id"]),
            uid=str(job["uid"]),
            change=change,
            sequence=sequence,
            head=StreamHead(sequence=sequence, record=record, resource_version=job.get("resource_version")),
        )
    except (KeyError, TypeError, ValueError, orjson.JSONDecodeError, ValidationError):
        log.warning("unreadable event in the JOBS stream skipped")
        return None


def _first_running_at(data: dict[str, Any]) -> datetime | None:
    """When the job first ran, as its event tells it: created + queue wait, once it has run."""
    created, wait = data.get("created_at"), data.get("queue_wait_seconds")
    if data.get("run_seconds") is None or not isinstance(created, str) or not isinstance(wait, int | float):
        return None
    return datetime.fromisoformat(created) + timedelta(seconds=wait)
