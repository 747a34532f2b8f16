"""The REST API against real SQLite and PostgreSQL: CRUD, pagination, auth, no secret out."""

from __future__ import annotations

import pytest
from conftest import Harness
from registry_kubeconfigs import ADMIN, VIEWER, WATCHER, as_json, as_yaml, create_body, kubeconfig, server_of

SECRET = "sim-token-1234"


async def test_create_get_list_update_delete(registry_on: Harness) -> None:
    client = registry_on.client
    created = await registry_on.create(
        create_body("gpu-east", labels={"region": "east"}, description="A100s")
    )
    assert created["revision"] == 1
    assert created["context"] == "main"
    assert created["server"] == "https://gpu-east.k8s.example.com:6443"
    assert created["auth_method"] == "token"
    assert created["connection_fingerprint"].startswith("hmac-sha256:")
    assert "kubeconfig" not in created

    fetched = (await client.get("/v1/clusters/gpu-east", headers=VIEWER)).json()
    assert fetched["name"] == "GPU-EAST"
    assert fetched["labels"] == {"region": "east"}

    listing = (await client.get("/v1/clusters", headers=VIEWER)).json()
    assert listing["total"] == 1
    assert [c["id"] for c in listing["data"]] == ["gpu-east"]

    patched = await client.patch("/v1/clusters/gpu-east", json={"name": "GPU East"}, headers=ADMIN)
    assert patched.status_code == 200, patched.text
    assert patched.json()["revision"] == 2
    assert patched.json()["connection_fingerprint"] == created["connection_fingerprint"]

    assert (await client.delete("/v1/clusters/gpu-east", headers=ADMIN)).status_code == 204
    assert (await client.get("/v1/clusters/gpu-east", headers=VIEWER)).status_code == 404
    assert (await client.get("/v1/clusters", headers=VIEWER)).json()["total"] == 0


async def test_no_response_ever_carries_the_secret(registry_on: Harness) -> None:
    client = registry_on.client
    responses = [
        await client.post("/v1/clusters", json=create_body("a"), headers=ADMIN),
        await client.post("/v1/clusters?dry_run=true", json=create_body("b"), headers=ADMIN),
        await client.get("/v1/clusters/a", headers=VIEWER),
        await client.get("/v1/clusters", headers=VIEWER),
        await client.patch(
            "/v1/clusters/a", json={"kubeconfig": as_yaml(kubeconfig(server=server_of("a")))}, headers=ADMIN
        ),
    ]
    for response in responses:
        assert response.status_code < 300, response.text
        assert SECRET not in response.text
        assert "other-secret-token" not in response.text


async def test_json_kubeconfig_is_accepted_and_equivalent_to_yaml(registry: Harness) -> None:
    from_yaml = await registry.create(create_body("from-yaml", as_yaml(kubeconfig())))
    # The same API server twice, on purpose: force=true is how an API client says so.
    response = await registry.client.post(
        "/v1/clusters",
        json=create_body("from-json", as_json(kubeconfig())),
        params={"force": "true"},
        headers=ADMIN,
    )
    assert response.status_code == 201, response.text
    assert from_yaml["connection_fingerprint"] == response.json()["connection_fingerprint"]


async def test_a_context_can_be_chosen(registry: Harness) -> None:
    created = await registry.create(create_body("other", context="other"))
    assert created["context"] == "other"
    assert created["server"] == "https://other.example.com"


async def test_keyset_pagination_and_label_selection(registry_on: Harness) -> None:
    for index in range(7):
        await registry_on.create(create_body(f"c{index}", labels={"tier": "gpu" if index % 2 else "cpu"}))
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = (await registry_on.client.get("/v1/clusters", params=params, headers=VIEWER)).json()
        assert page["total"] == 7
        seen += [c["id"] for c in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"c{i}" for i in range(7)]
    gpus = (await registry_on.client.get("/v1/clusters", params={"label": "tier=gpu"}, headers=VIEWER)).json()
    assert [c["id"] for c in gpus["data"]] == ["c1", "c3", "c5"]
    assert gpus["total"] == 3


