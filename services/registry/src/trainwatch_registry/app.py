"""The composition root: ``create_app(settings)`` and the lifespan that builds everything.

Start-up: engine and migrations, the encryption keys (refusing to start without one), the
NATS bus, the outbox relay and the health consumer as named tasks (``ServiceTasks``: a crash is
logged, restarted with back-off and shown in /readyz), then the import folder. Shutdown (SIGTERM
via uvicorn): the tasks are stopped newest first, the engine disposed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator
from datetime import timedelta

from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from trainwatch_common.auth import ApiTokens
from trainwatch_common.observability.database import (
    database_unavailable,
    install_database_unavailable_handler,
)
from trainwatch_common.observability.health import OK, health_routes
from trainwatch_common.observability.loop_lag import measure_loop_lag
from trainwatch_common.redis_connection import redis_client
from trainwatch_common.sql_engine import create_engine
from trainwatch_common.tasks import ServiceTasks
from trainwatch_registry.addresses import AddressPolicy
from trainwatch_registry.api.deps import ConnectivityCheck, Services
from trainwatch_registry.api.errors import install_error_handlers
from trainwatch_registry.api.routes import clusters
from trainwatch_registry.bus import Bus
from trainwatch_registry.connectivity import check_connectivity
from trainwatch_registry.crypto import Encryptor
from trainwatch_registry.expiry import ExpiryMonitor
from trainwatch_registry.health_consumer import HealthConsumer
from trainwatch_registry.importer import import_directory
from trainwatch_registry.kubeconfig import IntakePolicy, SanitizedKubeconfig
from trainwatch_registry.lease_proofs import LeaseProofs
from trainwatch_registry.migrations import upgrade_to_head
from trainwatch_registry.models import ConnectivityReport
from trainwatch_registry.outbox import OutboxRelay
from trainwatch_registry.registrations import Registry
from trainwatch_registry.settings import RegistrySettings

log = logging.getLogger(__name__)


class BodyLimit:
    """Refuses request bodies over ``max_bytes`` with 413 before the JSON is parsed."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await _too_large(send, self.max_bytes)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise _BodyTooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _BodyTooLarge:
            await _too_large(send, self.max_bytes)


class _BodyTooLarge(Exception):
    pass


async def _too_large(send: Send, limit: int) -> None:
    body = f'{{"detail":"request body larger than {limit} bytes"}}'.encode()
    await send(
        {"type": "http.response.start", "status": 413, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": body})


def intake_policy(settings: RegistrySettings) -> IntakePolicy:
    return IntakePolicy(
        addresses=AddressPolicy(
            allow_loopback=settings.allow_loopback_servers, allow_link_local=settings.allow_link_local_servers
        ),
        allow_exec_plugins=settings.allow_exec_plugins,
        fingerprint_key=settings.fingerprint_key(),
    )


async def _migrate_when_reachable(engine: AsyncEngine) -> None:
    """The schema first; a database that is not up yet (a restart, compose starting everything
    at once) is waited for with back-off instead of crash-looping the registry."""
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


def create_app(settings: RegistrySettings, *, tokens: ApiTokens | None = None) -> FastAPI:
    tasks = ServiceTasks()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        encryptor = Encryptor(settings.encryption_keys())  # refuse to start without a usable key
        lease_proofs: LeaseProofs | None = None
        engine = create_engine(settings.registry_database_url)
        try:
            if settings.registry_migrate_on_start:
                await _migrate_when_reachable(engine)
            instance = settings.instance_id or f"{socket.gethostname()}-{os.getpid()}"
            bus = Bus(
                settings.nats_servers(), name=f"trainwatch-registry {instance}", auth=settings.nats_auth()
            )
            relay = OutboxRelay(engine=engine, bus=bus, poll_seconds=settings.registry_outbox_poll_seconds)
            policy = intake_policy(settings)
            expiry = ExpiryMonitor(engine, warning_days=settings.registry_credentials_warning_days)

            def on_commit() -> None:
                relay.wake()
                expiry.wake()

            registry = Registry(
                engine=engine,
                encryptor=encryptor,
                policy=policy,
                on_commit=on_commit,
                credentials_warning=timedelta(days=settings.registry_credentials_warning_days),
            )

            async def check(kubeconfig: SanitizedKubeconfig) -> ConnectivityReport:
                timeout = settings.registry_connect_timeout_seconds
                return await check_connectivity(kubeconfig, policy=policy.addresses, timeout_seconds=timeout)

            connectivity: ConnectivityCheck = check
            if settings.registry_watcher_reads_need_lease:
                lease_proofs = LeaseProofs(redis_client(settings), prefix=settings.redis_prefix)
            app.state.services = Services(
                settings=settings,
                registry=registry,
                check_connectivity=connectivity,
                lease_proofs=lease_proofs,
            )
            app.state.engine, app.state.bus = engine, bus

            tasks.start("registry-nats", bus.run)
            tasks.start("registry-loop-lag", measure_loop_lag)
            if settings.registry_outbox_relay_enabled:
                tasks.start("registry-outbox-relay", relay.run)
            tasks.start("registry-credentials-expiry", expiry.run)
            if settings.registry_health_consumer_enabled:
                tasks.start("registry-health-consumer", HealthConsumer(engine=engine, bus=bus).run)
            if settings.registry_import_dir is not None:
                try:
                    await import_directory(registry, settings.registry_import_dir)
                except FileNotFoundError as exc:
                    log.error("import folder missing", extra={"error": str(exc)})
            log.info("registry started", extra={"database": engine.dialect.name})
            yield
        finally:
            app.state.services = None
            await tasks.stop()  # newest first: the users of the bus before the bus itself
            if lease_proofs is not None:
                await lease_proofs.close()
            await engine.dispose()
            log.info("registry stopped")

    app = FastAPI(
        title="Trainwatch registry",
        version="1.0.0",
        description="Clusters under Trainwatch's management. Kubeconfigs go in, never come out "
        "(except to watchers, through /connection).",
        lifespan=lifespan,
        generate_unique_id_function=lambda route: route.name,  # operationIds: create_cluster, ...
    )
    app.state.tokens = tokens or ApiTokens()
    app.state.services = None
    app.state.tasks = tasks
    install_error_handlers(app)
    install_database_unavailable_handler(app, service="registry")
    app.include_router(clusters.router)

    async def database_ready() -> bool:
        async with app.state.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        return True

    def nats_ready() -> str:
        return OK if app.state.bus.connected else "disconnected"

    app.router.routes.extend(health_routes({"database": database_ready, "nats": nats_ready}, tasks=tasks))
    app.add_middleware(BodyLimit, max_bytes=settings.registry_max_request_bytes)
    return app
