"""Issue 15's attack cases against the watcher's cluster client; each test is named after its item.

The API servers are kubesim (the allowed stand-in for a kube-apiserver) or, where a test needs a
*hostile* server (one that redirects, floods, or demands a client certificate), a small real
aiohttp server on 127.0.0.1 written here.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import ipaddress
import os
import socket
import ssl
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import kubesim
from kubesim import tls as kubesim_tls
from trainwatch_common.addresses import AddressPolicy, host_problem
from trainwatch_watcher import errors
from trainwatch_watcher.kube import client as kube_client
from trainwatch_watcher.kube.client import KubeClient, load_kubeconfig
from trainwatch_watcher.settings import WatchTimings


def loopback_alias() -> str:
    """A host name resolving to loopback that is not one of the localhost names (``vm`` in the
    audit; the machine's own name usually is one)."""
    candidates = [socket.gethostname()]
    with contextlib.suppress(OSError):
        for line in Path("/etc/hosts").read_text().splitlines():
            fields = line.split("#")[0].split()
            if fields and fields[0].startswith("127."):
                candidates += fields[1:]
    for name in candidates:
        if host_problem(name, AddressPolicy()) is not None:
            continue
        with contextlib.suppress(OSError):
            if all(ipaddress.ip_address(info[4][0]).is_loopback for info in socket.getaddrinfo(name, 443)):
                return name
    pytest.skip("no host name here resolves to loopback except the localhost names")


def kubeconfig_for(cluster: kubesim.Cluster, *, server: str, tls_server_name: str | None = None) -> str:
    doc = cluster.kubeconfig()
    doc["clusters"][0]["cluster"]["server"] = server
    if tls_server_name:
        doc["clusters"][0]["cluster"]["tls-server-name"] = tls_server_name
    return yaml.safe_dump(doc)


@pytest.fixture
async def sim() -> AsyncIterator[kubesim.Simulator]:
    async with kubesim.Simulator() as simulator:
        yield simulator


@contextlib.asynccontextmanager
async def http_server(
    handler: Any, *, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[tuple[str, list[web.Request]]]:
    """A real HTTP(S) server on 127.0.0.1; yields its base URL and the requests it received."""
    seen: list[web.Request] = []

    async def record(request: web.Request) -> web.StreamResponse:
        seen.append(request)
        response: web.StreamResponse = await handler(request)
        return response

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", record)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


def plain_kubeconfig(server: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": {"token": "hostile-test-token"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
    )


LOOPBACK_OK = WatchTimings(allow_loopback_servers=True)


# --- V2: the address policy on the resolved address, at every connect and redirect -------------


async def test_v2_resolved_loopback_refused_at_connect(sim: kubesim.Simulator) -> None:
    cluster = await sim.add_cluster("v2", kinds=[kubesim.PYTORCHJOB])
    text = kubeconfig_for(
        cluster, server=f"https://{loopback_alias()}:{cluster.port}", tls_server_name="kubernetes.default.svc"
    )
    client = KubeClient(load_kubeconfig(text), timings=WatchTimings())
    try:
        # (Unreachable, its base class, so that before the fix this fails by not raising.)
        with pytest.raises(errors.Unreachable, match="loopback") as caught:
            await client.get_json("/version")
        assert type(caught.value).__name__ == "ServerAddressRefused"
    finally:
        await client.close()
    assert list(cluster.requests) == []  # nothing, not even a TLS handshake, reached the server

    # The same kubeconfig where loopback is allowed: the refusal above was the policy, not the setup.
    allowed = KubeClient(load_kubeconfig(text), timings=LOOPBACK_OK)
    try:
        assert (await allowed.get_json("/version"))["gitVersion"].startswith("v1.")
    finally:
        await allowed.close()


async def test_v2_literal_loopback_refused_at_connect(sim: kubesim.Simulator) -> None:
    cluster = await sim.add_cluster("v2-literal", kinds=[kubesim.PYTORCHJOB])
    for server in (cluster.url, f"https://[::ffff:127.0.0.1]:{cluster.port}"):
        client = KubeClient(load_kubeconfig(kubeconfig_for(cluster, server=server)), timings=WatchTimings())
        try:
            with pytest.raises(errors.Unreachable, match="loopback"):
                await client.get_json("/version")
            with pytest.raises(errors.Unreachable, match="loopback"):
                async with client.stream_lines("/api/v1/namespaces", {"watch": "1"}):
                    pass
        finally:
            await client.close()
    assert list(cluster.requests) == []


async def test_v2_redirect_never_followed() -> None:
    async def target(request: web.Request) -> web.StreamResponse:
        return web.json_response({"gitVersion": "v1.99.0"})

    async with http_server(target) as (target_url, target_seen):

        async def redirect(request: web.Request) -> web.StreamResponse:
            raise web.HTTPTemporaryRedirect(f"{target_url}/version")

        async with http_server(redirect) as (url, seen):
            client = KubeClient(load_kubeconfig(plain_kubeconfig(url)), timings=LOOPBACK_OK)
            try:
                with pytest.raises(errors.ApiError) as caught:
                    await client.get_json("/version")
                assert caught.value.status == 307
                with pytest.raises(errors.ApiError):
                    async with client.stream_lines("/apis/batch/v1/jobs", {"watch": "1"}):
                        pass
            finally:
                await client.close()
    assert len(seen) == 2
    assert target_seen == []


# --- V8: bounded reads of API server answers ---------------------------------------------------


async def test_v8_oversized_answer_refused_without_reading_it_all() -> None:
    sent = 0

    async def flood(request: web.Request) -> web.StreamResponse:
        nonlocal sent
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"gitVersion": "')
        with contextlib.suppress(ConnectionError):
            for _ in range(100):  # up to 100 MiB, as in the audit
                await response.write(b"x" * (1024 * 1024))
                sent += 1
            await response.write(b'"}')
        return response

    async with http_server(flood) as (url, _):
        timings = WatchTimings(allow_loopback_servers=True, max_response_bytes=4 * 1024 * 1024)
        client = KubeClient(load_kubeconfig(plain_kubeconfig(url)), timings=timings)
        try:
            with pytest.raises(errors.ClusterError, match=r"larger than|longer than"):
                await client.get_json("/version")
        finally:
            await client.close()
    assert sent < 100  # the client hung up; the 100 MiB were never taken in


async def test_v8_endless_watch_line_refused() -> None:
    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"type":"ADDED","object":{"metadata":{"name":"')
        with contextlib.suppress(ConnectionError):
            for _ in range(64):
                await response.write(b"y" * (256 * 1024))
        return response

    async with http_server(endless) as (url, _):
        timings = WatchTimings(allow_loopback_servers=True, max_event_bytes=1024 * 1024)
        client = KubeClient(load_kubeconfig(plain_kubeconfig(url)), timings=timings)
        try:

            async def drain() -> None:
                async with client.stream_lines("/apis/batch/v1/jobs", {"watch": "1"}) as lines:
                    async for _ in lines:
                        pass

            with pytest.raises(errors.ClusterError, match=r"larger than|longer than"):
                await drain()
        finally:
            await client.close()


# --- V7: client private keys stay in memory ----------------------------------------------------


def client_identity() -> tuple[bytes, bytes, bytes]:
    """A client CA, and a certificate + key it signed for ``trainwatch-watcher`` (PEM)."""
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "v7 client CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trainwatch-watcher")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return ca.public_bytes(pem), cert.public_bytes(pem), key_pem


def files_containing(needle: bytes, *roots: Path) -> list[Path]:
    found = []
    for root in roots:
        # os.walk, not rglob: other processes' temporary folders come and go during the walk, and
        # a folder that vanished is skipped (onerror) instead of failing the scan.
        for folder, _, names in os.walk(root, onerror=lambda _: None):
            for name in names:
                path = Path(folder) / name
                with contextlib.suppress(OSError):
                    small = path.is_file() and not path.is_symlink() and path.stat().st_size < 1024 * 1024
                    if small and needle in path.read_bytes():
                        found.append(path)
    return found


async def test_v7_client_key_kept_in_memory_not_in_tmp(tmp_path: Path) -> None:
    client_ca, cert_pem, key_pem = client_identity()
    serving = kubesim_tls.generate("v7")
    server_ssl = kubesim_tls.server_context(serving, tmp_path / "serving")
    server_ssl.verify_mode = ssl.CERT_REQUIRED
    server_ssl.load_verify_locations(cadata=client_ca.decode())

    async def whoami(request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(item[0] for item in (peer or {}).get("subject", ()))
        return web.json_response({"gitVersion": "v1.31.0", "user": subject.get("commonName")})

    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
    async with http_server(whoami, ssl_context=server_ssl) as (url, _):
        text = yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": url, "certificate-authority-data": b64(serving.ca_pem)},
                    }
                ],
                "users": [
                    {
                        "name": "u",
                        "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)},
                    }
                ],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
        client = KubeClient(load_kubeconfig(text), timings=LOOPBACK_OK)
        try:
            answer = await client.get_json("/version")
        finally:
            await client.close()
    assert answer["user"] == "trainwatch-watcher"  # the key loaded from memory authenticated us
    key_body = b"".join(key_pem.splitlines()[1:-1])[:64]
    assert files_containing(key_body, Path(tempfile.gettempdir())) == []


def test_v7_stale_loader_directory_removed_on_start() -> None:
    dead = subprocess.Popen(["true"])  # a pid whose process has surely exited
    dead.wait()
    stale = Path(tempfile.gettempdir()) / f"trainwatch-watcher-{os.getuid()}-{dead.pid}-left"
    stale.mkdir(mode=0o700)
    (stale / "tmpkey").write_bytes(b"-----BEGIN PRIVATE KEY-----\nleft by a killed watcher\n")
    kube_client._LOADER_DIRECTORY = None  # as in a freshly started process
    load_kubeconfig(plain_kubeconfig("https://k8s.example.com"))
    assert not stale.exists()
    mine = kube_client._LOADER_DIRECTORY
    assert mine is not None
    assert mine.stat().st_mode & 0o777 == 0o700
