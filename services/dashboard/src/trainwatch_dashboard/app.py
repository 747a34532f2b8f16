"""The composition root: ``create_app(settings)`` builds the clients, the live feed and the routes.

The live feed's connection loop is the dashboard's one background task, owned by ``ServiceTasks``
(a crash is logged, restarted with back-off and shown in /readyz)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Iterator
from importlib import resources
from urllib.parse import urlsplit

import httpx
import nats
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from nats.aio.client import Client as NatsClient
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from trainwatch_common.observability.health import health_routes, nats_status
from trainwatch_common.observability.loop_lag import measure_loop_lag
from trainwatch_common.tasks import ServiceTasks
from trainwatch_dashboard import admin, dead_letters, digests, pages, silences
from trainwatch_dashboard.backends import build_backends
from trainwatch_dashboard.guard import SignInGuard
from trainwatch_dashboard.live import Broker, LiveFeed
from trainwatch_dashboard.settings import DashboardSettings
from trainwatch_dashboard.web import HostAndHeaders, Ui, build_templates

log = logging.getLogger(__name__)


async def _probe(servers: list[str]) -> None:
    """Raise OSError unless one of the servers accepts a TCP connection.

    nats-py's initial connect with unlimited reconnects retries internally and can swallow a
    cancellation while it does, which would leave shutdown hanging while NATS is down; so the
    retrying happens here, and nats.connect is only called once a server answers.
    """
    for server in servers:
        url = urlsplit(server if "://" in server else f"nats://{server}")
        try:
            _, writer = await asyncio.open_connection(url.hostname or "127.0.0.1", url.port or 4222)
        except OSError:
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return
    raise OSError(f"no NATS server answers at {', '.join(servers)}")


class LiveConnection:
    """Connects to NATS (retrying until it answers, so the pages work meanwhile) and feeds the broker."""

    def __init__(self, settings: DashboardSettings, feed: LiveFeed) -> None:
        self._settings = settings
        self._feed = feed
        self.nc: NatsClient | None = None
        self.subscribed = asyncio.Event()

    def connected(self) -> bool:
        return self.nc is not None and self.nc.is_connected and self.subscribed.is_set()

    def status(self) -> str:
        """The live feed's state in /readyz's words."""
        if self.nc is None:
            return "NATS not reachable yet (retrying)"
        if not self.subscribed.is_set():
            return "connected, not subscribed yet"
        return nats_status(self.nc)

    async def run(self) -> None:
        delay = 0.5
        while True:
            try:
                await _probe(self._settings.nats_servers())
                self.nc = await nats.connect(
                    servers=self._settings.nats_servers(),
                    name=f"trainwatch-dashboard-{self._settings.instance_id or 'main'}",
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=1.0,
                    error_cb=self._on_error,
                    **self._settings.nats_auth(),
                )
                await self._feed.start(self.nc)
                break
            except Exception as exc:  # NATS not up yet, or its streams not created yet
                log.warning("live feed not started; retrying", extra={"error": repr(exc), "in_s": delay})
                await self._close()
                await asyncio.sleep(delay * (0.8 + 0.4 * random.random()))
                delay = min(delay * 2, 15.0)
        self.subscribed.set()
        log.info("live feed subscribed")
        await asyncio.Event().wait()  # the subscriptions run in the client's tasks until cancelled

    async def _on_error(self, exc: Exception) -> None:
        # nats-py's default logs a traceback per failed attempt; one line says enough.
        log.warning("nats connection problem", extra={"error": repr(exc)})

    async def close(self) -> None:
        await self._feed.stop()
        await self._close()

    async def _close(self) -> None:
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await self.nc.drain()
            self.nc = None


class _LiveMetrics(Collector):
    """Reads the broker's and the feed's counters at scrape time."""

    def __init__(self, broker: Broker, feed: LiveFeed) -> None:
        self._broker = broker
        self._feed = feed

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "dashboard_live_clients",
            "Browsers connected to a live stream",
            value=self._broker.subscriber_count,
        )
        yield CounterMetricFamily(
            "dashboard_live_dropped",
            "Live clients dropped for falling behind",
            value=self._broker.dropped_total,
        )
        yield CounterMetricFamily(
            "dashboard_job_events", "Job events read from JetStream", value=self._feed.jobs_received
        )
        yield CounterMetricFamily(
            "dashboard_malformed_events", "Events skipped as malformed", value=self._feed.malformed
        )


def _metrics(broker: Broker, feed: LiveFeed) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(_LiveMetrics(broker, feed))
    return registry


def create_app(settings: DashboardSettings, *, transport: httpx.AsyncBaseTransport | None = None) -> FastAPI:
    """The dashboard app; ``transport`` replaces the network under the backend clients (tests)."""
    broker = Broker(queue_size=settings.sse_queue_size)
    feed = LiveFeed(broker)
    live = LiveConnection(settings, feed)
    tasks = ServiceTasks()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        backends = build_backends(
            registry_url=settings.registry_url,
            query_url=settings.query_url,
            notifier_url=settings.notifier_url,
            viewer_token=settings.dashboard_api_token.get_secret_value(),
            timeout=settings.backend_timeout_seconds,
            transport=transport,
        )
        guard = SignInGuard(
            backends.registry,
            failures_per_minute=settings.auth_failures_per_minute,
            remember_seconds=settings.session_check_seconds,
        )
        app.state.ui = Ui(
            settings=settings,
            backends=backends,
            broker=broker,
            feed=feed,
            templates=build_templates(),
            guard=guard,
        )
        app.state.live = live
        tasks.start("dashboard-live-feed", live.run)
        tasks.start("dashboard-loop-lag", measure_loop_lag)
        try:
            yield
        finally:
            await tasks.stop()
            await live.close()
            await backends.aclose()

    app = FastAPI(title="Trainwatch dashboard", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.add_middleware(HostAndHeaders, allowed_hosts=settings.allowed_hosts())
    app.state.broker = broker
    app.state.tasks = tasks
    for route in health_routes({"nats": live.status}, registry=_metrics(broker, feed), tasks=tasks):
        app.router.routes.append(route)
    static_dir = resources.files("trainwatch_dashboard") / "static"
    app.mount("/static", StaticFiles(directory=str(static_dir)), name="static")
    app.include_router(pages.router)
    app.include_router(admin.router)
    app.include_router(silences.router)
    app.include_router(dead_letters.router)
    app.include_router(digests.router)
    return app
