"""The one place a service's settings become a Redis client: a URL, or a master found through Sentinel.

With ``TRAINWATCH_REDIS_SENTINELS`` empty (the default) the client connects to
``TRAINWATCH_REDIS_URL``, exactly as before. With it set (``host:port,host:port,...``), the client
asks those sentinels for the current master of ``TRAINWATCH_REDIS_SENTINEL_MASTER`` before every
new connection; after a failover the connections to the old master fail, and the next ones go to
the master the sentinels promoted (redis-py's ``SentinelConnectionPool``; a demoted master that
answers ``READONLY`` is dropped the same way).

Passwords are passed as connection options, never put in a URL or a log line: ``describe`` is
what may be logged.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool

from trainwatch_common.settings import ServiceSettings


class _SentinelBlockingConnectionPool(SentinelConnectionPool, BlockingConnectionPool):
    """A Sentinel pool that makes a caller wait for a free connection instead of failing with
    ``MaxConnectionsError`` (what ``BlockingConnectionPool`` does for a URL): thousands of
    informers share a bounded number of connections."""


class _SentinelRedis(Redis):
    """A client of the Sentinel-managed master that also closes its connections to the sentinels."""

    sentinel_manager: Sentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        if self.sentinel_manager is not None:
            await self.sentinel_manager.aclose()


def sentinel_addresses(settings: ServiceSettings) -> list[tuple[str, int]]:
    """``TRAINWATCH_REDIS_SENTINELS`` as (host, port) pairs; a port left out is Sentinel's 26379."""
    addresses = []
    for item in settings.redis_sentinels.split(","):
        item = item.strip()
        if not item:
            continue
        host, separator, port = item.rpartition(":")
        if not separator:
            host, port = item, "26379"
        addresses.append((host.strip("[]"), int(port)))
    return addresses


def redis_client(
    settings: ServiceSettings,
    *,
    max_connections: int = 10,
    blocking: bool = False,
    **options: Any,
) -> Redis:
    """A client of the Redis the settings name. ``blocking``: callers wait for a free connection
    when all ``max_connections`` are in use. ``options`` are connection options (timeouts, ...).

    ``aclose()`` on the client closes its pool (and its sentinel connections)."""
    sentinels = sentinel_addresses(settings)
    if not sentinels:
        # TLS here is a rediss:// URL; the CA file, if set, is the one it trusts.
        connection = _credentials(settings, tls=settings.redis_url.startswith("rediss://")) | options
        pool_class = BlockingConnectionPool if blocking else ConnectionPool
        pool = pool_class.from_url(settings.redis_url, max_connections=max_connections, **connection)
        return Redis.from_pool(pool)
    connection = _credentials(settings, tls=True) | options
    if settings.redis_tls_ca_file:
        connection["ssl"] = True  # SentinelConnectionPool: SSL connections to the master
    sentinel_options = {k: v for k, v in options.items() if k.startswith("socket_")}
    if settings.redis_sentinel_password.get_secret_value():
        sentinel_options["password"] = settings.redis_sentinel_password.get_secret_value()
        if settings.redis_sentinel_username:
            sentinel_options["username"] = settings.redis_sentinel_username
    if settings.redis_tls_ca_file:
        sentinel_options |= _tls(settings) | {"ssl": True}
    sentinel = Sentinel(sentinels, sentinel_kwargs=sentinel_options)  # type: ignore[no-untyped-call]
    client = sentinel.master_for(
        settings.redis_sentinel_master,
        redis_class=_SentinelRedis,
        connection_pool_class=_SentinelBlockingConnectionPool if blocking else SentinelConnectionPool,
        max_connections=max_connections,
        db=settings.redis_db,
        **connection,
    )
    assert isinstance(client, _SentinelRedis)
    client.sentinel_manager = sentinel
    return client


def _credentials(settings: ServiceSettings, *, tls: bool) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if settings.redis_password.get_secret_value():
        options["password"] = settings.redis_password.get_secret_value()
        if settings.redis_username:
            options["username"] = settings.redis_username
    return options | (_tls(settings) if tls else {})


def _tls(settings: ServiceSettings) -> dict[str, Any]:
    if not settings.redis_tls_ca_file:
        return {}
    return {"ssl_ca_certs": settings.redis_tls_ca_file, "ssl_cert_reqs": "required"}


def uses_sentinel(settings: ServiceSettings) -> bool:
    return bool(sentinel_addresses(settings))


def describe(settings: ServiceSettings) -> str:
    """Where the client connects, for logs: no password, even one written into the URL."""
    sentinels = sentinel_addresses(settings)
    if sentinels:
        where = ",".join(f"{host}:{port}" for host, port in sentinels)
        return f"sentinel master {settings.redis_sentinel_master!r} via {where}"
    parts = urlsplit(settings.redis_url)
    if parts.password is None:
        return settings.redis_url
    user = f"{parts.username}:" if parts.username else ":"
    host = parts.hostname or ""
    netloc = f"{user}***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))
