"""Registry test fixtures: the app on a real database and a real nats-server, in-process over ASGI."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import nats
import pytest
from fastapi import FastAPI
from nats.js.errors import NotFoundError
from pydantic import SecretStr
from redis.asyncio import Redis
from registry_kubeconfigs import ADMIN, WATCHER
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_common.auth import ApiTokens
from trainwatch_common.leases import LEASE_PROOF_HEADER, LeaseManager, new_holder
from trainwatch_common.sql_engine import async_url
from trainwatch_registry.app import create_app
from trainwatch_registry.crypto import Encryptor
from trainwatch_registry.settings import RegistrySettings
from trainwatch_registry.tables import clusters, outbox

TOKENS = ApiTokens(
    admin_tokens=SecretStr("admin-token"),
    viewer_tokens=SecretStr("viewer-token"),
    watcher_tokens=SecretStr("watcher-token"),
)


@pytest.fixture(scope="session")
def encryption_key() -> str:
    return Encryptor.generate_key()


def make_settings(
    *, database_url: str, nats_url: str, encryption_key: str, **overrides: Any
) -> RegistrySettings:
    values: dict[str, Any] = {
        "registry_database_url": database_url,
        "nats_url": nats_url,
        "registry_encryption_keys": SecretStr(encryption_key),
        "allow_loopback_servers": False,
        "registry_outbox_poll_seconds": 0.2,
        "registry_connect_timeout_seconds": 3.0,
    }
    values.update(overrides)
    return RegistrySettings(_env_file=None, **values)  # type: ignore[call-arg]


@dataclass
class Harness:
    """A running registry plus the ways to look behind its API."""

    app: FastAPI
    client: httpx.AsyncClient
    settings: RegistrySettings
    nats_url: str

    @property
    def engine(self) -> AsyncEngine:
        engine: AsyncEngine = self.app.state.engine
        return engine

    async def cluster_rows(self) -> list[Any]:
        async with self.engine.connect() as conn:
            return list(await conn.execute(select(clusters)))

    async def outbox_rows(self) -> list[Any]:
        async with self.engine.connect() as conn:
            return list(await conn.execute(select(outbox).order_by(outbox.c.id)))

    async def watcher_headers(self, cluster_id: str, replica: str = "test-watcher") -> dict[str, str]:
        """A watcher's headers for reading ``cluster_id``'s connection: the watcher token and the
        value of a lease on the cluster, taken in the registry's Redis as a watcher would."""
        redis = Redis.from_url(self.settings.redis_url)
        try:
            leases = LeaseManager(redis, prefix=self.settings.redis_prefix)
            lease = await leases.acquire(cluster_id, new_holder(replica))
            assert lease is not None, f"someone else holds {cluster_id}'s lease"
        finally:
            await redis.aclose()
        return {**WATCHER, LEASE_PROOF_HEADER: lease.value}

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        response = await self.client.post("/v1/clusters", json=body, headers=ADMIN)
        assert response.status_code == 201, response.text
        result: dict[str, Any] = response.json()
        return result


@asynccontextmanager
async def running_registry(settings: RegistrySettings) -> AsyncIterator[Harness]:
    app = create_app(settings, tokens=TOKENS)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://registry") as client:
            yield Harness(app=app, client=client, settings=settings, nats_url=settings.nats_url)


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest) -> str:
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return async_url(str(request.getfixturevalue("postgres_url")))


@pytest.fixture
async def registry(
    sqlite_url: str, nats_url: str, redis_url: str, encryption_key: str
) -> AsyncIterator[Harness]:
    """The registry on SQLite (the embedded default) with a real nats-server and Redis."""
    settings = make_settings(
        database_url=sqlite_url, nats_url=nats_url, encryption_key=encryption_key, redis_url=redis_url
    )
    async with running_registry(settings) as harness:
        yield harness


@pytest.fixture
async def registry_on(
    database_url: str, nats_url: str, redis_url: str, encryption_key: str
) -> AsyncIterator[Harness]:
    """The registry on SQLite and on PostgreSQL (parametrized)."""
    settings = make_settings(
        database_url=database_url, nats_url=nats_url, encryption_key=encryption_key, redis_url=redis_url
    )
    async with running_registry(settings) as harness:
        yield harness


class Bus:
    """A test's own NATS client for looking at what the registry published."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.js = client.jetstream()

    async def stream_messages(self, stream: str = "CLUSTERS") -> int:
        try:
            info = await self.js.stream_info(stream)
        except NotFoundError:
            return 0
        return int(info.state.messages)

    async def cluster_events(self) -> list[Any]:
        """Every message in CLUSTERS, oldest first (an ephemeral ordered read)."""
        count = await self.stream_messages()
        messages = []
        for seq in range(1, count + 1):
            messages.append(await self.js.get_msg("CLUSTERS", seq))
        return messages

    async def kv_keys(self) -> list[str]:
        try:
            kv = await self.js.key_value("trainwatch_clusters")
            return list(await kv.keys())
        except Exception:  # no bucket or no keys: nats-py raises NoKeysError / NotFoundError
            return []


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    client = await nats.connect(nats_url)
    try:
        yield Bus(client)
    finally:
        await client.close()
