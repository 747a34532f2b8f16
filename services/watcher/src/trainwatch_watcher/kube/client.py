"""One cluster's HTTP access: kubeconfig → TLS context + credentials → one aiohttp session.

Kubeconfigs are read by the one safe kubeconfig parser (``trainwatch_common.kubeconfig_yaml``)
and resolved by the ``kubernetes`` package's own loader (``KubeConfigLoader``), so the server,
token and basic-auth fields mean exactly what kubectl makes of them. Inline TLS material (CA,
client certificate and key) is taken out before the loader sees it, because the loader writes
it to files in /tmp that outlive the cluster: here it stays in memory (see ``_tls_material``).
Every connection is checked against the server address policy on the address it resolves to.
The transport is aiohttp + orjson, chosen by measurement (see the README):
one session per cluster, with an SSLContext trusting only that cluster's CA, TCP keepalive on
every socket and a per-read timeout on watch streams so a silent partition is noticed.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import atexit
import base64
import binascii
import contextlib
import copy
import os
import shutil
import socket
import ssl
import tempfile
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
from aiohttp.abc import AbstractResolver, ResolveResult

from trainwatch_common.addresses import (
    AddressPolicy,
    AddressRefused,
    address_problem,
    host_problem,
    parse_host_ip,
)
from trainwatch_common.kubeconfig_yaml import DocumentRefused, load_mapping
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


@dataclass(frozen=True, slots=True)
class _TlsMaterial:
    """The inline PEM of the chosen cluster and user, decoded, held in memory only."""

    ca_pem: bytes | None = field(default=None, repr=False)
    cert_pem: bytes | None = field(default=None, repr=False)
    key_pem: bytes | None = field(default=None, repr=False)


def load_kubeconfig(text: str, *, context: str | None = None) -> ClusterAccess:
    """Resolve a kubeconfig (YAML or JSON) with the ``kubernetes`` package's loader."""
    from kubernetes.client import Configuration
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import KubeConfigLoader

    try:
        document = load_mapping(text)
    except DocumentRefused as exc:
        raise errors.InvalidKubeconfig(f"kubeconfig refused ({exc.code})") from None
    document, material = _tls_material(document, context)
    configuration = Configuration()
    try:
        KubeConfigLoader(  # type: ignore[no-untyped-call]
            config_dict=document, active_context=context, temp_file_path=str(_loader_directory())
        ).load_and_set(configuration)
    except (ConfigException, ValueError, KeyError, TypeError) as exc:
        # The loader's messages name fields, not secrets; keep only the exception type to be sure.
        raise errors.InvalidKubeconfig(f"kubeconfig rejected by the loader ({type(exc).__name__})") from None
    server = (configuration.host or "").rstrip("/")
    if not server.startswith(("https://", "http://")):
        raise errors.InvalidKubeconfig("kubeconfig has no http(s) server")
    return ClusterAccess(
        server=server,
        ssl_context=_ssl_context(configuration, material) if server.startswith("https://") else None,
        authorization=configuration.api_key.get("BearerToken") or None,
        tls_server_name=getattr(configuration, "tls_server_name", None) or None,
    )


def _named(document: dict[str, Any], section: str, name: Any) -> dict[str, Any] | None:
    for entry in document.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            return entry
    return None


def _tls_material(document: dict[str, Any], context: str | None) -> tuple[dict[str, Any], _TlsMaterial]:
    """Take the chosen context's inline CA / client certificate / key out of the document.

    The ``kubernetes`` loader writes every ``*-data`` field to a ``mkstemp`` file in /tmp and
    deletes it only at interpreter exit (never when the cluster goes, never after a crash), so
    it is given a copy without them. As in kubectl, ``*-data`` wins over the file field.
    """
    document = copy.deepcopy(document)
    chosen = _named(document, "contexts", context or document.get("current-context"))
    body = chosen.get("context") if chosen else None
    if not isinstance(body, dict):
        return document, _TlsMaterial()  # the loader says what is wrong
    cluster_entry = _named(document, "clusters", body.get("cluster"))
    user_entry = _named(document, "users", body.get("user"))
    cluster = cluster_entry.get("cluster") if cluster_entry else None
    user = user_entry.get("user") if user_entry else None

    def take(section: Any, data_key: str, file_key: str) -> bytes | None:
        if not isinstance(section, dict) or data_key not in section:
            return None
        section.pop(file_key, None)
        value = section.pop(data_key)
        try:
            return base64.b64decode("".join(str(value).split()), validate=True)
        except (binascii.Error, ValueError):
            raise errors.InvalidKubeconfig(f"kubeconfig {data_key} is not base64") from None

    material = _TlsMaterial(
        ca_pem=take(cluster, "certificate-authority-data", "certificate-authority"),
        cert_pem=take(user, "client-certificate-data", "client-certificate"),
        key_pem=take(user, "client-key-data", "client-key"),
    )
    return document, material


