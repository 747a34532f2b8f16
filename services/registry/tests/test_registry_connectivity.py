"""Connectivity tests and dry runs against kubesim (the real wire protocol, TLS, bearer tokens)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import yaml
from conftest import Harness, make_settings, running_registry
from registry_fake_apiserver import fake_apiserver
from registry_kubeconfigs import ADMIN, as_yaml, create_body, kubeconfig

import kubesim
from trainwatch_common.testing import free_port


@pytest.fixture
async def loopback_registry(sqlite_url: str, nats_url: str, encryption_key: str) -> AsyncIterator[Harness]:
    settings = make_settings(
        database_url=sqlite_url, nats_url=nats_url, encryption_key=encryption_key, allow_loopback_servers=True
    )
    async with running_registry(settings) as harness:
        yield harness


@pytest.fixture
async def sim_cluster() -> AsyncIterator[kubesim.Cluster]:
    async with kubesim.Simulator() as sim:
        yield await sim.add_cluster(
            "alpha", kinds=[kubesim.PYTORCHJOB, kubesim.BATCH_JOB, kubesim.MPIJOB_V2BETA1]
        )


async def test_dry_run_reports_version_and_kinds_and_stores_nothing(
    loopback_registry: Harness, sim_cluster: kubesim.Cluster
) -> None:
    body = create_body("alpha", sim_cluster.kubeconfig_yaml())
    response = await loopback_registry.client.post(
        "/v1/clusters", params={"dry_run": "true"}, json=body, headers=ADMIN
    )
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["dry_run"] is True
    assert result["cluster"]["id"] == "alpha"
    report = result["connectivity"]
    assert report["ok"] is True, report
    assert report["server_version"]["git_version"].startswith("v1.")
    assert report["kinds_served"] == ["job", "mpijob", "pytorchjob"]
    assert report["kinds"] == {"job": "allowed", "mpijob": "allowed", "pytorchjob": "allowed"}
    assert await loopback_registry.cluster_rows() == []
    assert await loopback_registry.outbox_rows() == []


async def test_test_endpoint_uses_the_stored_kubeconfig(
    loopback_registry: Harness, sim_cluster: kubesim.Cluster
) -> None:
    await loopback_registry.create(create_body("alpha", sim_cluster.kubeconfig_yaml()))
    rows_before = await loopback_registry.cluster_rows()
    response = await loopback_registry.client.post("/v1/clusters/alpha/test", headers=ADMIN)
    assert response.status_code == 200
    assert response.json()["ok"] is True
    assert response.json()["kinds_served"] == ["job", "mpijob", "pytorchjob"]
    assert await loopback_registry.cluster_rows() == rows_before
    assert len(await loopback_registry.outbox_rows()) == 1


async def test_rejected_credentials_are_reported(
    loopback_registry: Harness, sim_cluster: kubesim.Cluster
) -> None:
    body = create_body("alpha", sim_cluster.kubeconfig_yaml(token="not-the-token"))
    result = (
        await loopback_registry.client.post("/v1/clusters?dry_run=true", json=body, headers=ADMIN)
    ).json()
    assert result["connectivity"]["ok"] is False
    assert "401" in result["connectivity"]["error"]


async def test_an_unknown_ca_fails_tls_verification(
    loopback_registry: Harness, sim_cluster: kubesim.Cluster
) -> None:
    doc = sim_cluster.kubeconfig()
    doc["clusters"][0]["cluster"]["certificate-authority-data"] = kubeconfig()["clusters"][0]["cluster"][
        "certificate-authority-data"
    ]
    body = create_body("alpha", yaml.safe_dump(doc))
    result = (
        await loopback_registry.client.post("/v1/clusters?dry_run=true", json=body, headers=ADMIN)
    ).json()
    assert result["connectivity"]["ok"] is False
    assert "TLS verification failed" in result["connectivity"]["error"]


async def test_an_unreachable_server_is_reported(loopback_registry: Harness) -> None:
    body = create_body("gone", as_yaml(kubeconfig(server=f"https://127.0.0.1:{free_port()}")))
    result = (
        await loopback_registry.client.post("/v1/clusters?dry_run=true", json=body, headers=ADMIN)
    ).json()
    assert result["connectivity"]["ok"] is False
    assert "cannot connect" in result["connectivity"]["error"]


async def test_client_certificate_credentials_work(loopback_registry: Harness) -> None:
    async with fake_apiserver(require_client_cert=True) as server:
        client = server.authority.issue("trainwatch", server=False)
        doc = kubeconfig(server=server.url, ca_b64=server.authority.cert_b64, extra_contexts=False)
        doc["users"][0]["user"] = {
            "client-certificate-data": client.cert_b64,
            "client-key-data": client.key_b64,
        }
        result = (
            await loopback_registry.client.post(
                "/v1/clusters?dry_run=true", json=create_body("mtls", as_yaml(doc)), headers=ADMIN
            )
        ).json()
    assert result["cluster"]["auth_method"] == "client-certificate"
    assert result["connectivity"]["ok"] is True, result
    assert result["connectivity"]["kinds_served"] == ["job", "jobset", "mpijob", "pytorchjob", "tfjob"]


async def test_a_tightened_policy_refuses_to_test_a_loopback_cluster(
    sqlite_url: str, nats_url: str, encryption_key: str, sim_cluster: kubesim.Cluster
) -> None:
    permissive = make_settings(
        database_url=sqlite_url, nats_url=nats_url, encryption_key=encryption_key, allow_loopback_servers=True
    )
    async with running_registry(permissive) as before:
        await before.create(create_body("alpha", sim_cluster.kubeconfig_yaml()))
    strict = make_settings(database_url=sqlite_url, nats_url=nats_url, encryption_key=encryption_key)
    async with running_registry(strict) as after:
        response = await after.client.post("/v1/clusters/alpha/test", headers=ADMIN)
    assert response.status_code == 422
    assert response.json()["detail"][0]["type"] == "kubeconfig.server_loopback"


async def test_credentials_without_rbac_fail_the_test_per_kind(
    loopback_registry: Harness, sim_cluster: kubesim.Cluster
) -> None:
    # A real apiserver: discovery answers any authenticated user; every LIST/WATCH of a kind is 403.
    no_rbac = sim_cluster.add_token(allowed=False)
    body = create_body("alpha", sim_cluster.kubeconfig_yaml(token=no_rbac))
    result = (
        await loopback_registry.client.post("/v1/clusters?dry_run=true", json=body, headers=ADMIN)
    ).json()
    report = result["connectivity"]
    assert report["ok"] is False, report
    assert report["kinds_served"] == ["job", "mpijob", "pytorchjob"]
    assert report["kinds"] == {"job": "forbidden", "mpijob": "forbidden", "pytorchjob": "forbidden"}
    assert "403" in report["error"]
    assert "job, mpijob, pytorchjob" in report["error"]

    await loopback_registry.create(create_body("alpha", sim_cluster.kubeconfig_yaml(token=no_rbac)))
    tested = (await loopback_registry.client.post("/v1/clusters/alpha/test", headers=ADMIN)).json()
    assert tested["ok"] is False
    assert tested["kinds"]["pytorchjob"] == "forbidden"


async def test_a_kind_whose_storage_is_initializing_counts_as_allowed(loopback_registry: Harness) -> None:
    async with kubesim.Simulator() as sim:
        cluster = await sim.add_cluster("fresh", kinds=[kubesim.PYTORCHJOB], storage_init_seconds=30)
        body = create_body("fresh", cluster.kubeconfig_yaml())
        result = (
            await loopback_registry.client.post("/v1/clusters?dry_run=true", json=body, headers=ADMIN)
        ).json()
        assert any(status == 429 for _, _, status in cluster.requests)  # authorized, then 429
    assert result["connectivity"]["ok"] is True
    assert result["connectivity"]["kinds"] == {"pytorchjob": "allowed"}


def test_clusters_list_shows_forbidden_kinds_as_not_ok() -> None:
    from trainwatch_registry.cli import _health_state

    forbidden = {
        "reachable": True,
        "kinds": {"pytorchjob": {"state": "forbidden"}, "tfjob": {"state": "not_installed"}},
    }
    assert "forbidden" in _health_state(forbidden)
    assert "ok" in _health_state({"reachable": True, "kinds": {"pytorchjob": {"state": "watching"}}})
    assert "down" in _health_state({"reachable": False})
