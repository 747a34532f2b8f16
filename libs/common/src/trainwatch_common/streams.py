"""Every JetStream stream, KV bucket and durable consumer Trainwatch uses, in one place.

Services call ``ensure_streams(js)`` at start-up. What it does depends on
``TRAINWATCH_MANAGE_STREAMS`` (StreamSettings.manage_streams):

- true (the default, for ``make run`` and tests: every process reads one environment): it
  creates what is missing and brings an existing stream's configuration up to date; any number
  of replicas may call it at once;
- false (every service but the one owner in the shipped deploy: the registry): it only waits
  until every stream and the clusters bucket exist, logging which are missing and who creates
  them, and warns about a stream whose configuration differs from this service's settings
  without touching it. Two services that read different values (a config drift during a
  rollout) therefore no longer take turns rewriting a stream's configuration.

Each consuming service still creates its own durable consumer (``ensure_consumer``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
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
    manage_streams: bool = Field(
        True,
        description="Create and update the streams and the clusters bucket (true), or only wait "
        "until they exist (false). The shipped deploy gives this role to the registry alone",
    )
    stream_replicas: int = Field(
        1,
        ge=1,
        le=5,
        description="Copies JetStream keeps of every stream and of the clusters KV bucket: 1 for "
        "one nats-server (local runs), 3 on a three-node cluster (the shipped deploy), so one "
        "node lost loses nothing and stops nothing",
    )


def stream_configs(settings: StreamSettings | None = None) -> tuple[StreamConfig, ...]:
    """``ALL_STREAMS`` with the tunable values of ``settings`` (default: from the environment)."""
    settings = settings or StreamSettings()
    jobs = dataclasses.replace(JOBS_STREAM, duplicate_window=settings.jobs_duplicate_window_seconds)
    return tuple(
        dataclasses.replace(jobs if config is JOBS_STREAM else config, num_replicas=settings.stream_replicas)
        for config in ALL_STREAMS
    )


def clusters_bucket_config(settings: StreamSettings | None = None) -> KeyValueConfig:
    """``CLUSTERS_BUCKET`` with the replicas of ``settings`` (default: from the environment)."""
    settings = settings or StreamSettings()
    return dataclasses.replace(CLUSTERS_BUCKET, replicas=settings.stream_replicas)


async def ensure_streams(js: JetStreamContext, settings: StreamSettings | None = None) -> None:
    """Create or update every stream and the clusters KV bucket (safe to call concurrently), or,
    when this service does not manage streams, wait until they exist."""
    settings = settings or StreamSettings()
    if not settings.manage_streams:
        await wait_for_streams(js, settings)
        return
    for config in stream_configs(settings):
        await _ensure_stream(js, config)
    await ensure_clusters_bucket(js, settings)


STREAM_OWNER = "the registry, or any process with TRAINWATCH_MANAGE_STREAMS=true"


async def wait_for_streams(
    js: JetStreamContext, settings: StreamSettings, *, poll_seconds: float = 1.0, log_every: float = 30.0
) -> None:
    """Return once every stream and the clusters bucket exist; never creates or changes one."""
    wanted = {config.name or "": config for config in stream_configs(settings)}
    bucket_stream = f"KV_{CLUSTERS_BUCKET.bucket}"
    last_log = -log_every
    while True:
        missing = []
        for name in [*wanted, bucket_stream]:
            try:
                info = await js.stream_info(name)
            except NotFoundError:
                missing.append(name)
                continue
            if name in wanted:
                _warn_on_drift(wanted[name], info.config)
        if not missing:
            return
        if time.monotonic() - last_log >= log_every:
            log.warning(
                "waiting for JetStream streams to be created by their owner",
                extra={"missing": missing, "owner": STREAM_OWNER},
            )
            last_log = time.monotonic()
        await asyncio.sleep(poll_seconds)


def _warn_on_drift(wanted: StreamConfig, actual: StreamConfig) -> None:
    differences = {
        field: {"stream": getattr(actual, field), "settings": getattr(wanted, field)}
        for field in ("num_replicas", "duplicate_window", "max_age", "subjects")
        if getattr(wanted, field) is not None and getattr(actual, field) != getattr(wanted, field)
    }
    if differences:
        log.warning(
            "stream configuration differs from this service's settings; left as its owner set it",
            extra={"stream": wanted.name, "differences": differences, "owner": STREAM_OWNER},
        )


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


async def ensure_clusters_bucket(js: JetStreamContext, settings: StreamSettings | None = None) -> KeyValue:
    """The clusters bucket; created if missing by a process that manages streams (a process that
    does not gets an error while the bucket is missing: ``ensure_streams`` waits for it first)."""
    settings = settings or StreamSettings()
    if not settings.manage_streams:
        return await js.key_value(CLUSTERS_BUCKET.bucket)
    try:
        kv = await js.key_value(CLUSTERS_BUCKET.bucket)
    except Exception:  # nats-py raises BucketNotFoundError or NotFoundError depending on version
        return await js.create_key_value(config=clusters_bucket_config(settings))
    # An existing bucket keeps its values; only its replica count follows the settings.
    stream = f"KV_{CLUSTERS_BUCKET.bucket}"
    current = (await js.stream_info(stream)).config
    if current.num_replicas != settings.stream_replicas:
        await js.update_stream(config=dataclasses.replace(current, num_replicas=settings.stream_replicas))
        log.info("clusters bucket replicas changed", extra={"replicas": settings.stream_replicas})
    return kv


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
