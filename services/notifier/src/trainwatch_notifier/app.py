"""The composition root: clients, rules, cluster directory, channel workers, consumer, health."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable

import httpx
import nats
from nats.aio.client import Client as NATS
from redis.asyncio import Redis
from starlette.applications import Starlette

from trainwatch_common import LeaseManager, ensure_consumer, ensure_streams
from trainwatch_common.observability.health import HealthServer, health_routes
from trainwatch_common.streams import NOTIFIER_CONSUMER
from trainwatch_notifier.clusters import ClusterDirectory
from trainwatch_notifier.consumer import JobConsumer
from trainwatch_notifier.deadletter import DeadLetters
from trainwatch_notifier.dedupe import IdempotencyKeys
from trainwatch_notifier.dispatch import WorkerDeps
from trainwatch_notifier.limits import BotLimits
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
        self.instance = settings.instance_id or f"{socket.gethostname()}-{os.getpid()}"
        self._http_client = http_client
        self._after_sent = after_sent
        self.rules = RulesSource(settings.rules_file, poll_seconds=settings.rules_poll_seconds)
        self.clusters = ClusterDirectory()
        self.ready = asyncio.Event()
        self.health_port: int | None = None
        self._nc: NATS | None = None
        self._redis: Redis | None = None

    async def _redis_ok(self) -> bool:
        return self._redis is not None and bool(await self._redis.ping())

    def _checks(self) -> dict[str, Callable[[], Awaitable[bool] | bool]]:
        return {
            "nats": lambda: self._nc is not None and self._nc.is_connected,
            "redis": self._redis_ok,
            "rules": lambda: self.rules.current is not None,
            "clusters": self.clusters.loaded.is_set,
            "consuming": self.ready.is_set,
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
        self._redis = Redis.from_url(settings.redis_url)
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
        deadletters = DeadLetters(js)
        deps = WorkerDeps(
            keys=IdempotencyKeys(
                redis,
                prefix=settings.redis_prefix,
                ttl_seconds=settings.idempotency_ttl_seconds,
                instance=self.instance,
            ),
            deadletters=deadletters,
            limits=BotLimits(redis=redis, prefix=settings.redis_prefix, instance=self.instance)
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
        consumer = JobConsumer(
            js,
            redis=redis,
            leases=LeaseManager(redis, prefix=settings.redis_prefix),
            workers=workers,
            ruleset=lambda: self.rules.current,
            cluster_labels=self.clusters.labels,
            deadletters=deadletters,
            fetch_batch=settings.fetch_batch,
            max_in_flight=settings.max_in_flight,
        )
        health = HealthServer(
            Starlette(routes=health_routes(self._checks())), host=settings.http_host, port=settings.http_port
        )
        durable = NOTIFIER_CONSUMER.config.durable_name or "notifier"
        consumer_info = await js.consumer_info(NOTIFIER_CONSUMER.stream, durable)
        ack_wait = consumer_info.config.ack_wait or 60.0  # the consumer's own, which an operator may tune
        background: list[asyncio.Task[None]] = []
        consuming: asyncio.Task[None] | None = None
        try:
            async with asyncio.TaskGroup() as group:
                health_started = asyncio.Event()
                background += [
                    group.create_task(health.serve(health_started), name="notifier-health"),
                    group.create_task(self.clusters.watch(js), name="notifier-clusters"),
                    group.create_task(self.rules.watch(), name="notifier-rules"),
                ]
                await health_started.wait()
                self.health_port = health.port
                await self.clusters.loaded.wait()  # route with labels from the first event on
                consuming = group.create_task(consumer.run(), name="notifier-consumer")
                background.append(
                    group.create_task(consumer.keep_alive(ack_wait / 3), name="notifier-keepalive")
                )
                self.ready.set()
                log.info("notifier consuming", extra={"instance": self.instance, "health_port": health.port})
                await stop.wait()
                log.info("notifier stopping")
                consuming.cancel()
                drained = await workers.drain(settings.shutdown_grace_seconds)
                if not drained:
                    log.warning("shutdown grace over with sends pending; they will be redelivered")
                await workers.close()
                await consumer.put_back()
                for task in background:
                    task.cancel()
        finally:
            self.ready.clear()
            await workers.close()
