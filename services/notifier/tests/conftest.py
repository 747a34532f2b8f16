"""Fixtures: JetStream and Redis clients, the local Feishu sink, a rules file writer."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from notifier_chat_sinks import ChatSinks
from redis.asyncio import Redis

from trainwatch_notifier.sink import FeishuSink


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[NATS]:
    client = await nats.connect(nats_url)
    yield client
    await client.close()


@pytest.fixture
def js(nc: NATS) -> JetStreamContext:
    return nc.jetstream()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def feishu_sink() -> AsyncIterator[FeishuSink]:
    sink = FeishuSink(secret="demo")
    await sink.start()
    yield sink
    await sink.stop()


@pytest.fixture
def rules_path(tmp_path: Path) -> Callable[[str], Path]:
    path = tmp_path / "rules.yaml"

    def write(text: str) -> Path:
        path.write_text(text)
        return path

    return write


@pytest.fixture
async def sinks() -> AsyncIterator[ChatSinks]:
    """Local DingTalk, WeCom, Slack and webhook receivers."""
    servers = ChatSinks()
    await servers.start()
    yield servers
    await servers.stop()
