"""Fixtures of the watcher's tests (the helpers live in ``watcher_harness``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client as NatsClient
from redis.asyncio import Redis
from watcher_harness import FakeRegistry, HealthEvents, JobEvents, RunningWatcher, make_settings

import kubesim
from trainwatch_common.streams import ensure_streams


@pytest.fixture
async def sim() -> AsyncIterator[kubesim.Simulator]:
    async with kubesim.Simulator() as simulator:
        yield simulator


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[NatsClient]:
    client = await nats.connect(nats_url)
    await ensure_streams(client.jetstream())
    yield client
    await client.close()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def registry(nc: NatsClient) -> FakeRegistry:
    return FakeRegistry(nc)


@pytest.fixture
async def job_events(nc: NatsClient) -> AsyncIterator[JobEvents]:
    events = JobEvents(nc)
    await events.start()
    yield events
    await events.stop()


@pytest.fixture
async def health_events(nc: NatsClient) -> AsyncIterator[HealthEvents]:
    events = HealthEvents(nc)
    await events.start()
    yield events
    await events.stop()


@pytest.fixture
async def watcher(nats_url: str, redis_url: str, registry: FakeRegistry) -> AsyncIterator[RunningWatcher]:
    running = RunningWatcher(make_settings(nats_url, redis_url), registry)
    yield running
    await running.stop()
