"""``redis_client``: one way from settings to Redis, by URL or through Sentinel (issue 17, item 4)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from pydantic import SecretStr
from redis.exceptions import RedisError

from trainwatch_common.redis_connection import describe, redis_client, sentinel_addresses
from trainwatch_common.settings import ServiceSettings
from trainwatch_common.testing import RedisSentinelGroup, eventually
from trainwatch_common.testing.pki import throwaway_pki


async def test_a_url_connects_as_before_and_a_blocking_client_waits_for_a_connection(redis_url: str) -> None:
    client = redis_client(ServiceSettings(redis_url=redis_url), max_connections=2, blocking=True)
    try:
        # 20 blocking calls on 2 connections: each waits for one instead of MaxConnectionsError.
        await asyncio.gather(*(client.blpop(["nothing"], timeout=0.01) for _ in range(20)))
        await client.set("k", "v")
        assert await client.get("k") == b"v"
    finally:
        await client.aclose()


async def test_the_sentinel_client_follows_a_failover_to_the_promoted_replica(
    redis_sentinel_group: RedisSentinelGroup,
) -> None:
    group = redis_sentinel_group
    settings = ServiceSettings(redis_sentinels=group.sentinels, redis_url="redis://127.0.0.1:1/0")
    client = redis_client(
        settings, max_connections=2, blocking=True, socket_timeout=1, socket_connect_timeout=1
    )
    try:
        await asyncio.gather(*(client.incr("n") for _ in range(20)))  # the blocking Sentinel pool
        assert int(await client.get("n")) == 20
        old_port = group.first_master.port
        assert await asyncio.to_thread(group.master_port) == old_port
        await asyncio.to_thread(group.first_master.kill)
        killed_at = time.monotonic()

        async def writes_again() -> bool:
            await client.incr("n")
            return True

        await eventually(writes_again, timeout=30, interval=0.1, message="writes on the promoted replica")
        print(f"sentinel failover: writes again {time.monotonic() - killed_at:.2f}s after kill -9")
        assert await asyncio.to_thread(group.master_port) == group.replicas[0].port
        assert int(await client.get("n")) >= 21  # what the replica had, plus the new write
    finally:
        await client.aclose()


def test_sentinel_addresses_take_a_default_port() -> None:
    settings = ServiceSettings(redis_sentinels="s1:26380, s2 ,[::1]:5")
    assert sentinel_addresses(settings) == [("s1", 26380), ("s2", 26379), ("::1", 5)]


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (ServiceSettings(redis_url="redis://:hunter2@r:6379/0"), "redis://:***@r:6379/0"),
        (ServiceSettings(redis_url="rediss://u:hunter2@r/1"), "rediss://u:***@r/1"),
        (ServiceSettings(redis_url="redis://r:6379/0"), "redis://r:6379/0"),
        (
            ServiceSettings(
                redis_sentinels="s1:26379,s2:26379",
                redis_password=SecretStr("hunter2"),
                redis_sentinel_password=SecretStr("hunter2"),
            ),
            "sentinel master 'trainwatch' via s1:26379,s2:26379",
        ),
    ],
)
def test_what_may_be_logged_never_holds_a_password(settings: ServiceSettings, expected: str) -> None:
    assert describe(settings) == expected
    assert "hunter2" not in repr(settings.redis_password) + repr(settings.redis_sentinel_password)


@pytest.mark.parametrize(
    "redis_sentinel_group",
    [{"password": "node-secret", "sentinel_password": "sentinel-secret"}],
    indirect=True,
)
async def test_passwords_for_the_nodes_and_for_the_sentinels(
    redis_sentinel_group: RedisSentinelGroup,
) -> None:
    sentinels = redis_sentinel_group.sentinels
    both = ServiceSettings(
        redis_sentinels=sentinels,
        redis_password=SecretStr("node-secret"),
        redis_sentinel_password=SecretStr("sentinel-secret"),
    )
    client = redis_client(both)
    try:
        await client.set("k", "v")
        assert await client.get("k") == b"v"
    finally:
        await client.aclose()
    for wrong in (
        ServiceSettings(redis_sentinels=sentinels, redis_sentinel_password=SecretStr("sentinel-secret")),
        ServiceSettings(redis_sentinels=sentinels, redis_password=SecretStr("node-secret")),
    ):
        client = redis_client(wrong)
        try:
            with pytest.raises(RedisError):  # the node refuses (NOAUTH), or no sentinel answers
                await client.set("k", "v")
        finally:
            await client.aclose()


@pytest.fixture
def redis_pki(tmp_path: Path) -> dict[str, str]:
    directory = tmp_path / "pki"
    directory.mkdir()
    return throwaway_pki(directory, server="redis")


async def test_tls_to_the_sentinels_and_the_master_with_the_ca(
    tmp_path: Path, redis_pki: dict[str, str]
) -> None:
    group = RedisSentinelGroup(tmp_path / "redis-tls", replicas=1, tls=redis_pki)
    try:
        await asyncio.get_running_loop().run_in_executor(None, group.start)
        with_ca = ServiceSettings(redis_sentinels=group.sentinels, redis_tls_ca_file=redis_pki["ca"])
        client = redis_client(with_ca, socket_timeout=2, socket_connect_timeout=2)
        try:
            await client.set("k", "v")
            assert await client.get("k") == b"v"
        finally:
            await client.aclose()
        plain = redis_client(ServiceSettings(redis_sentinels=group.sentinels), socket_timeout=0.5)
        try:
            with pytest.raises(RedisError):  # no sentinel answers a client without TLS
                await plain.set("k", "v")
        finally:
            await plain.aclose()
        # A rediss:// URL trusts the same CA file.
        url = ServiceSettings(redis_url=group.first_master.url, redis_tls_ca_file=redis_pki["ca"])
        assert url.redis_url.startswith("rediss://")
        direct = redis_client(url, socket_timeout=2)
        try:
            assert await direct.get("k") == b"v"
        finally:
            await direct.aclose()
    finally:
        await asyncio.get_running_loop().run_in_executor(None, group.close)
