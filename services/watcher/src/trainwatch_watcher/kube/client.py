"""One cluster's HTTP access: kubeconfig → TLS context + credentials → one aiohttp session.

Kubeconfigs are resolved by the ``kubernetes`` package's own loader (``KubeConfigLoader``), so
the server, CA, client certificate, token and basic-auth fields mean exactly what kubectl
makes of them. The transport is aiohttp + orjson, chosen by measurement (see the README):
one session per cluster, with an SSLContext trusting only that cluster's CA, TCP keepalive on
every socket and a per-read timeout on watch streams so a silent partition is noticed.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import contextlib
import socket
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import yaml

from trainwatch_watcher import errors
from trainwatch_watcher.settings import WatchTimings

# A Status body is read only this far: enough for the message, never a flood.
_MAX_ERROR_BODY = 64 * 1024

# asyncio's TLS protocol gives every connection a 256 KiB read buffer (measured: 362 MB of RSS
# for 1,000 idle TLS streams). A TLS record is at most 16 KiB, so 16 KiB loses nothing but the
# memory; without this a watcher holding 4,000 idle watches would need well over 1 GB.
TLS_READ_BUFFER = 16 * 1024
# But the protocol reads at most its buffer's size per turn of the event loop, and each turn costs
# about as much as decoding a few events: a watch stream that is behind (its reads fill the
# buffer) gets a buffer this large until it has caught up. Measured on a 3 KB-per-event stream:
# 7 us of reading per event with 16 KiB reads, 4 us with 256 KiB ones. At most this many streams
# at once (16 MB), so thousands of streams catching up together (a restart) stay within memory.
TLS_BUSY_READ_BUFFER = 256 * 1024
TLS_BUSY_STREAMS_MAX = 64


def shrink_tls_read_buffer() -> None:
    if asyncio.sslproto.SSLProtocol.max_size > TLS_READ_BUFFER:
        asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER


@dataclass(frozen=True, slots=True)
class ClusterAccess:
    """What it takes to talk to one API server. ``authorization`` is a secret: kept out of repr."""

    server: str
    ssl_context: ssl.SSLContext | None
    authorization: str | None = field(default=None, repr=False)
    tls_server_name: str | None = None


def load_kubeconfig(text: str, *, context: str | None = None) -> ClusterAccess:
    """Resolve a kubeconfig (YAML or JSON) with the ``kubernetes`` package's loader."""
    from kubernetes.client import Configuration
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import KubeConfigLoader

    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise errors.InvalidKubeconfig(f"kubeconfig is not YAML: {type(exc).__name__}") from None
    if not isinstance(document, dict):
        raise errors.InvalidKubeconfig("kubeconfig is not a mapping")
    configuration = Configuration()
    try:
        KubeConfigLoader(config_dict=document, active_context=context).load_and_set(  # type: ignore[no-untyped-call]
            configuration
        )
    except (ConfigException, ValueError, KeyError, TypeError) as exc:
        # The loader's messages name fields, not secrets; keep only the exception type to be sure.
        raise errors.InvalidKubeconfig(f"kubeconfig rejected by the loader ({type(exc).__name__})") from None
    server = (configuration.host or "").rstrip("/")
    if not server.startswith(("https://", "http://")):
        raise errors.InvalidKubeconfig("kubeconfig has no http(s) server")
    return ClusterAccess(
        server=server,
        ssl_context=_ssl_context(configuration) if server.startswith("https://") else None,
        authorization=configuration.api_key.get("BearerToken") or None,
        tls_server_name=getattr(configuration, "tls_server_name", None) or None,
    )


