"""One registration per API server, enforced by the registry itself (issue 20): a second
registration of an API server, or a rotation onto another one, is a 409 that names the reason and
the clusters already there, unless the caller passes force=true. Every API client (the CLI, the
dashboard, a script) gets the same answer. Real SQLite and PostgreSQL, a real nats-server."""

from __future__ import annotations

from typing import Any

from conftest import Harness
from registry_kubeconfigs import ADMIN, as_yaml, create_body, kubeconfig, server_of

SERVER = "https://gpu.example.com:6443"


def _at(server: str, token: str = "sim-token-1234") -> str:
    return as_yaml(kubeconfig(server=server, token=token))


def _conflict(response: Any, expected_type: str) -> dict[str, Any]:
    assert response.status_code == 409, response.text
    (item,) = response.json()["detail"]
    assert item["type"] == expected_type
    assert "force=true" in item["msg"]
    ctx: dict[str, Any] = item["ctx"]
    assert ctx["reason"] in item["msg"]
    return ctx


async def test_a_second_registration_of_an_api_server_is_refused_unless_forced(registry_on: Harness) -> None:
    client = registry_on.client
    await registry_on.create(create_body("gpu-a", _at(SERVER)))

    # The same apiserver however its URL is spelled: host case, an explicit port, a trailing slash.
    for spelling in (SERVER, "https://GPU.example.com:6443/", "https://gpu.example.com:6443//"):
        for params in ({}, {"dry_run": "true"}):  # the dry run answers as the real call would
            response = await client.post(
                "/v1/clusters", json=create_body("gpu-a-again", _at(spelling)), params=params, headers=ADMIN
            )
            ctx = _conflict(response, "cluster.duplicate_server")
            assert ctx["clusters"] == ["gpu-a"]
            assert "publishes each of its jobs twice" in ctx["reason"]
    assert [row.id for row in await registry_on.cluster_rows()] == ["gpu-a"]
    assert len(await registry_on.outbox_rows()) == 1  # nothing written for the refusals

    forced = await client.post(
        "/v1/clusters", json=create_body("gpu-a-again", _at(SERVER)), params={"force": "true"}, headers=ADMIN
    )
    assert forced.status_code == 201, forced.text
    third = await client.post(
        "/v1/clusters",
        json=create_body("gpu-a-third", _at(SERVER)),
        params={"dry_run": "true"},
        headers=ADMIN,
    )
    assert _conflict(third, "cluster.duplicate_server")["clusters"] == ["gpu-a", "gpu-a-again"]

    # Another port is another apiserver; a removed registration frees its server.
    other_port = await client.post(
        "/v1/clusters", json=create_body("gpu-b", _at(SERVER[:-4] + "7443")), headers=ADMIN
    )
    assert other_port.status_code == 201, other_port.text
    for cluster_id in ("gpu-a", "gpu-a-again"):
        assert (await client.delete(f"/v1/clusters/{cluster_id}", headers=ADMIN)).status_code == 204
    again = await client.post("/v1/clusters", json=create_body("gpu-c", _at(SERVER)), headers=ADMIN)
    assert again.status_code == 201, again.text


async def test_a_rotation_onto_another_api_server_is_refused_unless_forced(registry_on: Harness) -> None:
    client = registry_on.client
    created = await registry_on.create(create_body("gpu-a"))
    await registry_on.create(create_body("gpu-b"))

    # New credentials for the same apiserver: no question asked.
    renewed = await client.patch(
        "/v1/clusters/gpu-a", json={"kubeconfig": _at(server_of("gpu-a"), token="renewed")}, headers=ADMIN
    )
    assert renewed.status_code == 200, renewed.text
    assert renewed.json()["revision"] == created["revision"] + 1

    elsewhere = {"kubeconfig": _at("https://moved.example.com:6443")}
    ctx = _conflict(
        await client.patch("/v1/clusters/gpu-a", json=elsewhere, headers=ADMIN), "cluster.server_changed"
    )
    assert ctx["server"] == "https://moved.example.com:6443"
    assert ctx["clusters"] == []
    assert f"but gpu-a is registered at {server_of('gpu-a')}" in ctx["reason"]
    onto_b = await client.patch(
        "/v1/clusters/gpu-a", json={"kubeconfig": _at(server_of("gpu-b"))}, headers=ADMIN
    )
    assert _conflict(onto_b, "cluster.server_changed")["clusters"] == ["gpu-b"]  # says who is there
    current = (await client.get("/v1/clusters/gpu-a", headers=ADMIN)).json()
    assert (current["server"], current["revision"]) == (server_of("gpu-a"), created["revision"] + 1)

    moved = await client.patch("/v1/clusters/gpu-a", json=elsewhere, params={"force": "true"}, headers=ADMIN)
    assert moved.status_code == 200, moved.text
    assert moved.json()["server"] == "https://moved.example.com:6443"
