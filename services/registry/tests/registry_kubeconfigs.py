"""Kubeconfig documents for tests: a valid one, and helpers to break it in one place."""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

import yaml
from registry_pki import Issued, TestAuthority

ADMIN = {"Authorization": "Bearer admin-token"}
VIEWER = {"Authorization": "Bearer viewer-token"}
WATCHER = {"Authorization": "Bearer watcher-token"}


@functools.cache
def authority() -> TestAuthority:
    return TestAuthority()


@functools.cache
def client_cert() -> Issued:
    return authority().issue("trainwatch", server=False)


def kubeconfig(
    *,
    server: str = "https://k8s.example.com:6443",
    token: str = "sim-token-1234",
    ca_b64: str | None = None,
    extra_contexts: bool = True,
) -> dict[str, Any]:
    """A realistic kubeconfig with a second, unrelated context (which intake must drop)."""
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "main",
                "cluster": {"server": server, "certificate-authority-data": ca_b64 or authority().cert_b64},
            },
        ],
        "users": [{"name": "ops", "user": {"token": token}}],
        "contexts": [{"name": "main", "context": {"cluster": "main", "user": "ops", "namespace": "ml"}}],
        "current-context": "main",
        "preferences": {},
    }
    if extra_contexts:
        doc["clusters"].append({"name": "other", "cluster": {"server": "https://other.example.com"}})
        doc["users"].append({"name": "other-admin", "user": {"token": "other-secret-token"}})
        doc["contexts"].append({"name": "other", "context": {"cluster": "other", "user": "other-admin"}})
    return doc


def as_yaml(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False)


def as_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc)


def changed(doc: dict[str, Any], section: str, updates: dict[str, Any], *, index: int = 0) -> dict[str, Any]:
    """A copy with ``updates`` merged into the ``index``-th entry of clusters / users / contexts.

    A value of None removes the key.
    """
    body = {"clusters": "cluster", "users": "user", "contexts": "context"}[section]
    result = copy.deepcopy(doc)
    target = result[section][index][body]
    for key, value in updates.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    return result


def server_of(cluster_id: str) -> str:
    """The API server of ``create_body(cluster_id)``'s default kubeconfig."""
    return f"https://{cluster_id}.k8s.example.com:6443"


def create_body(cluster_id: str = "gpu-east", text: str | None = None, **fields: Any) -> dict[str, Any]:
    """A registration body; by default each id has an API server of its own, as real clusters do
    (the registry refuses a second registration of one API server unless forced)."""
    body: dict[str, Any] = {
        "id": cluster_id,
        "name": cluster_id.upper(),
        "kubeconfig": text or as_yaml(kubeconfig(server=server_of(cluster_id))),
    }
    body.update(fields)
    return body
