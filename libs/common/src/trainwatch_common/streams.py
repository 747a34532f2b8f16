"""Every JetStream stream, KV bucket and durable consumer Trainwatch uses, in one place.

Services call ``ensure_streams(js)`` at start-up: it creates what is missing and brings an
existing stream's configuration up to date, so any number of replicas may call it at once.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    KeyValueConfig,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BadRequestError, NotFoundError
from nats.js.kv import KeyValue
from pydantic import Field

from trainwatch_common.settings import ServiceSettings
from trainwatch_common.subjects import CLUSTERS_PREFIX, DEADLETTER_PREFIX, JOBS_PREFIX

log = logging.getLogger(__name__)

DAY = 24 * 3600.0

JOBS_STREAM = StreamConfig(
    name="JOBS",
    description="Normalized job-status events (CloudEvents JSON), one per real transition",
    subjects=[f"{JOBS_PREFIX}.>"],
    storage=StorageType.FILE,
    max_age=7 * DAY,
    # The Nats-Msg-Id window: a watcher that re-publishes after a crash does so within minutes.
    duplicate_window=15 * 60.0,
)

CLUSTERS_STREAM = StreamConfig(
    name="CLUSTERS",
    description="Cluster added / updated / removed events from the registry",
    subjects=[f"{CLUSTERS_PREFIX}.added.*", f"{CLUSTERS_PREFIX}.updated.*", f"{CLUSTERS_PREFIX}.removed.*"],
    storage=StorageType.FILE,
    max_age=30 * DAY,
    duplicate_window=15 * 60.0,
)

CLUSTER_HEALTH_STREAM = StreamConfig(
    name="CLUSTER_HEALTH",
    description="Per-cluster health reported by the owning watcher; only the latest few matter",
    subjects=[f"{CLUSTERS_PREFIX}.health.*"],
    storage=StorageType.FILE,
    max_msgs_per_subject=10,
    max_age=1 * DAY,
)

DEADLETTER_STREAM = StreamConfig(
    name="DEADLETTER",
    description="Messages a service gave up on, with the reason in the Trainwatch-Reason header",
    subjects=[f"{DEADLETTER_PREFIX}.>"],
    storage=StorageType.FILE,
    max_age=30 * DAY,
)

ALL_STREAMS: tuple[StreamConfig, ...] = (
    JOBS_STREAM,
    CLUSTERS_STREAM,
    CLUSTER_HEALTH_STREAM,
    DEADLETTER_STREAM,
)

# The desired set of clusters (key: cluster id, value: ClusterSpec JSON), for late joiners.
CLUSTERS_BUCKET = KeyValueConfig(
    bucket="trainwatch_clusters",
    description="Desired clusters as ClusterSpec JSON, kept by the registry",
    history=1,
    storage=StorageType.FILE,
)

# The notifier's delivery markers (key: ``<channel>.<event id>``, value: held / sending / sent /
# dead), written by the notifier alone. In NATS rather than Redis: they are the only record that a
# card went out, and Redis losing its data must never cost a card sent twice. ``max_age`` is the
# notifier's idempotency TTL (longer than JOBS' retention, so a replay is still recognised).
NOTIFIER_DELIVERIES_BUCKET = KeyValueConfig(
    bucket="trainwatch_notifier_deliveries",
    description="The notifier's per (channel, event) delivery markers, kept by the notifier",
    history=1,
    storage=StorageType.FILE,
    ttl=14 * DAY,
)

# Each notifier process's recent sends per bot (key: ``<bot digest>.<process>``, value: JSON list
# of send times), so a notifier that starts again right before Redis loses its data still counts
# its predecessor's sends of the last window. Kept an hour after a process's last write, longer
# than any bot's window.
NOTIFIER_SENDS_BUCKET = KeyValueConfig(
    bucket="trainwatch_notifier_sends",
    description="Each notifier process's recent sends per bot, for the bots' rate limits",
    history=1,
    storage=StorageType.FILE,
    ttl=3600.0,
)


@dataclass(frozen=True, slots=True)
class DurableConsumer:
    stream: str
    config: ConsumerConfig


NOTIFIER_CONSUMER = DurableConsumer(
    stream=JOBS_STREAM.name or "JOBS",
    config=ConsumerConfig(
        durable_name="notifier",
        deliver_policy=DeliverPolicy.NEW,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=60.0,
        max_ack_pending=1000,
    ),
)

PERSISTER_CONSUMER = DurableConsumer(
    stream=JOBS_STREAM.name or "JOBS",
    config=ConsumerConfig(
        durable_name="persister",
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=30.0,
        max_ack_pending=20000,
    ),
)

REGISTRY_HEALTH_CONSUMER = DurableConsumer(
    stream=CLUSTER_HEALTH_STREAM.name or "CLUSTER_HEALTH",
    config=ConsumerConfig(
        durable_name="registry-health",
        deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
        # nats-server refuses LAST_PER_SUBJECT without a filter subject.
        filter_subject=f"{CLUSTERS_PREFIX}.health.*",
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=30.0,
    ),
)


class StreamSettings(ServiceSettings):
    """What an operator (or a test suite) may tune in the stream definitions, read at every
    ``ensure_streams`` call. Every service calls it at start-up and updates an existing stream to
    what it reads, so all of them must see the same value: it is one environment variable."""

    jobs_duplicate_window_seconds: float = Field(
        JOBS_STREAM.duplicate_window,
        gt=0,
        description="JOBS' Nats-Msg-Id de-duplication window; the chaos suite shortens it to "
        "reach the 'after the window' cases in minutes",
    )


def stream_configs(settings: StreamSettings | None = None) -> tuple[StreamConfig, ...]:
    """``ALL_STREAMS`` with the tunable values of ``settings`` (default: from the environment)."""
    settings = settings or StreamSettings()
    jobs = dataclasses.replace(JOBS_STREAM, duplicate_window=settings.jobs_duplicate_window_seconds)
    return tuple(jobs if config is JOBS_STREAM else config for config in ALL_STREAMS)


async def ensure_streams(js: JetStreamContext, settings: StreamSettings | None = None) -> None:
    """Create or update every stream and the clusters KV bucket. Safe to call concurrently."""
    for config in stream_configs(settings):
        await _ensure_stream(js, config)
    await ensure_clusters_bucket(js)


async def _ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    assert config.name
    try:
        await js.stream_info(config.name)
    except NotFoundError:
        try:
            await js.add_stream(config=config)
            log.info("created stream", extra={"stream": config.name})
            return
        except BadRequestError:
            pass  # another replica created it between our two calls; update below
    await js.update_stream(config=config)


async def ensure_clusters_bucket(js: JetStreamContext) -> KeyValue:
    try:
        return await js.key_value(CLUSTERS_BUCKET.bucket)
    except Exception:  # nats-py raises BucketNotFoundError or NotFoundError depending on version
        return await js.create_key_value(config=CLUSTERS_BUCKET)


async def ensure_bucket(js: JetStreamContext, config: KeyValueConfig) -> KeyValue:
    """The bucket, created if it is missing (an existing one is used as it is)."""
    try:
        return await js.key_value(config.bucket)
    except Exception:  # nats-py raises BucketNotFoundError or NotFoundError depending on version
        try:
            return await js.create_key_value(config=config)
        except BadRequestError:  # another replica created it between our two calls
            return await js.key_value(config.bucket)


async def ensure_consumer(js: JetStreamContext, consumer: DurableConsumer) -> None:
    """Create a durable consumer if it is missing (an existing one keeps its position)."""
    name = consumer.config.durable_name
    assert name
    try:
        await js.consumer_info(consumer.stream, name)
    except NotFoundError:
        await js.add_consumer(consumer.stream, config=consumer.config)
