"""The composition root: settings → NATS, Redis, publisher, state, supervisor, feed, health server.

``WatcherApp.run(stop)`` runs until ``stop`` is set (SIGTERM/SIGINT in ``run``), then stops
every cluster, drains NATS and closes Redis. Its long-running loops (health server, cluster
feed, claim loop) are owned by ``ServiceTasks``: a crash is logged, restarted with back-off and
shown in /readyz; the clusters themselves are the supervisor's keyed tasks (``TaskMap``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import Callable

import nats
from nats.aio.client import Client as NatsClient
from starlette.applications import Starlette

from trainwatch_common.events.clusters import ClusterSpec
from trainwatch_common.observability import task_dump
from trainwatch_common.observability.health import (
    OK,
    HealthServer,
    ReadinessCheck,
    health_routes,
    nats_status,
)
from trainwatch_common.observability.logging import configure_logging
from trainwatch_common.observability.loop_lag import measure_loop_lag
from trainwatch_common.redis_connection import describe as describe_redis
from trainwatch_common.redis_connection import redis_client
from trainwatch_common.streams import ensure_streams
from trainwatch_common.tasks import ServiceTasks
from trainwatch_watcher.claims import ClaimLoop, ClaimMetrics
from trainwatch_watcher.cluster_feed import ClusterFeed, FolderClusterFeed, NatsClusterFeed
from trainwatch_watcher.cluster_worker import ClusterWorker, WorkerDeps
from trainwatch_watcher.connections import ConnectionSource, KubeconfigFolder, RegistryConnections
from trainwatch_watcher.health import HealthPublisher
from trainwatch_watcher.history import StreamHistory
from trainwatch_watcher.metrics import WatcherMetrics
from trainwatch_watcher.ownership import ClusterOwnership
from trainwatch_watcher.publishing import Publisher
from trainwatch_watcher.settings import WatcherSettings
from trainwatch_watcher.state import StateStore
from trainwatch_watcher.supervisor import ClusterSupervisor
from trainwatch_watcher.unowned import UnownedClusters

log = logging.getLogger(__name__)


def default_instance_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class WatcherApp:
    """One watcher replica. ``connections`` and ``feed`` are injected by tests; by default they
    come from settings (the registry, or a kubeconfig folder)."""

    def __init__(
        self,
        settings: WatcherSettings,
        *,
        connections: ConnectionSource | None = None,
        feed_factory: Callable[[NatsClient], ClusterFeed] | None = None,
        history_factory: Callable[[NatsClient], StreamHistory] = StreamHistory,
        metrics: WatcherMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.instance_id = settings.instance_id or default_instance_id()
        self.metrics = metrics or WatcherMetrics()
        self._connections = connections
        self._feed_factory = feed_factory
        self._history_factory = history_factory
        self.supervisor: ClusterSupervisor | None = None
        self.claims: ClaimLoop | None = None
        self.health_server: HealthServer | None = None
        self.tasks: ServiceTasks | None = None
        self.ready = asyncio.Event()

    def _lease_proven(self, cluster_id: str, epoch: int) -> bool:
        return self.claims is not None and self.claims.holds(cluster_id, epoch)

    def _epoch_key(self, cluster_id: str) -> str:
        assert self.claims is not None  # workers start only from the claim loop's callbacks
        return self.claims.leases.epoch_key(cluster_id)

    def _default_connections(self) -> ConnectionSource:
        s = self.settings
        if s.registry_url:
            return RegistryConnections(s.registry_url, s.watcher_token)
        if s.kubeconfig_dir:
            return KubeconfigFolder(s.kubeconfig_dir)
        raise ValueError("set TRAINWATCH_REGISTRY_URL or TRAINWATCH_KUBECONFIG_DIR")

    def _default_feed(self, nc: NatsClient) -> ClusterFeed:
        s = self.settings
        if s.registry_url is None and s.kubeconfig_dir is not None:
            return FolderClusterFeed(KubeconfigFolder(s.kubeconfig_dir))
        return NatsClusterFeed(
            nc, resync_interval=s.safety_resync_interval, read_failures=self.metrics.cluster_set_read_failures
        )

    async def run(self, stop: asyncio.Event) -> None:
        s = self.settings
        connections = self._connections or self._default_connections()
        nc = await nats.connect(
            servers=s.nats_servers(),
            name=f"trainwatch-watcher {self.instance_id}",
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            **s.nats_auth(),
        )
        # A blocking pool: thousands of informers share a bounded number of connections and
        # wait for one instead of failing with "Too many connections".
        redis = redis_client(s, max_connections=s.redis_max_connections, blocking=True)
        log.info("redis", extra={"redis": describe_redis(s), "lease_replicas": s.lease_replicas_required()})
        try:
            await ensure_streams(nc.jetstream())
            store = StateStore(redis)
            deps = WorkerDeps(
                connections=connections,
                store=store,
                publisher=Publisher(nc, ack_timeout=s.publish_ack_timeout, metrics=self.metrics),
                health=HealthPublisher(nc),
                metrics=self.metrics,
                settings=s,
                owner=self.instance_id,
                fence=self._lease_proven,
                epoch_key=self._epoch_key,
                history=self._history_factory(nc),
            )

            def make_worker(spec: ClusterSpec, epoch: int) -> ClusterWorker:
                return ClusterWorker(spec, epoch=epoch, deps=deps)

            supervisor = ClusterSupervisor(make_worker, forget_state=store.delete_cluster)
            self.supervisor = supervisor
            feed = (self._feed_factory or self._default_feed)(nc)
            ownership = ClusterOwnership(
                supervisor, on_change=self.metrics.clusters_watched.set, applied=self.ready
            )
            # Its own small pool: lease renewals must never queue behind the informers' checkpoints.
            claims_redis = redis_client(s, max_connections=4)
            claims = ClaimLoop(
                claims_redis, replica_id=self.instance_id,
                start_cluster=ownership.start_owned, stop_cluster=ownership.stop_owned,
                ttl_ms=s.lease_ttl_ms, tick=s.claim_tick, prefix=s.redis_prefix,
                lease_replicas=s.lease_replicas_required(),
                metrics=ClaimMetrics(self.metrics.registry),
            )  # fmt: skip
            ownership.bind(claims)
            self.claims = claims
            if isinstance(connections, RegistryConnections) and connections.lease_proof is None:
                connections.lease_proof = claims.connection_proof  # the registry asks for it

            unowned = UnownedClusters(
                redis,
                desired=lambda: ownership.desired().keys() if ownership.applied.is_set() else None,
                lease_key=claims.leases.lease_key,
                interval=max(1.0, s.lease_ttl_ms / 2000),  # half a lease TTL
                registry=self.metrics.registry,
            )

            async def checkpoints_ready() -> str:  # the informers' Redis pool
                return OK if await redis.ping() else "no PONG"

            checks: dict[str, ReadinessCheck] = {
                "nats": lambda: nats_status(nc),
                "redis": checkpoints_ready,
                "leases": lambda: OK if claims.redis_ok else "the claim loop's last tick did not reach Redis",
                "clusters": lambda: OK if self.ready.is_set() else "the desired cluster set not read yet",
            }

            tasks = self.tasks = ServiceTasks()
            app = Starlette(routes=health_routes(checks, registry=self.metrics.registry, tasks=tasks))
            health_server = self.health_server = HealthServer(app, host=s.http_host, port=s.http_port)
            try:
                async with tasks:  # stopped newest first: unowned count, claims, feed, health server
                    tasks.start("watcher-health-server", health_server.serve)
                    tasks.start("watcher-loop-lag", measure_loop_lag)
                    tasks.start("watcher-cluster-feed", lambda: feed.run(ownership.apply))
                    tasks.start("watcher-claims", claims.run)
                    tasks.start("watcher-unowned-clusters", unowned.run)
                    await stop.wait()
            finally:
                # SIGTERM: drain and stop every cluster (checkpoints written, within the claims'
                # stop budget), then release the leases at once, so the other replicas take over
                # within a claim tick, not a lease TTL.
                log.info("stopping clusters")
                await claims.release_all()
                await supervisor.stop_all()
                await claims_redis.aclose()
                log.info("clusters stopped")
                if isinstance(connections, RegistryConnections):
                    await connections.close()
        finally:
            log.info("draining nats")
            try:
                await nc.drain()
            except Exception:  # already closed or never connected
                await nc.close()
            await redis.aclose()  # and its pool


def run(settings: WatcherSettings | None = None) -> None:
    settings = settings or WatcherSettings()
    configure_logging(service="watcher", level=settings.log_level, fmt=settings.log_format)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        task_dump.install(loop)
        app = WatcherApp(settings)
        log.info("watcher starting", extra={"instance": app.instance_id})
        await app.run(stop)
        log.info("watcher stopped")

    asyncio.run(main())
