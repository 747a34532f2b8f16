"""ServiceAccounts, TokenRequest, token Secrets and RBAC by ClusterRoles, on the wire."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import orjson

import kubesim

Client = Any  # conftest.Client: conftest modules are not importable when suites run together

NS = "trainwatch"
ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "reader"},
    "rules": [
        {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch"]},
    ],
}


def binding(name: str = "reader", namespace: str = NS, sa: str = "watcher") -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
    }


async def _setup(client: Client) -> None:
    assert (await client.request("POST", "/api/v1/namespaces", {"metadata": {"name": NS}}))[0] == 201
    sa = {"metadata": {"name": "watcher"}}
    assert (await client.request("POST", f"/api/v1/namespaces/{NS}/serviceaccounts", sa))[0] == 201
    assert (await client.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", ROLE))[0] == 201
    crb = binding()
    assert (await client.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", crb))[
        0
    ] == 201


async def _token(client: Client, seconds: int | None = 3600) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    if seconds is not None:
        body["spec"]["expirationSeconds"] = seconds
    code, tr = await client.request("POST", f"/api/v1/namespaces/{NS}/serviceaccounts/watcher/token", body)
    assert code == 201, tr
    return tr


def _claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


async def test_create_get_delete_and_status_errors(client: Client) -> None:
    await _setup(client)
    code, again = await client.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", ROLE)
    assert code == 409
    assert again["reason"] == "AlreadyExists"
    assert again["message"] == 'clusterroles.rbac.authorization.k8s.io "reader" already exists'
    assert again["details"] == {
        "name": "reader",
        "group": "rbac.authorization.k8s.io",
        "kind": "clusterroles",
    }
    code, sa_again = await client.request(
        "POST", f"/api/v1/namespaces/{NS}/serviceaccounts", {"metadata": {"name": "watcher"}}
    )
    assert (code, sa_again["message"]) == (409, 'serviceaccounts "watcher" already exists')
    code, ns = await client.get(f"/api/v1/namespaces/{NS}")
    assert code == 200
    assert ns["kind"] == "Namespace"
    assert "namespace" not in ns["metadata"]
    code, missing = await client.get("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/nope")
    assert code == 404
    assert missing["message"] == 'clusterrolebindings.rbac.authorization.k8s.io "nope" not found'
    assert missing["reason"] == "NotFound"
    assert (await client.request("DELETE", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/reader"))[
        0
    ] == 200
    assert (await client.get("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/reader"))[0] == 404
    # Deleting a namespace deletes what is in it.
    assert (await client.request("DELETE", f"/api/v1/namespaces/{NS}"))[0] == 200
    assert (await client.get(f"/api/v1/namespaces/{NS}/serviceaccounts/watcher"))[0] == 404
    code, gone = await client.request("DELETE", f"/api/v1/namespaces/{NS}")
    assert (code, gone["message"]) == (404, f'namespaces "{NS}" not found')


async def test_discovery_lists_the_account_kinds(client: Client) -> None:
    _, core = await client.get("/api/v1")
    by_name = {r["name"]: r for r in core["resources"]}
    assert {"namespaces", "serviceaccounts", "secrets"} <= set(by_name)
    assert by_name["serviceaccounts/token"]["verbs"] == ["create"]
    assert by_name["serviceaccounts/token"]["kind"] == "TokenRequest"
    assert by_name["namespaces"]["namespaced"] is False
    _, rbac = await client.get("/apis/rbac.authorization.k8s.io/v1")
    assert {r["name"] for r in rbac["resources"]} == {"clusterroles", "clusterrolebindings"}


async def test_token_request_mints_a_token_with_the_roles_permissions(
    client: Client, cluster: kubesim.Cluster, make_client: Callable[..., Client]
) -> None:
    await _setup(client)
    tr = await _token(client, 7200)
    assert tr["kind"] == "TokenRequest"
    assert tr["apiVersion"] == "authentication.k8s.io/v1"
    assert tr["spec"]["expirationSeconds"] == 7200
    token = tr["status"]["token"]
    claims = _claims(token)
    assert claims["sub"] == f"system:serviceaccount:{NS}:watcher"
    assert claims["exp"] - claims["iat"] == 7200
    assert tr["status"]["expirationTimestamp"].endswith("Z")
    sa_client = make_client(cluster, token)
    assert (await sa_client.get("/apis/kubeflow.org/v1/pytorchjobs"))[0] == 200
    assert (
        await sa_client.get(
            "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs", watch="1", timeoutSeconds="1"
        )
    )[0] == 200
    assert (await sa_client.get("/api/v1/pods"))[0] == 200
    assert (await sa_client.get("/apis"))[0] == 200  # discovery is for every authenticated user
    # Not in the role: 403 with RBAC's message.
    code, denied = await sa_client.get("/apis/kubeflow.org/v1/tfjobs")
    assert code == 403
    assert denied["reason"] == "Forbidden"
    assert denied["message"] == (
        f'tfjobs.kubeflow.org is forbidden: User "system:serviceaccount:{NS}:watcher" cannot list '
        'resource "tfjobs" in API group "kubeflow.org" at the cluster scope'
    )
    code, denied = await sa_client.request(
        "POST",
        "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs",
        kubesim.manifest(kubesim.PYTORCHJOB, "x", "default"),
    )
    assert code == 403
    assert (
        'cannot create resource "pytorchjobs" in API group "kubeflow.org" in the namespace "default"'
        in denied["message"]
    )
    code, denied = await sa_client.get(f"/api/v1/namespaces/{NS}/secrets")
    assert code == 403
    # Unbinding takes the permissions away at once.
    await client.request("DELETE", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/reader")
    assert (await sa_client.get("/apis/kubeflow.org/v1/pytorchjobs"))[0] == 403


async def test_token_request_validation_and_expiry(
    client: Client, cluster: kubesim.Cluster, make_client: Callable[..., Client]
) -> None:
    await _setup(client)
    body = {"spec": {"expirationSeconds": 60}}
    code, bad = await client.request("POST", f"/api/v1/namespaces/{NS}/serviceaccounts/watcher/token", body)
    assert code == 422
    assert bad["reason"] == "Invalid"
    assert "may not specify a duration less than 10 minutes" in bad["message"]
    code, missing = await client.request(
        "POST", f"/api/v1/namespaces/{NS}/serviceaccounts/nobody/token", body
    )
    assert (code, missing["message"]) == (404, 'serviceaccounts "nobody" not found')
    default = await _token(client, None)
    assert default["spec"]["expirationSeconds"] == 3600
    token = (await _token(client, 600))["status"]["token"]
    sa_client = make_client(cluster, token)
    assert (await sa_client.get("/apis/kubeflow.org/v1/pytorchjobs"))[0] == 200
    cluster.accounts.advance(601)
    code, expired = await sa_client.get("/apis/kubeflow.org/v1/pytorchjobs")
    assert (code, expired["message"]) == (401, "Unauthorized")
    # A token of a deleted (or re-created) ServiceAccount is no longer valid.
    fresh = make_client(cluster, (await _token(client))["status"]["token"])
    assert (await fresh.get("/api/v1/pods"))[0] == 200
    await client.request("DELETE", f"/api/v1/namespaces/{NS}/serviceaccounts/watcher")
    await client.request(
        "POST", f"/api/v1/namespaces/{NS}/serviceaccounts", {"metadata": {"name": "watcher"}}
    )
    assert (await fresh.get("/api/v1/pods"))[0] == 401


async def test_service_account_token_secret_is_populated(
    client: Client, cluster: kubesim.Cluster, make_client: Callable[..., Client]
) -> None:
    await _setup(client)
    secret = {
        "metadata": {
            "name": "watcher-token",
            "annotations": {"kubernetes.io/service-account.name": "watcher"},
        },
        "type": "kubernetes.io/service-account-token",
    }
    code, created = await client.request("POST", f"/api/v1/namespaces/{NS}/secrets", secret)
    assert code == 201
    assert "data" not in created  # the token controller fills it in after the create
    _, got = await client.get(f"/api/v1/namespaces/{NS}/secrets/watcher-token")
    data = {k: base64.b64decode(v) for k, v in got["data"].items()}
    assert data["ca.crt"] == cluster.ca_pem
    assert data["namespace"] == NS.encode()
    sa_uid = (await client.get(f"/api/v1/namespaces/{NS}/serviceaccounts/watcher"))[1]["metadata"]["uid"]
    assert got["metadata"]["annotations"]["kubernetes.io/service-account.uid"] == sa_uid
    token = data["token"].decode()
    assert "exp" not in _claims(token)
    sa_client = make_client(cluster, token)
    assert (await sa_client.get("/apis/kubeflow.org/v1/pytorchjobs"))[0] == 200
    cluster.accounts.advance(10 * 365 * 86400)  # never expires
    assert (await sa_client.get("/api/v1/pods"))[0] == 200
    await client.request("DELETE", f"/api/v1/namespaces/{NS}/secrets/watcher-token")
    assert (await sa_client.get("/api/v1/pods"))[0] == 401


async def test_static_tokens_keep_their_meaning(
    client: Client, cluster: kubesim.Cluster, make_client: Callable[..., Client]
) -> None:
    await _setup(client)
    noperm = make_client(cluster, cluster.add_token(allowed=False))
    assert (await noperm.get("/api/v1/pods"))[0] == 403
    assert (await make_client(cluster, "not-a-token").get("/api/v1/pods"))[0] == 401
    assert (await client.get(f"/api/v1/namespaces/{NS}/secrets"))[0] == 200
