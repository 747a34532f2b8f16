"""A tiny Kubernetes API stand-in for connectivity tests: /version and discovery over TLS.

It checks a bearer token (401 otherwise) and can require client certificates. kubesim will
replace it once it lands; the routes are the ones a real kube-apiserver serves.
"""

from __future__ import annotations

import ssl
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from aiohttp import web
from registry_pki import Issued, TestAuthority

SERVED = {
    "batch/v1": ["jobs"],
    "kubeflow.org/v1": ["pytorchjobs", "tfjobs", "mpijobs"],
    "jobset.x-k8s.io/v1alpha2": ["jobsets"],
    "apps/v1": ["deployments"],
}


class FakeApiServer:
    def __init__(
        self, *, token: str, authority: TestAuthority, server_cert: Issued, require_client_cert: bool
    ) -> None:
        self.token = token
        self.authority = authority
        self.server_cert = server_cert
        self.require_client_cert = require_client_cert
        self.requests: list[str] = []
        self.port = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _authorized(self, request: web.Request) -> bool:
        if self.require_client_cert:
            return request.transport is not None and request.transport.get_extra_info("peercert") is not None
        return request.headers.get("Authorization") == f"Bearer {self.token}"

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(request.path)
        if not self._authorized(request):
            return web.json_response({"kind": "Status", "code": 401, "reason": "Unauthorized"}, status=401)
        if request.path == "/version":
            return web.json_response(
                {"major": "1", "minor": "31", "gitVersion": "v1.31.2", "platform": "linux/amd64"}
            )
        if request.path == "/apis":
            groups: dict[str, list[dict[str, str]]] = {}
            for group_version in SERVED:
                group, version = group_version.split("/")
                groups.setdefault(group, []).append({"groupVersion": group_version, "version": version})
            return web.json_response(
                {"kind": "APIGroupList", "groups": [{"name": g, "versions": v} for g, v in groups.items()]}
            )
        group_version = request.path.removeprefix("/apis/")
        group_version, _, plural = (
            group_version.rpartition("/")
            if group_version.count("/") == 2
            else (
                group_version,
                "",
                "",
            )
        )
        if plural:  # a LIST of a served kind: an empty one
            if plural in SERVED.get(group_version, ()):
                return web.json_response({"kind": "List", "metadata": {"resourceVersion": "1"}, "items": []})
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        if group_version in SERVED:
            resources = [{"name": name, "namespaced": True} for name in SERVED[group_version]]
            return web.json_response(
                {"kind": "APIResourceList", "groupVersion": group_version, "resources": resources}
            )
        return web.json_response({"kind": "Status", "code": 404}, status=404)


@asynccontextmanager
async def fake_apiserver(
    *, token: str = "sim-token", require_client_cert: bool = False
) -> AsyncIterator[FakeApiServer]:
    authority = TestAuthority()
    server_cert = authority.issue("apiserver", server=True)
    fake = FakeApiServer(
        token=token, authority=authority, server_cert=server_cert, require_client_cert=require_client_cert
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as workdir:
        cert_file, key_file = Path(workdir) / "tls.crt", Path(workdir) / "tls.key"
        cert_file.write_bytes(server_cert.cert_pem)
        key_file.write_bytes(server_cert.key_pem)
        context.load_cert_chain(cert_file, key_file)
    if require_client_cert:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=authority.cert_pem.decode())
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", fake.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    fake.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield fake
    finally:
        await runner.cleanup()
