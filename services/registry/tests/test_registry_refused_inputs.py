"""Malformed and unsafe kubeconfigs are refused with a 422 that names the problem, changing nothing.

Each case posts one kubeconfig to a running registry (SQLite + a real nats-server) and asserts:
the 422 carries the expected ``kubeconfig.<code>`` and words of the reason; no cluster row and
no outbox row were written; nothing reached the CLUSTERS stream or the KV bucket; the local
files the kubeconfig names were not touched; the command an exec plugin names never ran.
"""

from __future__ import annotations

import base64
import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Bus, Harness
from registry_kubeconfigs import ADMIN, as_json, as_yaml, authority, changed, client_cert, kubeconfig

Case = Callable[[Path], str]


def doc_case(mutate: Callable[[dict[str, Any], Path], dict[str, Any]]) -> Case:
    return lambda tmp: as_yaml(mutate(kubeconfig(), tmp))


def cluster_case(**updates: Any) -> Case:
    return doc_case(lambda doc, _: changed(doc, "clusters", updates))


def user_case(**updates: Any) -> Case:
    return doc_case(lambda doc, _: changed(doc, "users", updates))


def server_case(server: str) -> Case:
    return cluster_case(server=server)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def billion_laughs(_: Path) -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, 9):
        prev, cur = chr(ord("a") + level - 1), chr(ord("a") + level)
        lines.append(f"{cur}: &{cur} [{','.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\n" + as_yaml(kubeconfig())


def with_local_file(key: str, section: str) -> Case:
    def build(tmp: Path) -> str:
        target = tmp / "secrets" / f"{key}.pem"
        target.parent.mkdir(exist_ok=True)
        target.write_text("-----BEGIN CERTIFICATE-----\nnot really\n-----END CERTIFICATE-----\n")
        os.utime(
            target, (1_000_000_000, 1_000_000_000)
        )  # any read by us would not change mtime, but a write would
        return as_yaml(changed(kubeconfig(), section, {key: str(target)}))

    return build


def exec_plugin(tmp: Path) -> str:
    marker = tmp / "exec-ran"
    plugin = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": "/bin/sh",
        "args": ["-c", f"touch {marker}"],
    }
    return as_yaml(changed(kubeconfig(), "users", {"exec": plugin, "token": None}))


def auth_provider(tmp: Path) -> str:
    marker = tmp / "exec-ran"
    provider = {"name": "gcp", "config": {"cmd-path": "/bin/sh", "cmd-args": f"-c 'touch {marker}'"}}
    return as_yaml(changed(kubeconfig(), "users", {"auth-provider": provider, "token": None}))


def two_documents(_: Path) -> str:
    return as_yaml(kubeconfig()) + "---\n" + as_yaml(kubeconfig())


def oversized(_: Path) -> str:
    doc = kubeconfig()
    doc["preferences"] = {"padding": "x" * (1024 * 1024)}
    return as_yaml(doc)


def duplicate_context_names(_: Path) -> str:
    doc = kubeconfig()
    doc["contexts"].append(copy.deepcopy(doc["contexts"][0]))
    return as_yaml(doc)


def no_current_context(_: Path) -> str:
    doc = kubeconfig()
    del doc["current-context"]
    return as_yaml(doc)


def key_mismatch(_: Path) -> str:
    other_key = authority().issue("someone-else", server=False).key_b64
    user = {"token": None, "client-certificate-data": client_cert().cert_b64, "client-key-data": other_key}
    return as_yaml(changed(kubeconfig(), "users", user))


def deep_nesting(_: Path) -> str:
    return as_yaml(kubeconfig()) + "preferences: " + "[" * 100 + "]" * 100 + "\n"


