"""Live updates: JetStream → an in-process fan-out → one SSE stream per browser.

One ephemeral ordered consumer on JOBS (``jobs.v1.>``, new messages only) and one on
CLUSTER_HEALTH (the last report per cluster, then new ones) feed a ``Broker``. Each browser
gets a ``Subscriber`` with a bounded queue. Publishing never waits: a browser whose queue is
full is dropped (its stream ends, EventSource reconnects and the page reloads what it shows),
so one slow client can never hold back the others or the NATS subscription.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy
from pydantic import ValidationError

from trainwatch_common import ClusterHealth, JobStatusEvent, parse_cluster_health, parse_job_event
from trainwatch_common.streams import CLUSTER_HEALTH_STREAM, JOBS_STREAM
from trainwatch_common.subjects import CLUSTERS_PREFIX, JOBS_PREFIX

log = logging.getLogger(__name__)

Payload = dict[str, Any]
_WAKE: Payload = {}  # queued to wake a stream that has been ended; never sent


def job_payload(event: JobStatusEvent) -> Payload:
    """What a browser needs to update a row or a timeline: small, no labels beyond the selected ones."""
    job = event.job
    return {
        "cluster_id": job.cluster_id,
        "namespace": job.namespace,
        "kind": job.kind,
        "kind_key": job.kind_key,
        "name": job.name,
        "uid": job.uid,
        "change": event.change,
        "sequence": event.sequence,
        "phase": event.phase.value,
        "sub_phase": event.sub_phase.value if event.sub_phase else None,
        "previous_phase": event.previous_phase.value if event.previous_phase else None,
        "terminal": event.terminal,
        "reason": event.reason,
        "message": event.message,
        "owner": event.owner,
        "labels": dict(event.labels),
        "restart_count": event.restart_count,
        "replicas": {role: counts.model_dump() for role, counts in event.replicas.items()},
        "observed_at": event.observed_at.isoformat(),
        # The job's current diagnosis category (its highest-sequence event's): what a jobs list
        # filtered by category needs to insert a new job or mark one that no longer belongs.
        "diagnosis_category": event.diagnosis.category.value if event.diagnosis is not None else None,
    }


def health_payload(health: ClusterHealth) -> Payload:
    return health.model_dump(mode="json")


@dataclass(frozen=True, slots=True)
class JobFilter:
    """The subset of the jobs list's filters that can be checked on one event."""

    cluster: str | None = None
    namespace: str | None = None
    kind: str | None = None
    phase: str | None = None
    owner: str | None = None
    name: str | None = None
    uid: str | None = None
    label: str | None = None  # key=value

    def matches(self, payload: Payload) -> bool:
        exact = (
            (self.cluster, "cluster_id"),
            (self.namespace, "namespace"),
            (self.kind, "kind_key"),
            (self.owner, "owner"),
            (self.uid, "uid"),
        )
        if any(want and payload.get(key) != want for want, key in exact):
            return False
        # A phase filter still lets through the event that moves a shown job out of the phase.
        if self.phase and self.phase not in (payload.get("phase"), payload.get("previous_phase")):
            return False
        if self.label:
            key, _, value = self.label.partition("=")
            if (payload.get("labels") or {}).get(key) != value:
                return False
        return not (self.name and self.name.lower() not in str(payload.get("name", "")).lower())


@dataclass(eq=False)
class Subscriber:
    topic: str
    accepts: Callable[[Payload], bool]
    queue: asyncio.Queue[Payload] = field(default_factory=asyncio.Queue)
    dropped: asyncio.Event = field(default_factory=asyncio.Event)