def _ssl_context(configuration: Any, material: _TlsMaterial) -> ssl.SSLContext:
    """Trust only the cluster's CA (or the system store when the kubeconfig names none)."""
    try:
        if material.ca_pem is not None:
            context = ssl.create_default_context(cadata=material.ca_pem.decode("ascii"))
        elif configuration.ssl_ca_cert:
            context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
        else:
            context = ssl.create_default_context()
        if material.cert_pem is not None and material.key_pem is not None:
            _load_cert_chain_in_memory(context, material.cert_pem, material.key_pem)
        elif configuration.cert_file and configuration.key_file:
            # A file the kubeconfig names, or what an exec plugin returned (which the loader wrote
            # into our private directory: removed as soon as it is loaded).
            try:
                context.load_cert_chain(configuration.cert_file, configuration.key_file)
            finally:
                _forget_loader_files(configuration.cert_file, configuration.key_file)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise errors.InvalidKubeconfig(f"bad certificate data in kubeconfig ({type(exc).__name__})") from None
    if configuration.verify_ssl is False:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _load_cert_chain_in_memory(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """``ssl`` loads a client key from a path only: give it an anonymous in-memory file (Linux
    ``memfd``), which no other process can open by name and which is gone when closed. Without
    memfd, a 0600 file in a fresh 0700 directory, removed before this returns."""
    if hasattr(os, "memfd_create"):
        descriptors: list[int] = []
        try:
            for data in (cert_pem, key_pem):
                descriptor = os.memfd_create("trainwatch-tls", os.MFD_CLOEXEC)
                descriptors.append(descriptor)
                _write_all(descriptor, data)
            cert_path, key_path = (f"/proc/self/fd/{d}" for d in descriptors)
            if Path(cert_path).exists():
                context.load_cert_chain(cert_path, key_path)
                return
        finally:
            for descriptor in descriptors:
                os.close(descriptor)
    with tempfile.TemporaryDirectory(prefix="trainwatch-tls-") as workdir:  # created 0700
        paths = [Path(workdir) / "client.crt", Path(workdir) / "client.key"]
        for path, data in zip(paths, (cert_pem, key_pem), strict=True):
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                _write_all(descriptor, data)
            finally:
                os.close(descriptor)
        context.load_cert_chain(paths[0], paths[1])


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view) :]


_LOADER_DIRECTORY: Path | None = None


def _loader_directory() -> Path:
    """This process's private (0700) directory for what the ``kubernetes`` loader insists on
    writing (an exec plugin's client certificate). Directories of dead watcher processes of the
    same user are removed when it is created, and this one at exit."""
    global _LOADER_DIRECTORY
    if _LOADER_DIRECTORY is None or not _LOADER_DIRECTORY.is_dir():
        prefix = f"trainwatch-watcher-{os.getuid()}-"
        for stale in Path(tempfile.gettempdir()).glob(prefix + "*"):
            pid = stale.name.removeprefix(prefix).split("-")[0]
            if pid.isdigit() and int(pid) != os.getpid() and not _process_alive(int(pid)):
                _remove_tree(stale)
        _LOADER_DIRECTORY = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))
        atexit.register(_remove_tree, _LOADER_DIRECTORY)
    return _LOADER_DIRECTORY


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _forget_loader_files(*paths: str) -> None:
    """Remove files the loader wrote into our directory, and from its cache of them (it would
    otherwise hand the deleted path back for the same content)."""
    from kubernetes.config import kube_config

    directory = _LOADER_DIRECTORY
    if directory is None:
        return
    cache: dict[str, str] = getattr(kube_config, "_temp_files", {})
    for path in paths:
        if Path(path).parent != directory:
            continue  # a file the kubeconfig itself names: not ours to remove
        with contextlib.suppress(OSError):
            Path(path).unlink()
        for key in [k for k, v in cache.items() if v == path]:
            del cache[key]