CASES: dict[str, tuple[Case, str, str]] = {
    # id: (build the kubeconfig text, expected code, words the message must contain)
    "empty": (lambda _: "   \n", "empty", "empty"),
    "yaml list": (lambda _: "- a\n- b\n", "not_a_mapping", "single mapping"),
    "yaml scalar": (lambda _: "just a string\n", "not_a_mapping", "single mapping"),
    "json list": (lambda _: "[1, 2]", "not_a_mapping", "single mapping"),
    "broken yaml": (lambda _: "clusters: [\n  - name: a\n  cluster: {", "invalid_yaml", "invalid YAML"),
    "broken json": (lambda _: '{"clusters": [}', "invalid_json", "invalid JSON"),
    "two documents": (two_documents, "multiple_documents", "one YAML document"),
    "oversized": (oversized, "too_large", "1 MiB"),
    "billion laughs": (billion_laughs, "yaml_alias", "aliases"),
    "any alias": (lambda _: "x: &x {server: a}\nclusters: [*x]\n", "yaml_alias", "aliases"),
    "python tag": (lambda _: "x: !!python/object/apply:os.system ['true']\n", "yaml_tag", "invalid YAML"),
    "duplicate yaml key": (lambda _: "kind: Config\nkind: Config\n", "duplicate_key", "duplicate key"),
    "duplicate json key": (
        lambda _: '{"kind": "Config", "kind": "Config"}',
        "duplicate_key",
        "duplicate key",
    ),
    "deep nesting": (deep_nesting, "too_deep", "nests deeper"),
    "not a Config": (doc_case(lambda d, _: {**d, "kind": "Pod"}), "not_kubeconfig", "not 'Config'"),
    "no contexts": (doc_case(lambda d, _: {**d, "contexts": []}), "no_context", "no contexts"),
    "unknown current context": (
        doc_case(lambda d, _: {**d, "current-context": "nope"}),
        "unknown_context",
        "'nope' is not defined",
    ),
    "no current context, two contexts": (no_current_context, "no_context", "choose one"),
    "duplicate context names": (duplicate_context_names, "duplicate_name", "appears twice"),
    "missing cluster": (
        doc_case(lambda d, _: changed(d, "contexts", {"cluster": "ghost"})),
        "missing_cluster",
        "'ghost'",
    ),
    "missing user": (
        doc_case(lambda d, _: changed(d, "contexts", {"user": "ghost"})),
        "missing_user",
        "'ghost'",
    ),
    "no server": (cluster_case(server=None), "no_server", "names no server"),
    "http server": (server_case("http://k8s.example.com:6443"), "server_not_https", "must use https"),
    "credentials in url": (
        server_case("https://admin:pw@k8s.example.com"),
        "server_credentials",
        "credentials",
    ),
    "loopback ipv4": (server_case("https://127.0.0.1:6443"), "server_loopback", "loopback"),
    "loopback name": (server_case("https://localhost:6443"), "server_loopback", "loopback"),
    "loopback ipv6": (server_case("https://[::1]:6443"), "server_loopback", "loopback"),
    "loopback decimal": (server_case("https://2130706433:6443"), "server_loopback", "loopback"),
    "loopback ipv4-mapped": (server_case("https://[::ffff:127.0.0.1]/"), "server_loopback", "loopback"),
    "unspecified": (server_case("https://0.0.0.0:6443"), "server_loopback", "loopback"),
    "link-local": (server_case("https://169.254.10.1:6443"), "server_link_local", "link-local"),
    "aws metadata": (server_case("https://169.254.169.254/"), "server_metadata", "metadata"),
    "gcp metadata name": (server_case("https://metadata.google.internal/"), "server_metadata", "metadata"),
    "malformed url": (server_case("https://k8s.example.com:99999"), "server_url", "malformed"),
    "exec plugin": (exec_plugin, "exec_plugin", "runs commands"),
    "auth-provider": (auth_provider, "auth_provider", "runs commands"),
    "certificate-authority file": (
        with_local_file("certificate-authority", "clusters"),
        "local_file",
        "local file",
    ),
    "client-certificate file": (with_local_file("client-certificate", "users"), "local_file", "local file"),
    "client-key file": (with_local_file("client-key", "users"), "local_file", "local file"),
    "tokenFile": (with_local_file("tokenFile", "users"), "local_file", "local file"),
    "insecure-skip-tls-verify": (
        cluster_case(**{"insecure-skip-tls-verify": True}),
        "insecure_skip_tls_verify",
        "insecure",
    ),
    "bad base64 CA": (
        cluster_case(**{"certificate-authority-data": "not base64!"}),
        "bad_base64",
        "not valid base64",
    ),
    "CA not PEM": (
        cluster_case(**{"certificate-authority-data": b64(b"hello")}),
        "bad_pem",
        "not a PEM certificate",
    ),
    "client key not PEM": (
        user_case(**{"client-certificate-data": client_cert().cert_b64, "client-key-data": b64(b"nope")}),
        "bad_pem",
        "not a PEM private key",
    ),
    "cert without key": (
        user_case(**{"client-certificate-data": client_cert().cert_b64, "token": None}),
        "cert_without_key",
        "without its key",
    ),
    "key without cert": (
        user_case(**{"client-key-data": client_cert().key_b64}),
        "key_without_cert",
        "without its certificate",
    ),
    "key does not match cert": (key_mismatch, "key_mismatch", "does not match"),
    "control chars in token": (user_case(token="abc\x1bdef"), "token_control_chars", "control characters"),
    "newline in token": (user_case(token="abc\ndef"), "token_control_chars", "control characters"),
    "basic auth": (user_case(username="admin", password="pw", token=None), "basic_auth", "basic auth"),
    "impersonation": (user_case(**{"as": "system:admin"}), "impersonation", "impersonates"),
    "proxy-url": (cluster_case(**{"proxy-url": "http://proxy:3128"}), "proxy_url", "proxy-url"),
    "no credentials": (user_case(token=None), "no_credentials", "no credentials"),
    "unknown user field": (user_case(**{"token-exchange": "x"}), "unknown_field", "unknown field"),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
async def test_refused_with_reason_and_no_side_effect(
    case: str, registry: Harness, bus: Bus, tmp_path: Path
) -> None:
    build, code, words = CASES[case]
    text = build(tmp_path)
    files_before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in tmp_path.rglob("*.pem")}

    response = await registry.client.post(
        "/v1/clusters", json={"id": "refused", "name": "Refused", "kubeconfig": text}, headers=ADMIN
    )

    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert f"kubeconfig.{code}" in [item["type"] for item in detail], detail
    assert any(words in item["msg"] for item in detail), detail
    assert "sim-token-1234" not in response.text
    assert await registry.cluster_rows() == []
    assert await registry.outbox_rows() == []
    assert await bus.stream_messages("CLUSTERS") == 0
    assert await bus.kv_keys() == []
    assert not (tmp_path / "exec-ran").exists()
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in tmp_path.rglob("*.pem")} == files_before


async def test_a_refused_rotation_leaves_the_cluster_as_it_was(
    registry: Harness, bus: Bus, tmp_path: Path
) -> None:
    created = await registry.create({"id": "kept", "name": "Kept", "kubeconfig": as_yaml(kubeconfig())})
    rows_before = await registry.cluster_rows()
    response = await registry.client.patch(
        "/v1/clusters/kept", json={"kubeconfig": exec_plugin(tmp_path)}, headers=ADMIN
    )
    assert response.status_code == 422
    assert await registry.cluster_rows() == rows_before
    assert len(await registry.outbox_rows()) == 1
    assert (await registry.client.get("/v1/clusters/kept", headers=ADMIN)).json()["revision"] == created[
        "revision"
    ]
    assert not (tmp_path / "exec-ran").exists()


def test_at_least_thirty_cases() -> None:
    assert len(CASES) >= 30


def test_json_cases_are_json() -> None:
    assert as_json(kubeconfig()).startswith("{")
