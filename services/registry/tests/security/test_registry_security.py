"""Issue 15's attack cases against the registry: each test is named after the audit item it keeps closed.

Everything runs against a real registry (SQLite, a real nats-server) over its HTTP API, and a
refusal must be a 422 that names the problem and writes nothing.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import ipaddress
import json
import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from conftest import Bus, Harness, make_settings, running_registry
from pydantic import SecretStr
from redis.asyncio import Redis
from registry_kubeconfigs import ADMIN, WATCHER, as_json, as_yaml, changed, create_body, kubeconfig
from typer.testing import CliRunner

from kubesim import tls as kubesim_tls
from trainwatch_common import fingerprint
from trainwatch_common.leases import LEASE_PROOF_HEADER, LeaseManager
from trainwatch_common.testing import eventually
from trainwatch_registry.addresses import AddressPolicy, host_problem
from trainwatch_registry.app import intake_policy
from trainwatch_registry.cli import app as cli
from trainwatch_registry.kubeconfig import IntakePolicy, KubeconfigRefused, sanitize


async def refused(registry: Harness, text: str, *, code: str | None = None) -> list[dict[str, Any]]:
    """POST ``text`` as a new cluster; assert a 422 that stored nothing; return its detail."""
    response = await registry.client.post("/v1/clusters", json=create_body("refused", text), headers=ADMIN)
    assert response.status_code == 422, response.text
    detail: list[dict[str, Any]] = response.json()["detail"]
    if code is not None:
        assert f"kubeconfig.{code}" in [item["type"] for item in detail], detail
    assert await registry.cluster_rows() == []
    assert await registry.outbox_rows() == []
    return detail


# --- Bugs found on the way: 500s on odd kubeconfigs --------------------------------------------


@pytest.mark.parametrize("form", ["yaml", "json"])
async def test_bug_5000_digit_integer_is_422(registry: Harness, form: str) -> None:
    doc = kubeconfig()
    if form == "yaml":
        text = as_yaml(doc).replace("preferences: {}", "preferences: {colors: " + "7" * 5000 + "}")
        assert "7" * 5000 in text
    else:
        text = as_json(doc)[:-1] + ', "extra": ' + "7" * 5000 + "}"
    detail = await refused(registry, text)
    assert any("too many digits" in item["msg"] for item in detail), detail


async def test_bug_non_string_keys_in_user_is_422(registry: Harness) -> None:
    text = as_yaml(kubeconfig()).replace("token: sim-token-1234", "token: sim-token-1234\n    7: seven")
    assert "7: seven" in text
    detail = await refused(registry, text)
    assert any("key" in item["msg"] and "string" in item["msg"] for item in detail), detail


async def test_bug_mixed_null_and_string_unknown_keys_in_cluster_is_422(registry: Harness) -> None:
    text = as_yaml(kubeconfig()).replace(
        "server: https://k8s.example.com:6443",
        "server: https://k8s.example.com:6443\n    ~: 1\n    colour: red",
        1,
    )
    assert "~: 1" in text
    await refused(registry, text)


async def test_bug_non_ascii_token_refused_at_create_rotate_and_dry_run(registry: Harness) -> None:
    text = as_yaml(changed(kubeconfig(), "users", {"token": "sim-tökén-1234"}))
    detail = await refused(registry, text, code="token_not_ascii")
    assert "sim-tökén-1234" not in str(detail)
    dry = await registry.client.post(
        "/v1/clusters", params={"dry_run": "true"}, json=create_body("dry", text), headers=ADMIN
    )
    assert dry.status_code == 422, dry.text
    await registry.create(create_body("kept"))
    rotate = await registry.client.patch("/v1/clusters/kept", json={"kubeconfig": text}, headers=ADMIN)
    assert rotate.status_code == 422, rotate.text
    assert len(await registry.outbox_rows()) == 1


async def test_bug_multi_doc_json_reason_is_clear(registry: Harness) -> None:
    text = as_json(kubeconfig()) + "\n" + as_json(kubeconfig())
    detail = await refused(registry, text, code="multiple_documents")
    assert not any("Extra data" in item["msg"] for item in detail), detail


async def test_bug_bad_ca_reason_is_clear_and_alone(registry: Harness) -> None:
    not_a_cert = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").decode()
    doc = changed(kubeconfig(), "clusters", {"certificate-authority-data": not_a_cert})
    detail = await refused(registry, as_yaml(doc), code="bad_pem")
    assert len(detail) == 1, detail
    message = detail[0]["msg"]
    assert "not a PEM certificate" in message
    assert "ParseError" not in message
    assert "http" not in message  # no library FAQ links
    # An unrelated refusal is not joined by a bad_pem line about a good CA.
    detail = await refused(registry, as_yaml(changed(kubeconfig(), "users", {"token": "a b"})))
    assert [item["type"] for item in detail] == ["kubeconfig.token_control_chars"]


# --- V2: the address policy on where a name resolves, not only on the name ----------------------


def loopback_alias() -> str:
    """A host name that resolves to a loopback address but is not one of the localhost names
    (the audit used ``vm`` from /etc/hosts; the machine's own name usually is one too)."""
    candidates = [socket.gethostname()]
    with contextlib.suppress(OSError):
        for line in Path("/etc/hosts").read_text().splitlines():
            fields = line.split("#")[0].split()
            if fields and fields[0].startswith("127."):
                candidates += fields[1:]
    for name in candidates:
        if host_problem(name, AddressPolicy()) is not None:
            continue  # refused by its name already: not the case under test
        with contextlib.suppress(OSError):
            if all(ipaddress.ip_address(info[4][0]).is_loopback for info in socket.getaddrinfo(name, 443)):
                return name
    pytest.skip("no host name here resolves to loopback except the localhost names")


async def test_v2_name_resolving_to_loopback_refused_at_intake(registry: Harness) -> None:
    alias = loopback_alias()
    text = as_yaml(kubeconfig(server=f"https://{alias}:27001"))
    detail = await refused(registry, text, code="server_loopback")
    assert any("resolves to" in item["msg"] for item in detail), detail
    await registry.create(create_body("kept"))
    rotate = await registry.client.patch("/v1/clusters/kept", json={"kubeconfig": text}, headers=ADMIN)
    assert rotate.status_code == 422, rotate.text
    assert len(await registry.outbox_rows()) == 1


@pytest.mark.parametrize(
    ("server", "code"),
    [
        ("https://169.254.169.254.nip.io/", "server_metadata"),
        ("https://api.169-254-169-254.sslip.io:6443/", "server_metadata"),
        ("https://127.0.0.1.nip.io:6443/", "server_loopback"),
        ("https://metadata\u3002google\u3002internal/", "server_metadata"),
        ("https://metadata\uff0egoogle\uff0einternal./", "server_metadata"),
        ("https://\uff11\uff16\uff19.254.169.254/", "server_metadata"),
        ("https://192.0.0.192/", "server_metadata"),
        ("https://168.63.129.16/", "server_metadata"),
        ("https://[fd20:ce::254]/", "server_metadata"),
    ],
    ids=[
        "nip.io",
        "sslip.io dashes",
        "nip.io loopback",
        "ideographic dots",
        "fullwidth dots",
        "fullwidth digits",
        "oracle",
        "azure wire server",
        "gcp ipv6",
    ],
)
async def test_v2_metadata_and_disguised_names_refused_at_intake(
    registry: Harness, server: str, code: str
) -> None:
    await refused(registry, as_yaml(kubeconfig(server=server)), code=code)


def test_v2_ipv6_loopback_accepted_when_loopback_allowed() -> None:
    policy = IntakePolicy(addresses=AddressPolicy(allow_loopback=True))
    for server in ("https://[::1]:6443", "https://[::1]/", "https://127.0.0.1:6443"):
        assert sanitize(as_yaml(kubeconfig(server=server)), policy=policy).server == server
    with pytest.raises(KubeconfigRefused) as caught:
        sanitize(as_yaml(kubeconfig(server="https://[::1]:6443")), policy=IntakePolicy())
    assert [r.code for r in caught.value.refusals] == ["server_loopback"]


# --- V11: the fingerprint on the bus is keyed ----------------------------------------------------


def _fingerprints(value: Any) -> list[str]:
    if isinstance(value, dict):
        found = [v for k, v in value.items() if k == "connection_fingerprint" and isinstance(v, str)]
        return found + [f for v in value.values() for f in _fingerprints(v)]
    if isinstance(value, list):
        return [f for v in value for f in _fingerprints(v)]
    return []


async def test_v11_connection_fingerprint_is_keyed_not_a_plain_hash(
    registry: Harness, bus: Bus, sqlite_url: str, nats_url: str, encryption_key: str
) -> None:
    doc = kubeconfig()
    await registry.create(create_body("gpu-east", as_yaml(doc)))
    events = await eventually_events(bus)
    published = {f for message in events for f in _fingerprints(json.loads(message.data))}
    assert len(published) == 1
    (published_fp,) = published
    # What anyone on the bus could compute from a guessed token (the old, unkeyed fingerprint).
    cluster = {"server": doc["clusters"][0]["cluster"]["server"]}
    cluster["certificate-authority-data"] = doc["clusters"][0]["cluster"]["certificate-authority-data"]
    guess = orjson.dumps(
        {"cluster": cluster, "user": {"token": "sim-token-1234"}}, option=orjson.OPT_SORT_KEYS
    )
    assert published_fp != fingerprint(guess)
    assert hashlib.sha256(guess).hexdigest()[:16] not in published_fp
    # Stable for one registry key (change detection still works), different under another key.
    same = make_settings(database_url=sqlite_url, nats_url=nats_url, encryption_key=encryption_key)
    other = make_settings(
        database_url=sqlite_url, nats_url=nats_url, encryption_key=encryption_key,
        registry_fingerprint_key=SecretStr("another-registry-secret"),
    )  # fmt: skip
    text = as_yaml(doc)
    assert sanitize(text, policy=intake_policy(same)).connection_fingerprint == published_fp
    assert sanitize(text, policy=intake_policy(other)).connection_fingerprint != published_fp


async def eventually_events(bus: Bus) -> list[Any]:
    async def one() -> list[Any] | None:
        events = await bus.cluster_events()
        return events or None

    result: list[Any] = await eventually(one)
    return result


# --- V12: folder import stays in its folder and echoes no file values ---------------------------


async def test_v12_import_does_not_follow_symlinks_out_of_its_folder(
    tmp_path: Path, sqlite_url: str, nats_url: str, encryption_key: str
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.yaml").write_text(as_yaml(kubeconfig(server="https://outside.example.com")))
    folder = tmp_path / "kubeconfigs"
    folder.mkdir()
    (folder / "escape.yaml").symlink_to(outside / "secret.yaml")
    # A Kubernetes Secret volume: files link into ..data/, which is inside the folder.
    versioned = folder / "..2026_12_01"
    versioned.mkdir()
    (versioned / "inside.yaml").write_text(as_yaml(kubeconfig(server="https://inside.example.com")))
    (folder / "..data").symlink_to(versioned.name)
    (folder / "inside.yaml").symlink_to(Path("..data") / "inside.yaml")
    settings = make_settings(database_url=sqlite_url, nats_url=nats_url, encryption_key=encryption_key)
    async with running_registry(settings.model_copy(update={"registry_import_dir": folder})) as registry:
        response = await registry.client.post("/v1/clusters:import", headers=ADMIN)
        assert response.status_code == 200, response.text
        report = {item["file"]: item for item in response.json()["files"]}
        assert report["inside.yaml"]["outcome"] == "unchanged"  # registered by the import at start
        assert report["escape.yaml"]["outcome"] == "refused"
        assert any("outside the import folder" in r for r in report["escape.yaml"]["reasons"])
        assert str(outside) not in response.text  # where it points is not told either
        assert [row.id for row in await registry.cluster_rows()] == ["inside"]


async def test_v12_import_reply_and_log_echo_no_file_values(
    tmp_path: Path, sqlite_url: str, nats_url: str, encryption_key: str, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "kubeconfigs"
    folder.mkdir()
    (folder / "kind.yaml").write_text("kind: zz-file-value-1\n")
    (folder / "api.json").write_text('{"apiVersion": "zz-file-value-2"}')
    doc = changed(kubeconfig(), "contexts", {"cluster": "zz-file-value-3"})
    (folder / "ctx.yaml").write_text(as_yaml(doc))
    (folder / "dup.yaml").write_text("zz-file-value-4: 1\nzz-file-value-4: 2\n")
    settings = make_settings(database_url=sqlite_url, nats_url=nats_url, encryption_key=encryption_key)
    caplog.set_level(logging.DEBUG)
    async with running_registry(settings.model_copy(update={"registry_import_dir": folder})) as registry:
        response = await registry.client.post("/v1/clusters:import", headers=ADMIN)
    assert response.status_code == 200, response.text
    files = response.json()["files"]
    assert [item["outcome"] for item in files] == ["refused"] * 4
    assert all(item["reasons"] for item in files)  # still says why: the problem, not the value
    logged = " ".join(f"{record.getMessage()} {record.__dict__}" for record in caplog.records)
    for n in range(1, 5):
        assert f"zz-file-value-{n}" not in response.text
        assert f"zz-file-value-{n}" not in logged


# --- V8: the dry run reads bounded answers and echoes bounded strings ----------------------------


@contextlib.asynccontextmanager
async def hostile_apiserver(git_version_bytes: int, tmp: Path) -> AsyncIterator[tuple[str, str]]:
    """A real TLS server on 127.0.0.1 whose /version carries a gitVersion of the given size;
    yields (url, CA as base64)."""
    serving = kubesim_tls.generate("hostile")
    context = kubesim_tls.server_context(serving, tmp)

    async def version(request: web.Request) -> web.StreamResponse:
        if request.path != "/version":
            return web.json_response({"kind": "APIGroupList", "groups": []})
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"major": "1", "minor": "31", "gitVersion": "v1.31.0-')
        with contextlib.suppress(ConnectionError):
            left = git_version_bytes
            while left > 0:
                await response.write(b"z" * min(left, 1024 * 1024))
                left -= 1024 * 1024
            await response.write(b'"}')
        return response

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", version)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"https://127.0.0.1:{port}", base64.b64encode(serving.ca_pem).decode()
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("size", "ok"), [(8 * 1024 * 1024, False), (20_000, True)], ids=["8 MiB answer", "20 KB gitVersion"]
)
async def test_v8_dry_run_reads_and_echoes_bounded(
    tmp_path: Path, sqlite_url: str, nats_url: str, encryption_key: str, size: int, ok: bool
) -> None:
    settings = make_settings(
        database_url=sqlite_url, nats_url=nats_url, encryption_key=encryption_key, allow_loopback_servers=True
    )
    async with hostile_apiserver(size, tmp_path) as (url, ca), running_registry(settings) as registry:
        text = as_yaml(kubeconfig(server=url, ca_b64=ca))
        response = await registry.client.post(
            "/v1/clusters", params={"dry_run": "true"}, json=create_body("hostile", text), headers=ADMIN
        )
    assert response.status_code == 200, response.text[:300]
    assert len(response.content) < 4096  # nothing of the server's payload came back
    report = response.json()["connectivity"]
    assert report["ok"] is ok, report
    if ok:
        assert report["server_version"]["git_version"].startswith("v1.31.0-zzz")
        assert len(report["server_version"]["git_version"]) <= 65
    else:
        assert "larger than" in report["error"]


# --- Bugs found on the way: the CLI on a file that is not UTF-8 ---------------------------------


@pytest.mark.parametrize("command", ["add", "rotate"])
def test_bug_cli_non_utf8_file_is_a_clear_error(tmp_path: Path, command: str) -> None:
    latin1 = tmp_path / "east.yaml"
    latin1.write_bytes(as_yaml(kubeconfig()).encode() + "# café\n".encode("latin-1"))
    args = ["clusters", "add", "--name", "East"] if command == "add" else ["clusters", "rotate", "east"]
    # The URL is never reached: the file is refused before any request.
    env = {"TRAINWATCH_API_URL": "http://127.0.0.1:9", "TRAINWATCH_API_TOKEN": "t", "COLUMNS": "200"}
    result = CliRunner().invoke(cli, [*args, "--kubeconfig", str(latin1)], env=env)
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit), result.exception  # no traceback
    assert "not UTF-8" in result.output


# --- V13: a watcher reads only the kubeconfigs of clusters whose lease it holds -----------------


async def test_v13_watcher_reads_only_clusters_it_holds_the_lease_of(registry: Harness) -> None:
    await registry.create(create_body("gpu-a"))
    await registry.create(create_body("gpu-b"))
    url = "/v1/clusters/{}/connection".format

    async def status(cluster_id: str, headers: dict[str, str]) -> int:
        return (await registry.client.get(url(cluster_id), headers=headers)).status_code

    assert await status("gpu-a", WATCHER) == 403  # the shared watcher token alone reads nothing
    holder_of_a = await registry.watcher_headers("gpu-a", replica="watcher-1")
    assert await status("gpu-a", holder_of_a) == 200
    assert await status("gpu-b", holder_of_a) == 403  # a lease on one cluster opens no other
    # What anyone on the bus knows (the owner's name from health events, the epoch from job
    # events) is not the lease's value: the nonce is missing.
    public = holder_of_a[LEASE_PROOF_HEADER].split("#")[0] + "|1"
    assert await status("gpu-a", {**WATCHER, LEASE_PROOF_HEADER: public}) == 403
    assert await status("gpu-a", {**WATCHER, LEASE_PROOF_HEADER: "watcher-1|1"}) == 403
    # The proof does not outlive the lease.
    redis = Redis.from_url(registry.settings.redis_url)
    try:
        await redis.delete(LeaseManager(redis, prefix=registry.settings.redis_prefix).lease_key("gpu-a"))
    finally:
        await redis.aclose()
    assert await status("gpu-a", holder_of_a) == 403
    # An unknown cluster is refused the same way: a refused caller learns nothing.
    assert await status("nope", holder_of_a) == 403


async def test_v10_admin_changes_through_the_api_record_who_made_them(
    registry_on: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """V10: a change made with the CLI or a script (not through the dashboard) named nobody."""
    from registry_kubeconfigs import ADMIN, create_body

    from trainwatch_common.auth import token_id

    caplog.set_level(logging.INFO, logger="trainwatch_registry.audit")
    client = registry_on.client
    await registry_on.create(create_body("audited"))
    patched = await client.patch("/v1/clusters/audited", json={"name": "Audited"}, headers=ADMIN)
    assert patched.status_code == 200
    assert (await client.delete("/v1/clusters/audited", headers=ADMIN)).status_code == 204
    changes = [r for r in caplog.records if r.getMessage() == "cluster changed by an admin"]
    assert [(r.action, r.cluster_id) for r in changes] == [  # type: ignore[attr-defined]
        ("create", "audited"),
        ("update", "audited"),
        ("remove", "audited"),
    ]
    admin_token = ADMIN["Authorization"].removeprefix("Bearer ")
    assert {r.actor for r in changes} == {token_id(admin_token)}  # type: ignore[attr-defined]
    assert admin_token not in caplog.text