class _PolicyResolver(AbstractResolver):
    """Resolves as aiohttp would, then refuses the name if any address breaks the policy.

    aiohttp connects to exactly the addresses returned here (and keeps the host name for SNI and
    the Host header), so what is checked is what is connected to, at every new connection,
    including after DNS changes. IP literals never reach a resolver: ``KubeClient`` checks them.
    """

    def __init__(self, policy: AddressPolicy) -> None:
        self._policy = policy
        self._inner = aiohttp.DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            address = parse_host_ip(str(result["host"]).split("%")[0])
            problem = address_problem(address, self._policy) if address is not None else None
            if problem is not None:
                raise AddressRefused(problem)
        return results

    async def close(self) -> None:
        await self._inner.close()


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
        policy = AddressPolicy(
            allow_loopback=timings.allow_loopback_servers, allow_link_local=timings.allow_link_local_servers
        )
        # The host as written (an IP literal, localhost, a metadata name); names that resolve to a
        # refused address are caught by the resolver at connect time.
        problem = host_problem(urlsplit(access.server).hostname or "", policy)
        self._address_refused = problem.message if problem is not None else None
        shrink_tls_read_buffer()
        headers = {"Accept": "application/json", "User-Agent": "trainwatch-watcher"}
        if access.authorization:
            headers["Authorization"] = access.authorization
        connector = aiohttp.TCPConnector(
            ssl=access.ssl_context if access.ssl_context is not None else False,
            limit=0,  # one stream per (kind, namespace) is held open; never queue behind them
            socket_factory=_keepalive_socket_factory(timings.tcp_keepalive_idle),
            resolver=_PolicyResolver(policy),
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

    def _request_kwargs(self, what: str) -> dict[str, Any]:
        if self._address_refused is not None:
            raise errors.ServerAddressRefused(f"{what}: {self._address_refused}")
        # Never follow a redirect: an API server has no reason to send one, and following it
        # would take the bearer token somewhere the address policy never looked at.
        kwargs: dict[str, Any] = {"allow_redirects": False}
        if self._access.tls_server_name:
            kwargs["server_hostname"] = self._access.tls_server_name
        return kwargs

    async def get_json(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        """GET a JSON object; non-2xx answers become the matching ``errors`` class."""
        timeout = aiohttp.ClientTimeout(
            total=self._timings.request_timeout, sock_connect=self._timings.connect_timeout
        )
        kwargs = self._request_kwargs(f"GET {path}")
        try:
            async with self._session.get(
                self._access.server + path, params=params, timeout=timeout, **kwargs
            ) as response:
                if response.status >= 300:
                    raise await _status_error(response, path)
                body = await _read_bounded(response, self._timings.max_response_bytes, f"GET {path}")
        except (aiohttp.ClientError, TimeoutError, ssl.SSLError, OSError) as exc:
            raise _transport_error(f"GET {path}", exc) from exc
        value = orjson.loads(body)
        if not isinstance(value, dict):
            raise errors.ApiError(f"GET {path}: answer is not a JSON object", status=200)
        return value

    async def get_text(self, path: str, params: Mapping[str, str], *, limit: int, timeout: float) -> str:
        """GET a text answer (``pods/log``) of at most ``limit`` bytes, within ``timeout`` seconds."""
        client_timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=self._timings.connect_timeout)
        kwargs = self._request_kwargs(f"GET {path}")
        try:
            async with self._session.get(
                self._access.server + path, params=params, timeout=client_timeout, **kwargs
            ) as response:
                if response.status >= 300:
                    raise await _status_error(response, path)
                body = await _read_bounded(response, limit, f"GET {path}")
        except (aiohttp.ClientError, TimeoutError, ssl.SSLError, OSError) as exc:
            raise _transport_error(f"GET {path}", exc) from exc
        return body.decode("utf-8", errors="replace")

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
        kwargs = self._request_kwargs(f"watch {path}")
        try:
            async with self._session.get(
                self._access.server + path, params=params, timeout=timeout, **kwargs
            ) as response:
                if response.status >= 300:
                    raise await _status_error(response, path)
                lines = _lines(response, path, max_line=self._timings.max_event_bytes)
                try:
                    yield lines
                finally:
                    await lines.aclose()  # its clean-up now, not whenever the collector gets to it
        except errors.WatcherError:
            raise
        except aiohttp.ServerTimeoutError as exc:
            raise errors.WatchStalled(f"watch {path}: no data for {read_timeout:g}s") from exc
        except (aiohttp.ClientError, TimeoutError, ssl.SSLError, OSError) as exc:
            raise _transport_error(f"watch {path}", exc) from exc


def _transport_error(what: str, exc: BaseException) -> errors.WatcherError:
    if isinstance(exc, AddressRefused) or isinstance(exc.__cause__, AddressRefused):
        refused = exc if isinstance(exc, AddressRefused) else exc.__cause__
        return errors.ServerAddressRefused(f"{what}: {refused}")
    return errors.Unreachable(f"{what}: {_describe(exc)}")


async def _read_bounded(response: aiohttp.ClientResponse, limit: int, what: str) -> bytes:
    """The whole body, or ``ResponseTooLarge`` as soon as it passes ``limit`` bytes (a hostile
    or broken server must not decide how much memory the watcher uses)."""
    if response.content_length is not None and response.content_length > limit:
        raise errors.ResponseTooLarge(f"{what}: the answer is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise errors.ResponseTooLarge(f"{what}: the answer is larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


_DEFAULT_MAX_LINE = WatchTimings.model_fields["max_event_bytes"].default


async def _lines(
    response: aiohttp.ClientResponse, path: str, *, max_line: int = _DEFAULT_MAX_LINE
) -> AsyncGenerator[bytes, None]:
    """Split the body into lines ourselves: aiohttp's readline refuses lines over 128 KB.

    A line (one event) longer than ``max_line`` ends the stream with ``ResponseTooLarge``
    rather than growing the buffer without bound."""
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
            if len(buffer) + len(lines[0]) > max_line:
                raise errors.ResponseTooLarge(f"watch {path}: a line is longer than {max_line} bytes")
            lines[0] = buffer + lines[0]
            buffer = lines.pop()
            if len(buffer) > max_line:
                raise errors.ResponseTooLarge(f"watch {path}: a line is longer than {max_line} bytes")
            for line in lines:
                if len(line) > max_line:
                    raise errors.ResponseTooLarge(f"watch {path}: a line is longer than {max_line} bytes")
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
