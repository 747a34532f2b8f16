"""The composition root: ``create_app(settings)`` builds the FastAPI app; its lifespan migrates the
database, builds the engine and the NATS client, and owns the consumer and retention tasks
(``ServiceTasks``: a crash is logged, restarted with back-off and shown in /readyz).

Shutdown (SIGTERM → uvicorn → lifespan exit) cancels the consumer between or inside a batch:
anything not yet acked is redelivered to a replica, and rewriting it is harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import nats
import sqlalchemy as sa
import uvicorn
from fastapi import FastAPI
from nats.aio.client import Client as NatsClient

from trainwatch_common import ensure_consumer, ensure_streams
from trainwatch_common.auth import ApiTokens
from trainwatch_common.observability import task_dump
from trainwatch_common.observability.database import install_database_unavailable_handler
from trainwatch_common.observability.health import OK, health_routes, nats_status
from trainwatch_common.observability.logging import configure_logging
from trainwatch_common.observability.loop_lag import measure_loop_lag
from trainwatch_common.streams import PERSISTER_CONSUMER
from trainwatch_common.tasks import ServiceTasks
from trainwatch_persister import __version__, retention
from trainwatch_persister.api.routes import jobs, stats
from trainwatch_persister.consumer import Backoff, JobEventConsumer
from trainwatch_persister.database import make_engine, safe_url
from trainwatch_persister.job_gauge import JobGauge, report_consumer_pending
from trainwatch_persister.migrate import migrate
from trainwatch_persister.settings import PersisterSettings

log = logging.getLogger(__name__)

DESCRIPTION = """The history of every training job Trainwatch watches.

Authenticate with `Authorization: Bearer <token>` (a viewer or admin token). Lists use keyset
pagination: follow `next_cursor` until it is null; `total` counts every matching job.
"""


def create_app(settings: PersisterSettings, *, tokens: ApiTokens | None = None) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with run_service(settings, app):
            yield

    app = FastAPI(
        title="Trainwatch persister", version=__version__, description=DESCRIPTION, lifespan=lifespan
    )
    app.state.settings = settings
    app.state.tokens = tokens if tokens is not None else ApiTokens()
    app.state.consumer = None
    tasks = app.state.tasks = ServiceTasks()
    app.include_router(jobs.router)
    app.include_router(stats.router)
    app.router.routes.extend(
        health_routes({"database": _database_ready(app), "consumer": _consumer_ready(app)}, tasks=tasks)
    )

    install_database_unavailable_handler(app, service="persister")
    return app


def _database_ready(app: FastAPI) -> Callable[[], Awaitable[str]]:
    async def check() -> str:
        async with app.state.engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))
        consumer: JobEventConsumer | None = app.state.consumer
        if consumer is not None and not consumer.database_ok:
            return "writes failing (the last batch was not stored; retrying)"
        return OK

    return check


def _consumer_ready(app: FastAPI) -> Callable[[], str]:
    def check() -> str:
        if not app.state.settings.consume:
            return OK
        # The NATS connection; the consumer task itself is in checks["tasks"] (ServiceTasks).
        return nats_status(getattr(app.state, "nats", None))

    return check


@contextlib.asynccontextmanager
async def run_service(settings: PersisterSettings, app: FastAPI) -> AsyncIterator[None]:
    if settings.migrate_on_start:
        await _migrate_until_done(settings)
    engine = make_engine(settings.database_url)
    app.state.engine = engine
    tasks: ServiceTasks = app.state.tasks
    nc: NatsClient | None = None
    try:
        if settings.consume:
            nc = await nats.connect(
                servers=settings.nats_servers(),
                name="trainwatch-persister",
                max_reconnect_attempts=-1,
                **settings.nats_auth(),
            )
            app.state.nats = nc
            js = nc.jetstream()
            await ensure_streams(js)
            await ensure_consumer(js, PERSISTER_CONSUMER)
            consumer = JobEventConsumer(js=js, engine=engine, settings=settings)
            app.state.consumer = consumer
            tasks.start("persister-consumer", consumer.run)
            interval = settings.jobs_gauge_interval_seconds
            tasks.start("persister-consumer-pending", lambda: report_consumer_pending(js, interval))
        job_gauge = JobGauge(engine)
        tasks.start("persister-loop-lag", measure_loop_lag)
        tasks.start("persister-jobs-gauge", lambda: job_gauge.run(settings.jobs_gauge_interval_seconds))
        if settings.retention_days > 0:

            async def pruning() -> None:
                await retention.prune_forever(
                    engine, retention_days=settings.retention_days, interval=settings.prune_interval_seconds
                )

            tasks.start("persister-retention", pruning)
        log.info("persister started", extra={"database": safe_url(settings.database_url)})
        yield
    finally:
        await tasks.stop()  # newest first: retention, then the consumer
        if nc is not None:
            with contextlib.suppress(Exception):  # already closed or unreachable: nothing to flush
                await nc.drain()
        await engine.dispose()
        log.info("persister stopped")


async def _migrate_until_done(settings: PersisterSettings) -> None:
    """The schema must exist before anything else runs; wait for the database rather than crash-loop."""
    backoff = Backoff(initial=settings.retry_initial_seconds, maximum=settings.retry_max_seconds)
    while True:
        try:
            await migrate(settings.database_url)
            return
        except (OSError, sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
            log.warning("database not reachable for migrations; retrying", extra={"error": repr(exc)})
            await asyncio.sleep(backoff.next_delay())


async def serve(settings: PersisterSettings) -> None:
    """Run the API, consumer and retention until SIGTERM/SIGINT (uvicorn turns them into a clean shutdown)."""
    configure_logging(service="persister", level=settings.log_level, fmt=settings.log_format)
    config = uvicorn.Config(
        create_app(settings),
        host=settings.http_host,
        port=settings.http_port,
        log_config=None,
        access_log=False,
        lifespan="on",
    )
    task_dump.install()
    await uvicorn.Server(config).serve()
