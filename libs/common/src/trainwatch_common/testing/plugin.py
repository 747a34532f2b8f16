"""The pytest plugin every Trainwatch test suite loads (``-p trainwatch_common.testing.plugin``).

Where a server comes from, in order of preference:
1. a URL in an environment variable (TRAINWATCH_TEST_NATS_URL, ..._REDIS_URL, ..._POSTGRES_URL);
   point these only at throwaway servers: tests create and delete streams, keys and databases;
2. a local server process on a free port with its own temp dir (the default);
3. testcontainers, when the binary is missing and a Docker engine answers (testing/containers.py).
Fault tests use the ``*_process`` fixtures, which always start their own process so they can
stop, kill and restart it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from trainwatch_common.observability.task_dump import await_chain
from trainwatch_common.testing.containers import container_url
from trainwatch_common.testing.servers import (
    ExternalServer,
    NatsCluster,
    NatsServer,
    PostgresServer,
    RedisSentinelGroup,
    RedisServer,
    ServerMissing,
    ServerProcess,
    docker_available,
    server_version,
)

_versions: dict[str, str] = {}


def _start(server: ServerProcess) -> ServerProcess:
    server.start()
    _versions.setdefault(server.name, server_version(server))
    return server


@contextlib.contextmanager
def _process_or_container(request: pytest.FixtureRequest, fixture: str, kind: str) -> Iterator[str]:
    """A local process of the server, or a container when the binary is missing and Docker answers."""
    try:
        server = request.getfixturevalue(fixture)
    except ServerMissing:
        if not docker_available():
            raise
        with container_url(kind) as url:
            yield url
        return
    yield server.url


# -- NATS -------------------------------------------------------------------------------------
@pytest.fixture
def nats_process(tmp_path: Path) -> Iterator[NatsServer]:
    """A nats-server with JetStream of this test's own, which the test may stop and restart."""
    server = NatsServer(workdir=tmp_path / "nats")
    server.workdir.mkdir()
    _start(server)
    yield server
    server.close()


@pytest.fixture
def nats_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A clean JetStream server's URL (a fresh process per test unless TRAINWATCH_TEST_NATS_URL is set)."""
    external = os.environ.get("TRAINWATCH_TEST_NATS_URL")
    if external:
        asyncio.run(_delete_all_streams(external))
        yield external
        return
    with _process_or_container(request, "nats_process", "nats") as url:
        yield url


@pytest.fixture
async def nats_cluster(tmp_path: Path) -> AsyncIterator[NatsCluster]:
    """A three-node JetStream cluster of real nats-server processes on loopback, its meta leader
    elected and every peer known (an R3 stream can be placed). The test may kill and start any node."""
    cluster = NatsCluster(tmp_path / "nats-cluster")
    try:
        await asyncio.get_running_loop().run_in_executor(None, cluster.start)
        _versions.setdefault("nats", server_version(cluster.nodes[0]))
        await _wait_for_meta_leader(cluster.url)
        yield cluster
    finally:
        cluster.close()


async def _wait_for_meta_leader(url: str, timeout: float = 30.0) -> None:
    import nats
    from nats.js.errors import APIError

    client = await nats.connect(url.split(","))
    try:
        js = client.jetstream(timeout=2)
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:  # a probe stream on every node: the meta leader is elected and knows all peers
                await js.add_stream(
                    name="TRAINWATCH_CLUSTER_PROBE", subjects=["trainwatch.probe"], num_replicas=3
                )
                await js.delete_stream("TRAINWATCH_CLUSTER_PROBE")
                return
            except (APIError, TimeoutError, nats.errors.Error):  # no meta leader or not all peers yet
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.2)
    finally:
        await client.close()


async def _delete_all_streams(url: str) -> None:
    import nats

    client = await nats.connect(url)
    try:
        js = client.jetstream()
        for info in await js.streams_info():
            if info.config.name:
                await js.delete_stream(info.config.name)
    finally:
        await client.close()


