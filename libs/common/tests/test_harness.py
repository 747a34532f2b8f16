"""The test harness itself: real servers that start, answer, stop and come back."""

import asyncpg
import nats
import pytest
from redis.asyncio import Redis

from trainwatch_common.testing import NatsServer, PostgresServer, RedisServer, eventually
from trainwatch_common.testing.servers import ServerMissing, nats_server_binary


async def test_postgres_database_is_real_and_fresh(postgres_url: str) -> None:
    connection = await asyncpg.connect(postgres_url)
    try:
        version = await connection.fetchval("SHOW server_version")
        assert int(version.split(".")[0]) >= 13
        tables = await connection.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
        assert tables == 0
    finally:
        await connection.close()


async def test_postgres_can_be_killed_and_restarted(postgres_process: PostgresServer) -> None:
    connection = await asyncpg.connect(postgres_process.url)
    await connection.execute("CREATE TABLE kept (id int)")
    await connection.execute("INSERT INTO kept VALUES (1)")
    await connection.close()
    postgres_process.kill()
    with pytest.raises(OSError):
        await asyncpg.connect(postgres_process.url, timeout=2)
    postgres_process.start()
    connection = await asyncpg.connect(postgres_process.url)
    try:
        assert await connection.fetchval("SELECT count(*) FROM kept") == 1
    finally:
        await connection.close()


async def test_nats_restart_keeps_jetstream_data_and_clients_reconnect(nats_process: NatsServer) -> None:
    client = await nats.connect(nats_process.url, max_reconnect_attempts=-1, reconnect_time_wait=0.05)
    try:
        js = client.jetstream()
        await js.add_stream(name="S", subjects=["s.>"])
        await js.publish("s.1", b"kept")
        nats_process.restart()
        ack = await eventually(
            lambda: js.publish("s.2", b"after"), timeout=10, message="publish after restart"
        )
        assert ack.seq == 2
    finally:
        await client.close()


async def test_redis_restart_keeps_data(redis_process: RedisServer) -> None:
    client = Redis.from_url(redis_process.url)
    await client.set("k", "v")
    await client.aclose()
    redis_process.kill()  # a crash: the append-only file still has the write
    redis_process.start()
    client = Redis.from_url(redis_process.url)
    try:
        assert await client.get("k") == b"v"
    finally:
        await client.aclose()


def test_sqlite_url_points_into_the_test_dir(sqlite_url: str, tmp_path: object) -> None:
    assert sqlite_url.startswith("sqlite+aiosqlite:///")
    assert str(tmp_path) in sqlite_url


def test_a_missing_binary_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sysconfig.get_path", lambda _name: "/nonexistent")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ServerMissing, match="uv sync"):
        nats_server_binary()
