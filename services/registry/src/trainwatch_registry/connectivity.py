"""Connectivity test: talk to a cluster's API server with a sanitized kubeconfig, store nothing.

Reads ``/version`` and the discovery documents (``/apis``, ``/apis/<group>/<version>``) to
report the server version and which of Trainwatch's job kinds the cluster serves, then LISTs one
item of each served kind: discovery is open to any authenticated user, so only that tells whether
the credentials may watch them (``permissions``; 403 on a kind fails the test). The host is
resolved and every address it resolves to is checked against the same policy as at intake
(a name that resolves to loopback or metadata is refused too). Exec and auth-provider
credentials are never run here: such a cluster is tested without credentials.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import ssl
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from trainwatch_common.kinds import ALL_JOB_KINDS
from trainwatch_registry.addresses import AddressPolicy, address_problem, parse_host_ip
from trainwatch_registry.kubeconfig import SanitizedKubeconfig
from trainwatch_registry.models import ConnectivityReport, ServerVersion
from trainwatch_registry.permissions import forbidden_summary, kind_access, served_job_kinds


class _Refused(Exception):
    pass


async def _check_resolved(host: str, port: int, policy: AddressPolicy) -> None:
    ip = parse_host_ip(host)
    if ip is not None:
        addresses = [ip]
    else:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise _Refused(f"cannot resolve {host!r}: {exc.strerror or exc}") from None
        addresses = [parsed for info in infos if (parsed := parse_host_ip(str(info[4][0]).split("%")[0]))]
    for address in addresses:
        problem = address_problem(address, policy)
        if problem is not None:
            raise _Refused(f"{host!r} resolves to a refused address: {problem.message}")


def _ssl_context(cluster: dict[str, Any], user: dict[str, Any], workdir: Path) -> ssl.SSLContext:
    ca = cluster.get("certificate-authority-data")
    context = ssl.create_default_context(cadata=base64.b64decode(ca).decode() if ca else None)
    if "client-certificate-data" in user:
        # The ssl module loads client certificates from files only: a private, short-lived directory.
        cert_file, key_file = workdir / "client.crt", workdir / "client.key"
        for path, field in ((cert_file, "client-certificate-data"), (key_file, "client-key-data")):
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(base64.b64decode(user[field]))
        context.load_cert_chain(cert_file, key_file)
    return context


def _served_kinds(group_versions: dict[str, set[str]]) -> list[str]:
    return sorted(
        {kind.key for kind in ALL_JOB_KINDS if kind.plural in group_versions.get(kind.api_version, set())}
    )


async def check_connectivity(
    kubeconfig: SanitizedKubeconfig, *, policy: AddressPolicy, timeout_seconds: float
) -> ConnectivityReport:
    started = time.monotonic()
    cluster = kubeconfig.document["clusters"][0]["cluster"]
    user = kubeconfig.document["users"][0]["user"]
    server = kubeconfig.server.rstrip("/")

    def report(**fields: Any) -> ConnectivityReport:
        elapsed = round((time.monotonic() - started) * 1000, 1)
        return ConnectivityReport(server=kubeconfig.server, elapsed_ms=elapsed, **fields)

    parts = urlsplit(server)
    try:
        await _check_resolved(parts.hostname or "", parts.port or 443, policy)
    except _Refused as exc:
        return report(ok=False, error=str(exc))
    headers = {"Accept": "application/json", "User-Agent": "trainwatch-registry"}
    if "token" in user:
        headers["Authorization"] = f"Bearer {user['token']}"
    extensions = {"sni_hostname": cluster["tls-server-name"]} if "tls-server-name" in cluster else None
    with tempfile.TemporaryDirectory(prefix="trainwatch-tls-") as workdir:
        try:
            context = _ssl_context(cluster, user, Path(workdir))
        except (ssl.SSLError, ValueError) as exc:
            return report(ok=False, error=f"TLS material cannot be used: {exc}")
        async with httpx.AsyncClient(
            base_url=server, verify=context, headers=headers, timeout=timeout_seconds, follow_redirects=False
        ) as client:

            async def get(path: str) -> Any:
                async with client.stream("GET", path, extensions=extensions) as response:
                    if response.status_code == 401:
                        raise _Refused("the API server rejected the credentials (401 Unauthorized)")
                    if response.status_code == 403:
                        raise _Refused(f"the credentials may not read {path} (403 Forbidden)")
                    if response.status_code != 200:
                        raise _Refused(f"GET {path} answered {response.status_code}")
                    return json.loads(await _read_bounded(response, path))

            try:
                version = await get("/version")
                groups = await get("/apis")
                wanted = {kind.api_version for kind in ALL_JOB_KINDS}
                offered = {
                    entry.get("groupVersion")
                    for group in groups.get("groups", [])
                    for entry in group.get("versions", [])
                }
                resources: dict[str, set[str]] = {}
                for group_version in sorted(wanted & offered):
                    listing = await get(f"/apis/{group_version}")
                    resources[group_version] = {r.get("name") for r in listing.get("resources", [])}
                access = await kind_access(client, served_job_kinds(resources), extensions=extensions)
                server_version = ServerVersion(
                    git_version=version.get("gitVersion"),
                    major=version.get("major"),
                    minor=version.get("minor"),
                    platform=version.get("platform"),
                )
            except _Refused as exc:
                return report(ok=False, error=str(exc))
            except httpx.ConnectError as exc:
                return report(ok=False, error=f"cannot connect to {server}: {_reason(exc)}")
            except httpx.TimeoutException:
                return report(ok=False, error=f"no answer from {server} within {timeout_seconds:g}s")
            except (httpx.HTTPError, ValueError, AttributeError, TypeError) as exc:
                return report(ok=False, error=f"unexpected answer from {server}: {_reason(exc)}")
    forbidden = forbidden_summary(access)
    return report(
        ok=forbidden is None,
        server_version=server_version,
        kinds_served=_served_kinds(resources),
        kinds=access,
        error=forbidden,
    )


# /version is a few hundred bytes and a discovery document tens of KiB on a big cluster: read no
# more than this of any answer (a hostile server's 100 MB body must not reach memory).
MAX_ANSWER_BYTES = 4 * 1024 * 1024


async def _read_bounded(response: httpx.Response, path: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise _Refused(f"GET {path}: the answer is larger than {MAX_ANSWER_BYTES // (1024 * 1024)} MiB")
        chunks.append(chunk)
    return b"".join(chunks)


def _reason(exc: BaseException) -> str:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS verification failed: {cause.verify_message}"
        cause = cause.__cause__ or cause.__context__
    return str(exc) or type(exc).__name__