# -- Redis ------------------------------------------------------------------------------------
@pytest.fixture
def redis_process(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(workdir=tmp_path / "redis")
    server.workdir.mkdir()
    _start(server)
    yield server
    server.close()


@pytest.fixture
def redis_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A clean Redis database's URL."""
    external = os.environ.get("TRAINWATCH_TEST_REDIS_URL")
    if external:
        import redis

        client = redis.Redis.from_url(external)
        client.flushdb()
        client.close()
        yield external
        return
    with _process_or_container(request, "redis_process", "redis") as url:
        yield url


@pytest.fixture
async def redis_sentinel_group(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[RedisSentinelGroup]:
    """A Redis master, a replica and three sentinels (quorum 2) on loopback, the replica in sync
    and every sentinel knowing the replica and the other two. ``indirect`` parametrization gives
    the number of replicas (``@pytest.mark.parametrize("redis_sentinel_group", [2], indirect=True)``)
    or ``RedisSentinelGroup``'s keyword arguments as a dict (replicas, password, sentinel_password).
    The test may kill, stop (SIGSTOP) and start any process."""
    param = getattr(request, "param", 1)
    options = param if isinstance(param, dict) else {"replicas": param}
    # Its five ports are chosen free before any process binds one; another process may take one
    # meanwhile ("Address already in use"). Then the whole group starts again on new ports, since
    # each member's config names the master's.
    for attempt in range(3):
        group = RedisSentinelGroup(tmp_path / f"redis-sentinel-{attempt}", **options)
        try:
            # In the loop's executor: the processes die with the thread that started them (see servers.py).
            await asyncio.get_running_loop().run_in_executor(None, group.start)
            break
        except RuntimeError as exc:
            group.close()
            if "Address already in use" not in str(exc) or attempt == 2:
                raise
    try:
        _versions.setdefault("redis", server_version(group.first_master))
        yield group
    finally:
        group.close()


# -- PostgreSQL -------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer | ExternalServer]:
    external = os.environ.get("TRAINWATCH_TEST_POSTGRES_URL")
    if external:
        yield ExternalServer(external)
        return
    server = PostgresServer()  # its own dir under /tmp: the 'postgres' user cannot enter pytest's tmp
    try:
        _start(server)
    except ServerMissing:
        if not docker_available():
            raise
        with container_url("postgres") as url:
            yield ExternalServer(url)
        return
    yield server
    server.close()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer | ExternalServer) -> str:
    """A new, empty database on the session's PostgreSQL (a URL in the plain postgresql:// form)."""
    if isinstance(postgres_server, ExternalServer):
        return _create_external_database(postgres_server.url)
    return postgres_server.create_database(f"t_{uuid.uuid4().hex[:12]}")


def _create_external_database(url: str) -> str:
    import asyncpg

    name = f"t_{uuid.uuid4().hex[:12]}"

    async def create() -> None:
        connection = await asyncpg.connect(url)
        try:
            await connection.execute(f'CREATE DATABASE "{name}"')
        finally:
            await connection.close()

    asyncio.run(create())
    return url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture
def postgres_process() -> Iterator[PostgresServer]:
    """A PostgreSQL of this test's own, which the test may kill and restart."""
    server = PostgresServer()
    _start(server)
    yield server
    server.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """An SQLite database file in this test's temp dir (SQLAlchemy async URL)."""
    return f"sqlite+aiosqlite:///{tmp_path / 'trainwatch.db'}"


# -- leftover tasks ---------------------------------------------------------------------------
@pytest.fixture(autouse=True)
async def _no_leftover_tasks() -> AsyncIterator[None]:
    """Fail a test that leaves tasks running, named or not: every task has an owner that stops it.

    An unnamed ``Task-N`` is the likeliest leak (a bare ``create_task``, an async generator never
    closed), so it is reported by its coroutine's name. Tasks a library runs for itself are its
    own business: nats-py's heartbeat checks of a subscription cut short by a cancellation (its
    ``kv.keys()`` does not unsubscribe then) end by themselves once their connection is closed."""
    before = asyncio.all_tasks()
    yield
    for _ in range(3):  # let cancelled tasks finish their clean-up
        await asyncio.sleep(0)
    leftovers = [
        task
        for task in asyncio.all_tasks() - before
        if task is not asyncio.current_task() and not task.done() and not _library_task(task)
    ]
    # Where each one waits, taken before the cancellation unwinds it: a test cut short by its
    # timeout shows here the await that never ended (the timeout's own stack is the event loop's).
    waits = "".join(
        f"\n{_task_label(task)} waits at:" + "".join(f"\n  {where}" for where in await_chain(task.get_coro()))
        for task in sorted(leftovers, key=_task_label)
    )
    for task in leftovers:
        task.cancel()
    if leftovers:
        pytest.fail(f"test left tasks running: {sorted(_task_label(t) for t in leftovers)}{waits}")


def _library_task(task: asyncio.Task[Any]) -> bool:
    code = getattr(task.get_coro(), "cr_code", None)
    return code is not None and f"{os.sep}site-packages{os.sep}" in code.co_filename


def _task_label(task: asyncio.Task[Any]) -> str:
    coro = task.get_coro()
    where = getattr(coro, "__qualname__", type(coro).__name__)
    return f"{task.get_name()} ({where})"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _versions:
        terminalreporter.write_sep("-", "real servers used")
        for name, version in sorted(_versions.items()):
            terminalreporter.write_line(f"{name}: {version}")