def _ssl_context(configuration: Any) -> ssl.SSLContext:
    """Trust only the cluster's CA (or the system store when the kubeconfig names none)."""
    try:
        if configuration.ssl_ca_cert:
            context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
        else:
            context = ssl.create_default_context()
        if configuration.cert_file and configuration.key_file:
            context.load_cert_chain(configuration.cert_file, configuration.key_file)
    except (ssl.SSLError, OSError) as exc:
        raise errors.InvalidKubeconfig(f"bad certificate data in kubeconfig ({type(exc).__name__})") from None
    if configuration.verify_ssl is False:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _keepalive_socket_factory(idle: int) -> Any:
    """TCP keepalive on every connection, so a dead peer is noticed even between events."""

    def factory(addr_info: tuple[Any, ...]) -> socket.socket:
        family, type_, proto, _, _ = addr_info
        sock = socket.socket(family=family, type=type_, proto=proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, idle // 3))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
        return sock

    return factory


class KubeClient:
    """GET requests and watch streams against one API server, over one session."""

    def __init__(self, access: ClusterAccess, *, timings: WatchTimings) -> None:
        self._access = access
        self._timings = timings
        shrink_tls_read_buffer()
        headers = {"Accept": "application/json", "User-Agent": "trainwatch-watcher"}
        if access.authorization:
            headers["Authorization"] = access.authorization
        connector = aiohttp.TCPConnector(
            ssl=access.ssl_context if access.ssl_context is not None else False,
            limit=0,  # one stream per (kind, namespace) is held open; never queue behind them
            socket_factory=_keepalive_socket_factory(timings.tcp_keepalive_idle),
        )
        self._session = aiohttp.ClientSession(
            base_url=None,
            headers=headers,
            connector=connector,
            json_serialize=lambda o: orjson.dumps(o).decode(),
        )

    @property
    def server(self) -> str:
        return self._access.server

    async def close(self) -> None:
        await self._session.close()

    def _request_kwargs(self) -> dict[str, Any]:
        if self._access.tls_server_name:
            return {"server_hostname": self._access.tls_server_name}
        return {}

    async def get_json(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        """GET a JSON object; non-2xx answers become the matching ``errors`` class."""
        timeout = aiohttp.ClientTimeout(
            total=self._timings.request_timeout, sock_connect=self._timings.connect_timeout
        )
        try:
            async with self._session.get(
                self._access.server + path, params=params, timeout=timeout, **self._request_kwargs()
            ) as response:
                if response.status >= 300:
                    raise await _status_error(response, path)
                body = await response.read()
        except (aiohttp.ClientError, TimeoutError, ssl.SSLError, OSError) as exc:
            raise errors.Unreachable(f"GET {path}: {_describe(exc)}") from exc
        value = orjson.loads(body)
        if not isinstance(value, dict):
            raise errors.ApiError(f"GET {path}: answer is not a JSON object", status=200)
        return value

    @contextlib.asynccontextmanager
    async def stream_lines(
        self, path: str, params: Mapping[str, str], *, read_timeout: float | None = None
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """Open a watch stream and iterate its newline-delimited JSON lines.

        Every read must bring data within ``read_timeout`` (default: the settings'); a silence
        longer than that raises ``WatchStalled``. The caller picks it longer than the watch's
        ``timeoutSeconds``: an idle watch on a real server may get no bookmark at all.
        """
        read_timeout = read_timeout or self._timings.read_timeout
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self._timings.connect_timeout, sock_read=read_timeout
        )
        try:
            async with self._session.get(
                self._access.server + path, params=params, timeout=timeout, **self._request_kwargs()
            ) as response:
                if response.status >= 300:
                    raise await _status_error(response, path)
                lines = _lines(response, path)
                try:
                    yield lines
                finally:
                    await lines.aclose()  # its clean-up now, not whenever the collector gets to it
        except errors.WatcherError:
            raise
        except aiohttp.ServerTimeoutError as exc:
            raise errors.WatchStalled(f"watch {path}: no data for {read_timeout:g}s") from exc
        except (aiohttp.ClientError, TimeoutError, ssl.SSLError, OSError) as exc:
            raise errors.Unreachable(f"watch {path}: {_describe(exc)}") from exc


async def _lines(response: aiohttp.ClientResponse, path: str) -> AsyncGenerator[bytes, None]:
    """Split the body into lines ourselves: aiohttp's readline refuses lines over 128 KB."""
    read_buffer = _ReadBufferSizer(response)
    buffer = b""  # the start of a line not ended yet
    try:
        while True:
            chunk = await response.content.readany()
            if not chunk:
                break
            read_buffer.observe(len(chunk))
            # Split the chunk, not buffer + chunk: a busy stream's chunks are 256 KiB, and the
            # unfinished line is all that needs joining.
            lines = chunk.split(b"\n")
            lines[0] = buffer + lines[0]
            buffer = lines.pop()
            for line in lines:
                if line:
                    yield line
    finally:
        read_buffer.shrink()  # a kept-alive connection goes back to the pool with the small one
    if buffer.strip():
        yield buffer


class _ReadBufferSizer:
    """Grows the TLS read buffer of a stream that is behind, shrinks it once it has caught up.

    ``readany`` returns everything read since the last call: a chunk of at least the idle
    buffer's size means the reads fill the buffer (more is waiting in the socket); a smaller one
    means the stream has caught up, so its memory goes back to 16 KiB. asyncio's TLS protocol
    (3.11+) sizes each read by its ``max_size`` and grows its buffer to it on the next read;
    shrinking replaces the buffer. A transport without that protocol (plain HTTP) is left alone.
    """

    busy_streams = 0  # in this process; at most TLS_BUSY_STREAMS_MAX

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        connection = response.connection
        transport = connection.transport if connection is not None else None
        protocol = getattr(transport, "_ssl_protocol", None)
        self._protocol = protocol if isinstance(protocol, asyncio.sslproto.SSLProtocol) else None
        self._busy = False

    def observe(self, nbytes: int) -> None:
        if nbytes < TLS_READ_BUFFER:
            self.shrink()
        elif not self._busy and self._protocol is not None and self.busy_streams < TLS_BUSY_STREAMS_MAX:
            self._busy = True
            _ReadBufferSizer.busy_streams += 1
            self._protocol.max_size = TLS_BUSY_READ_BUFFER  # type: ignore[misc]

    def shrink(self) -> None:
        if self._busy and self._protocol is not None:
            self._busy = False
            _ReadBufferSizer.busy_streams -= 1
            self._protocol.max_size = TLS_READ_BUFFER  # type: ignore[misc]
            self._protocol._ssl_buffer = bytearray(TLS_READ_BUFFER)  # type: ignore[attr-defined]
            self._protocol._ssl_buffer_view = memoryview(self._protocol._ssl_buffer)  # type: ignore[attr-defined]


async def _status_error(response: aiohttp.ClientResponse, path: str) -> errors.WatcherError:
    message = ""
    with contextlib.suppress(Exception):
        body = await response.content.read(_MAX_ERROR_BODY)
        status = orjson.loads(body)
        if isinstance(status, dict) and isinstance(status.get("message"), str):
            message = status["message"][:300]
    return error_for_status(response.status, f"{path}: HTTP {response.status} {message}".rstrip())


def error_for_status(status: int, message: str) -> errors.WatcherError:
    if status in (401, 403):
        return errors.Unauthorized(message, status=status)
    if status == 404:
        return errors.KindNotServed(message)
    if status == 410:
        return errors.WatchExpired(message)
    if status == 429:
        return errors.StorageInitializing(message)
    if status >= 500:
        return errors.Unreachable(message)
    return errors.ApiError(message, status=status)


def _describe(exc: BaseException) -> str:
    """A short cause without URLs' query strings or any header."""
    text = str(exc).split("?")[0]
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__
