"""The composition root: clients, rules, cluster directory, channel workers, consumer, health.

The long-running loops (health server, cluster directory, rules, acks, keep-alive, consumer) are
owned by ``ServiceTasks``: a crash is logged, restarted with back-off and shown in /readyz.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable

import httpx
import nats
from nats.aio.client import Client as NATS
from redis.asyncio import Redis
from starlette.applications import Starlette

from trainwatch_common import ensure_consumer, ensure_streams
from trainwatch_common.observability.health import (
    OK,
    HealthServer,
    ReadinessCheck,
    health_routes,
    nats_status,
)
from trainwatch_common.redis_connection import describe as describe_redis
from trainwatch_common.redis_connection import redis_client
from trainwatch_common.streams import (
    NOTIFIER_CONSUMER,
    NOTIFIER_DELIVERIES_BUCKET,
    NOTIFIER_SENDS_BUCKET,
    StreamSettings,
    ensure_bucket,
)
from trainwatch_common.tasks import ServiceTasks
from trainwatch_notifier.clusters import ClusterDirectory
from trainwatch_notifier.consumer import JobConsumer
from trainwatch_notifier.deadletter import DeadLetters
from trainwatch_notifier.dedupe import IdempotencyKeys
from trainwatch_notifier.dispatch import WorkerDeps
from trainwatch_notifier.limits import BotLimits
from trainwatch_notifier.order import JobOrder
from trainwatch_notifier.rules_source import RulesSource
from trainwatch_notifier.settings import NotifierSettings
from trainwatch_notifier.workers import ChannelWorkers

log = logging.getLogger(__name__)


class Notifier:
    def __init__(
        self,
        settings: NotifierSettings,
        *,
        http_client: httpx.AsyncClient | None = None,
        after_sent: Callable[[list[str]], Awaitable[None]] | None = None,
    ) -> None:
        self.settings = settings
        # Random per start: a restarted container has the same host name and pid, and the
        # "sending" markers it leaves must not look like its predecessor's.
        self.instance = settings.instance_id or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self._http_client = http_client
        self._after_sent = after_sent
        self.rules = RulesSource(settings.rules_file, poll_seconds=settings.rules_poll_seconds)
        self.clusters = ClusterDirectory()
        self.ready = asyncio.Event()
        self.health_port: int | None = None
        self._nc: NATS | None = None
        self._redis: Redis | None = None
        self.tasks = ServiceTasks()

    async def _redis_ok(self) -> str:
        if self._redis is None:
            return "not connected yet"
        return OK if await self._redis.ping() else "no PONG"

    def _checks(self) -> dict[str, ReadinessCheck]:
        return {
            "nats": lambda: nats_status(self._nc),
            "redis": self._redis_ok,
            "rules": lambda: OK if self.rules.current is not None else "rules file not loaded",
            "clusters": lambda: OK if self.clusters.loaded.is_set() else "cluster list not read yet",
            "consuming": lambda: OK if self.ready.is_set() else "consumer not started",
        }

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set, then finish in-flight sends (within the grace) and return."""
        settings = self.settings
        self.rules.load()  # a bad file at start-up is fatal: there are no previous rules to keep
        self._nc = await nats.connect(
            servers=settings.nats_servers(),
            name=f"notifier {self.instance}",
            max_reconnect_attempts=-1,
            **settings.nats_auth(),
        )
        # A blocking pool: a burst fetches more events than there are connections, and each waits
        # for one; redis-py's default pool fails the 101st with MaxConnectionsError instead, which
        # the consumer took for a Redis outage.
        self._redis = redis_client(settings, max_connections=settings.redis_max_connections, blocking=True)
        log.info("redis", extra={"redis": describe_redis(settings)})
        client = self._http_client or httpx.AsyncClient(follow_redirects=False)
        try:
            await self._serve(stop, self._nc, self._redis, client)
        finally:
            if self._http_client is None:
                await client.aclose()
            await self._redis.aclose()
            with contextlib.suppress(Exception):
                await self._nc.drain()

    async def _serve(self, stop: asyncio.Event, nc: NATS, redis: Redis, client: httpx.AsyncClient) -> None:
        settings = self.settings
        js = nc.jetstream()
        await ensure_streams(js)
        await ensure_consumer(js, NOTIFIER_CONSUMER)
        # The notifier's own buckets, replicated like the streams (TRAINWATCH_STREAM_REPLICAS).
        replicas = StreamSettings().stream_replicas
        deliveries = await ensure_bucket(
            js,
            dataclasses.replace(
                NOTIFIER_DELIVERIES_BUCKET, ttl=float(settings.idempotency_ttl_seconds), replicas=replicas
            ),
        )
        deadletters = DeadLetters(js)
        deps = WorkerDeps(
            keys=IdempotencyKeys(deliveries, instance=self.instance),
            deadletters=deadletters,
            limits=BotLimits(
                redis=redis,
                prefix=settings.redis_prefix,
                windows=await ensure_bucket(
                    js, dataclasses.replace(NOTIFIER_SENDS_BUCKET, replicas=replicas)
                ),
            )
            if settings.shared_rate_limits
            else BotLimits(),
            dashboard_url=settings.dashboard_url,
            cluster_name=self.clusters.name,
            retry_base_seconds=settings.retry_base_seconds,
            retry_cap_seconds=settings.retry_cap_seconds,
            retry_max_seconds=settings.retry_max_seconds,
            unconfirmed_after_seconds=settings.unconfirmed_after_seconds,
            unconfirmed_policy=settings.unconfirmed_policy,
            after_sent=self._after_sent,
        )
        workers = ChannelWorkers(deps, client)
        assert self.rules.current is not None
        workers.apply(self.rules.current)
        self.rules.on_change = workers.apply
        tasks = self.tasks = ServiceTasks()  # this run's: a stopped owner starts nothing again
        health = HealthServer(
            Starlette(routes=health_routes(self._checks(), tasks=tasks)),
            host=settings.http_host,
            port=settings.http_port,
        )
        durable = NOTIFIER_CONSUMER.config.durable_name or "notifier"
        consumer_info = await js.consumer_info(NOTIFIER_CONSUMER.stream, durable)
        ack_wait = consumer_info.config.ack_wait or 60.0  # the consumer's own, which an operator may tune
        consumer = JobConsumer(
            js,
            # An event a dead notifier held comes back after the ack wait; until then (and a
            # margin for its fetch) its entry in the job order must keep newer events waiting.
            order=JobOrder(redis, prefix=settings.redis_prefix, stale_after_seconds=2 * ack_wait + 5),
            workers=workers,
            ruleset=lambda: self.rules.current,
            cluster_labels=self.clusters.labels,
            deadletters=deadletters,
            fetch_batch=settings.fetch_batch,
            max_in_flight=settings.max_in_flight,
            ack_wait_seconds=ack_wait,
            in_flight_full=deps.in_flight_full,
        )
        health_started = asyncio.Event()
        try:
            async with tasks:  # on any way out: the rest stopped, newest first
                tasks.start("notifier-health", lambda: health.serve(health_started))
                tasks.start("notifier-clusters", lambda: self.clusters.watch(js))
                tasks.start("notifier-rules", self.rules.watch)
                await health_started.wait()
                self.health_port = health.port
                await self.clusters.loaded.wait()  # route with labels from the first event on
                # Started before the consumer, so stopped after it: acks and keep-alive go on
                # while the workers drain.
                tasks.start("notifier-acks", consumer.acknowledge)
                tasks.start("notifier-keepalive", lambda: consumer.keep_alive(ack_wait / 3))
                tasks.start("notifier-consumer", consumer.run)
                self.ready.set()
                log.info("notifier consuming", extra={"instance": self.instance, "health_port": health.port})
                await stop.wait()
                log.info("notifier stopping")
                await tasks.stop_task("notifier-consumer")  # stop reading first
                await consumer.close()  # events held back for order are not routed any more
                drained = await workers.drain(settings.shutdown_grace_seconds)
                if not drained:
                    log.warning("shutdown grace over with sends pending; they will be redelivered")
                await workers.close()
                await consumer.put_back()
        finally:
            self.ready.clear()
            await consumer.close()
            await workers.close()
