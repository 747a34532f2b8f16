"""Replica heartbeats in one Redis sorted set, on real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from trainwatch_common.testing import eventually
from trainwatch_watcher.membership import Membership


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


async def test_heartbeats_list_the_live_replicas_and_a_silent_one_is_gone_after_its_ttl(redis: Redis) -> None:
    steady = Membership(redis, replica_id="steady", ttl_ms=5000)
    silent = Membership(redis, replica_id="silent", ttl_ms=300)
    await silent.heartbeat()
    assert await steady.heartbeat() == ["silent", "steady"]

    async def silent_gone() -> bool:
        return await steady.heartbeat() == ["steady"]

    await eventually(silent_gone, timeout=2, message="the silent replica expires")
    assert await steady.live() == ["steady"]


async def test_a_replica_that_leaves_is_gone_at_once(redis: Redis) -> None:
    first = Membership(redis, replica_id="a")
    second = Membership(redis, replica_id="b")
    await first.heartbeat()
    await second.heartbeat()
    await first.leave()
    assert await second.live() == ["b"]


async def test_prefixes_keep_fleets_apart_and_ids_with_the_lease_separator_are_refused(redis: Redis) -> None:
    await Membership(redis, replica_id="a", prefix="one").heartbeat()
    assert await Membership(redis, replica_id="b", prefix="two").live() == []
    with pytest.raises(ValueError, match="may not contain"):
        Membership(redis, replica_id="bad|id")