async def test_duplicate_id_is_a_conflict(registry: Harness) -> None:
    await registry.create(create_body("dup"))
    response = await registry.client.post("/v1/clusters", json=create_body("dup"), headers=ADMIN)
    assert response.status_code == 409
    assert "already registered" in response.json()["detail"]


async def test_expected_revision_guards_updates(registry: Harness) -> None:
    await registry.create(create_body("guarded"))
    stale = await registry.client.patch(
        "/v1/clusters/guarded", json={"name": "x", "expected_revision": 5}, headers=ADMIN
    )
    assert stale.status_code == 409
    fresh = await registry.client.patch(
        "/v1/clusters/guarded", json={"name": "x", "expected_revision": 1}, headers=ADMIN
    )
    assert fresh.status_code == 200


async def test_an_update_that_changes_nothing_keeps_the_revision(registry: Harness) -> None:
    created = await registry.create(create_body("same"))
    again = await registry.client.patch(
        "/v1/clusters/same",
        json={"name": created["name"], "kubeconfig": as_yaml(kubeconfig(server=server_of("same")))},
        headers=ADMIN,
    )
    assert again.json()["revision"] == 1
    assert len(await registry.outbox_rows()) == 1


async def test_removed_id_keeps_counting_revisions_when_registered_again(registry_on: Harness) -> None:
    await registry_on.create(create_body("phoenix"))
    await registry_on.client.delete("/v1/clusters/phoenix", headers=ADMIN)
    again = await registry_on.create(create_body("phoenix"))
    assert again["revision"] == 3  # added=1, removed=2, added again=3: event ids never repeat
    assert [row.msg_id for row in await registry_on.outbox_rows()] == [
        "cluster.phoenix.1",
        "cluster.phoenix.2",
        "cluster.phoenix.3",
    ]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/clusters", None),
        ("GET", "/v1/clusters/x", None),
        ("POST", "/v1/clusters", create_body("x")),
        ("PATCH", "/v1/clusters/x", {"name": "y"}),
        ("DELETE", "/v1/clusters/x", None),
        ("GET", "/v1/clusters/x/connection", None),
        ("POST", "/v1/clusters/x/test", None),
        ("POST", "/v1/clusters:import", None),
    ],
)
async def test_no_token_is_401(registry: Harness, method: str, path: str, body: object) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic YWRtaW4="}):
        response = await registry.client.request(method, path, json=body, headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    ("method", "path", "headers"),
    [
        ("POST", "/v1/clusters", VIEWER),
        ("POST", "/v1/clusters", WATCHER),
        ("PATCH", "/v1/clusters/x", VIEWER),
        ("DELETE", "/v1/clusters/x", VIEWER),
        ("GET", "/v1/clusters", WATCHER),
        ("GET", "/v1/clusters/x/connection", VIEWER),
        ("GET", "/v1/clusters/x/connection", ADMIN),
        ("POST", "/v1/clusters/x/test", VIEWER),
    ],
)
async def test_wrong_role_is_403(registry: Harness, method: str, path: str, headers: dict[str, str]) -> None:
    body = create_body("x") if method == "POST" and path == "/v1/clusters" else {"name": "y"}
    response = await registry.client.request(method, path, json=body, headers=headers)
    assert response.status_code == 403
    assert "role" in response.json()["detail"]


async def test_health_and_metrics_are_open(registry: Harness) -> None:
    assert (await registry.client.get("/healthz")).status_code == 200
    metrics = await registry.client.get("/metrics")
    assert metrics.status_code == 200
    assert "trainwatch_registry" in metrics.text
    ready = await registry.client.get("/readyz")
    assert ready.json()["checks"]["database"] == "ok"


async def test_oversized_body_is_413(registry: Harness) -> None:
    body = create_body("big", "x" * (5 * 1024 * 1024))
    response = await registry.client.post("/v1/clusters", json=body, headers=ADMIN)
    assert response.status_code == 413
    assert await registry.cluster_rows() == []
