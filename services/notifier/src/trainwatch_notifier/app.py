"""The composition root: clients, rules, cluster directory, silences, channel workers, consumer,
health and the admin API.

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
import time
from collections.abc import Awaitable, Callable

import httpx
import nats
import sqlalchemy as sa
from fastapi import FastAPI
from nats.aio.client import Client as NATS
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_common import JobStatusEvent, ensure_consumer, ensure_streams, silence_links
from trainwatch_common.auth import ApiTokens, weak_token_reason
from trainwatch_common.observability.database import database_unavailable
from trainwatch_common.observability.health import (
    OK,
    HealthServer,
    ReadinessCheck,
    health_routes,
    nats_status,
)
from trainwatch_common.observability.loop_lag import measure_loop_lag
from trainwatch_common.redis_connection import describe as describe_redis
from trainwatch_common.redis_connection import redis_client
from trainwatch_common.sql_engine import create_engine
from trainwatch_common.streams import (
    NOTIFIER_CONSUMER,
    NOTIFIER_DELIVERIES_BUCKET,
    NOTIFIER_SENDS_BUCKET,
    StreamSettings,
    ensure_bucket,
)
from trainwatch_common.tasks import ServiceTasks
from trainwatch_notifier import api
from trainwatch_notifier.channel_health import ChannelHealth
from trainwatch_notifier.clusters import ClusterDirectory
from trainwatch_notifier.consumer import JobConsumer
from trainwatch_notifier.deadletter import DeadLetterBox, DeadLetters
from trainwatch_notifier.dedupe import IdempotencyKeys
from trainwatch_notifier.digest_store import DigestStore
from trainwatch_notifier.dispatch import WorkerDeps
from trainwatch_notifier.limits import BotLimits
from trainwatch_notifier.migrations import upgrade_to_head
from trainwatch_notifier.order import JobOrder
from trainwatch_notifier.replay import Replayer
from trainwatch_notifier.rules_source import RulesSource
from trainwatch_notifier.settings import NotifierSettings
from trainwatch_notifier.silence_store import SilenceStore
from trainwatch_notifier.workers import ChannelWorkers

log = logging.getLogger(__name__)


async def _migrate_when_reachable(engine: AsyncEngine) -> None:
    """The schema first; a database that is not up yet (a restart, compose starting everything at
    once) is waited for with back-off instead of crash-looping the notifier (as the registry does)."""
    delay = 0.2
    while True:
        try:
            await upgrade_to_head(engine)
            return
        except Exception as exc:
            if not database_unavailable(exc):
                raise
            log.warning("database not reachable for migrations; retrying", extra={"error": repr(exc)[:300]})
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)


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
        self.channel_health = ChannelHealth()
        self.ready = asyncio.Event()
        self.health_port: int | None = None
        self._nc: NATS | None = None
        self._redis: Redis | None = None
        self._engine: AsyncEngine | None = None
        self.silences: SilenceStore | None = None
        self.tasks = ServiceTasks()

    async def _redis_ok(self) -> str:
        if self._redis is None:
            return "not connected yet"
        return OK if await self._redis.ping() else "no PONG"

    async def _sql_ok(self) -> str:
        if self._engine is None:
            return "not connected yet"
        async with self._engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))
        return OK

    def silence_link(self, event: JobStatusEvent) -> str | None:
        """The signed "silence this job for 1 h" link of a card, or None without a link secret."""
        secret = self.settings.silence_link_secret.get_secret_value()
        if not secret:
            return None
        job = event.job
        identity = silence_links.JobIdentity(
            cluster=job.cluster_id, namespace=job.namespace, kind=job.kind_key, name=job.name, uid=job.uid
        )
        # Whole minutes: the cards of one job rendered in the same minute carry the same link.
        expires = (int(time.time()) // 60 * 60) + self.settings.silence_link_ttl_seconds
        return silence_links.link(self.settings.dashboard_url, secret, identity, expires=expires)

    def _checks(self) -> dict[str, ReadinessCheck]:
        return {
            "nats": lambda: nats_status(self._nc),
            "redis": self._redis_ok,
            "sql": self._sql_ok,
            "rules": lambda: OK if self.rules.current is not None else "rules file not loaded",
            "clusters": lambda: OK if self.clusters.loaded.is_set() else "cluster list not read yet",
            "consuming": lambda: OK if self.ready.is_set() else "consumer not started",
            "channels": self.channel_health.check,
        }

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set, then finish in-flight sends (within the grace) and return."""
        settings = self.settings
        self.rules.load()  # a bad file at start-up is fatal: there are no previous rules to keep
        tokens = ApiTokens()
        tokens.refuse_weak()
        secret = settings.silence_link_secret.get_secret_value()
        if secret and (weak := weak_token_reason(secret)) is not None:
            raise ValueError(f"refusing to start: TRAINWATCH_SILENCE_LINK_SECRET {weak}")
        self._engine = create_engine(settings.notifier_database_url)
        if settings.notifier_migrate_on_start:
            await _migrate_when_reachable(self._engine)
        self.silences = SilenceStore(self._engine)
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
            await self._serve(stop, self._nc, self._redis, client, tokens)
        finally:
            if self._http_client is None:
                await client.aclose()
            await self._redis.aclose()
            with contextlib.suppress(Exception):
                await self._nc.drain()
            await self._engine.dispose()

    async def _serve(
        self, stop: asyncio.Event, nc: NATS, redis: Redis, client: httpx.AsyncClient, tokens: ApiTokens
    ) -> None:
        settings = self.settings
        assert self.silences is not None
        assert self._engine is not None
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
            silence_link=self.silence_link,
            health=self.channel_health,
            digests=DigestStore(self._engine),
        )
        workers = ChannelWorkers(deps, client)
        assert self.rules.current is not None
        workers.apply(self.rules.current)
        self.rules.on_change = workers.apply
        tasks = self.tasks = ServiceTasks()  # this run's: a stopped owner starts nothing again
        web = FastAPI(title="Trainwatch notifier", docs_url=None, redoc_url=None)
        web.router.routes.extend(health_routes(self._checks(), tasks=tasks))
        web.include_router(api.router)
        web.state.tokens = tokens
        web.state.silences = self.silences
        web.state.digests = deps.digests
        web.state.dead_letters = box = DeadLetterBox(js)
        web.state.replayer = Replayer(
            box, workers, deps.keys, ruleset=lambda: self.rules.current, cluster_labels=self.clusters.labels
        )
        health = HealthServer(web, host=settings.http_host, port=settings.http_port)
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
            silenced=self.silences.suppress_until_sql_answers,
            fetch_batch=settings.fetch_batch,
            max_in_flight=settings.max_in_flight,
            ack_wait_seconds=ack_wait,
            in_flight_full=deps.in_flight_full,
        )
        health_started = asyncio.Event()
        try:
            async with tasks:  # on any way out: the rest stopped, newest first
                tasks.start("notifier-health", lambda: health.serve(health_started))
                tasks.start("notifier-loop-lag", measure_loop_lag)
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