class Broker:
    """Topic fan-out with a bounded queue per subscriber; ``publish`` never blocks."""

    def __init__(self, *, queue_size: int) -> None:
        self._queue_size = queue_size
        self._subscribers: set[Subscriber] = set()
        self.dropped_total = 0

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def subscribe(self, topic: str, accepts: Callable[[Payload], bool] = lambda _: True) -> Subscriber:
        subscriber = Subscriber(topic, accepts, asyncio.Queue(maxsize=self._queue_size))
        self._subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.discard(subscriber)

    def _end(self, subscriber: Subscriber) -> None:
        self._subscribers.discard(subscriber)
        subscriber.dropped.set()
        # Wake a stream waiting on an empty queue; a full one wakes on its next item anyway.
        with contextlib.suppress(asyncio.QueueFull):
            subscriber.queue.put_nowait(_WAKE)

    def publish(self, topic: str, payload: Payload) -> None:
        for subscriber in list(self._subscribers):
            if subscriber.topic != topic or not subscriber.accepts(payload):
                continue
            try:
                subscriber.queue.put_nowait(payload)
            except asyncio.QueueFull:
                self._drop(subscriber)

    def close_all(self) -> None:
        """End every stream now (at shutdown): browsers reconnect to whichever instance serves next."""
        for subscriber in list(self._subscribers):
            self._end(subscriber)

    def _drop(self, subscriber: Subscriber) -> None:
        self._end(subscriber)
        self.dropped_total += 1
        log.info("dropped a slow live client", extra={"topic": subscriber.topic})


async def sse_stream(
    broker: Broker, subscriber: Subscriber, *, heartbeat: float, initial: list[Payload] | None = None
) -> AsyncIterator[bytes]:
    """Server-sent events for one subscriber until it disconnects or is dropped for being slow."""
    try:
        yield b"retry: 2000\n\n"
        for payload in initial or []:
            yield sse_message(subscriber.topic, payload)
        while not subscriber.dropped.is_set():
            try:
                async with asyncio.timeout(heartbeat):
                    payload = await subscriber.queue.get()
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            if payload is not _WAKE:
                yield sse_message(subscriber.topic, payload)
        yield b"event: dropped\ndata: {}\n\n"
    finally:
        broker.unsubscribe(subscriber)


def sse_message(event: str, payload: Payload) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


class LiveFeed:
    """Subscribes to JetStream and publishes to the broker; remembers each cluster's last health."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self.health: dict[str, ClusterHealth] = {}
        self.jobs_received = 0
        self.malformed = 0
        self._subscriptions: list[Any] = []

    async def start(self, nc: NatsClient) -> None:
        js = nc.jetstream()
        self._subscriptions.append(
            await js.subscribe(
                f"{JOBS_PREFIX}.>",
                stream=JOBS_STREAM.name,
                cb=self._on_job,
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.NEW,
                idle_heartbeat=5.0,
            )
        )
        self._subscriptions.append(
            await js.subscribe(
                f"{CLUSTERS_PREFIX}.health.*",
                stream=CLUSTER_HEALTH_STREAM.name,
                cb=self._on_health,
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
                idle_heartbeat=5.0,
            )
        )

    async def stop(self) -> None:
        for subscription in self._subscriptions:
            try:
                await subscription.unsubscribe()
            except Exception as exc:  # the connection may already be closed at shutdown
                log.debug("unsubscribe failed", extra={"error": repr(exc)})
        self._subscriptions.clear()

    async def _on_job(self, msg: Msg) -> None:
        try:
            event = parse_job_event(msg.data)
        except (ValidationError, ValueError):
            self.malformed += 1
            log.warning("skipped a malformed job event", extra={"subject": msg.subject})
            return
        self.jobs_received += 1
        self._broker.publish("job", job_payload(event))

    async def _on_health(self, msg: Msg) -> None:
        try:
            health = parse_cluster_health(msg.data)
        except (ValidationError, ValueError):
            self.malformed += 1
            log.warning("skipped a malformed health report", extra={"subject": msg.subject})
            return
        known = self.health.get(health.cluster_id)
        if known is None or health.observed_at >= known.observed_at:
            self.health[health.cluster_id] = health
        self._broker.publish("health", health_payload(health))

    def forget(self, cluster_id: str) -> None:
        self.health.pop(cluster_id, None)


def initial_health(feed: LiveFeed) -> list[Payload]:
    return [health_payload(h) for h in feed.health.values()]
