"""`trainwatch clusters join / rotate-token / leave` end to end: a kubesim cluster, the operator's
admin kubeconfig, a registry served by uvicorn, the CLI through typer's CliRunner."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import uvicorn
import yaml
from conftest import TOKENS, make_settings
from typer.testing import CliRunner

import kubesim
from trainwatch_common.testing import free_port
from trainwatch_registry.app import create_app
from trainwatch_registry.cli import app as cli
from trainwatch_registry.join import MANAGED_BY


@pytest.fixture
async def api_url(sqlite_url: str, nats_url: str, encryption_key: str) -> AsyncIterator[str]:
    settings = make_settings(
        database_url=sqlite_url, nats_url=nats_url, encryption_key=encryption_key, allow_loopback_servers=True
    )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings, tokens=TOKENS), host="127.0.0.1", port=port, log_config=None)
    )
    task = asyncio.create_task(server.serve(), name="registry-uvicorn")
    while not server.started:
        if task.done():
            await task
        await asyncio.sleep(0.01)  # polling uvicorn's start flag, not standing in for a result
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
async def sim() -> AsyncIterator[kubesim.Simulator]:
    async with kubesim.Simulator() as s:
        yield s


@pytest.fixture
async def target(sim: kubesim.Simulator) -> kubesim.Cluster:
    return await sim.add_cluster("gpu-a", kinds=[kubesim.PYTORCHJOB, kubesim.BATCH_JOB, kubesim.JOBSET])


async def _run(*args: str, url: str, stdin: str | None = None) -> tuple[int, str]:
    env = {"TRAINWATCH_API_URL": url, "TRAINWATCH_API_TOKEN": "admin-token", "COLUMNS": "200"}
    result = await asyncio.to_thread(CliRunner().invoke, cli, list(args), env=env, input=stdin)
    return result.exit_code, result.output


def _names(cluster: kubesim.Cluster, kind: kubesim.KindSpec) -> list[str]:
    return [o["metadata"]["name"] for o in cluster.store.list_objects(kind)]


async def test_join_test_rotate_and_leave(api_url: str, target: kubesim.Cluster, tmp_path: Path) -> None:
    operator = target.write_kubeconfig(tmp_path / "operator.yaml")
    admin_token = target.token

    code, output = await _run(
        "clusters", "join", "--context", "gpu-a", "--kubeconfig", str(operator), "--dry-run", "-o", "json",
        url=api_url,
    )  # fmt: skip
    assert code == 0, output
    planned = json.loads(output)
    assert [(o["kind"], o["action"]) for o in planned["objects"]] == [
        ("Namespace", "create"),
        ("ServiceAccount", "create"),
        ("ClusterRole", "create"),
        ("ClusterRoleBinding", "create"),
    ]
    assert _names(target, kubesim.SERVICE_ACCOUNT) == []  # a dry run creates nothing
    code, output = await _run("clusters", "list", url=api_url)
    assert "0 cluster(s)" in output

    code, output = await _run(
        "clusters", "join", "--context", "gpu-a", "--kubeconfig", str(operator), "--token-lifetime", "720h",
        "-o", "yaml", url=api_url,
    )  # fmt: skip
    assert code == 0, output
    joined = yaml.safe_load(output)
    assert joined["cluster_id"] == "gpu-a"
    assert joined["revision"] == 1
    assert joined["token_expires_at"]
    assert admin_token not in output
    assert [o["action"] for o in joined["objects"]] == ["created"] * 4
    role = target.store.get(kubesim.CLUSTER_ROLE, "", "trainwatch-reader")
    assert role["metadata"]["labels"] == MANAGED_BY
    assert _names(target, kubesim.SERVICE_ACCOUNT) == ["trainwatch"]

    code, output = await _run("clusters", "get", "gpu-a", "-o", "json", url=api_url)
    assert code == 0, output
    expires = datetime.fromisoformat(json.loads(output)["credentials_expire_at"])
    assert abs((expires - datetime.now(UTC)).total_seconds() - 720 * 3600) < 120  # the TokenRequest's exp

    # The registration works with the minted token alone: the operator's admin token is revoked.
    target.rotate_token()
    code, output = await _run("clusters", "test", "gpu-a", url=api_url)
    assert code == 0, output
    assert "ok" in output
    assert "pytorchjob: allowed" in output
    sa_user = "system:serviceaccount:trainwatch:trainwatch"
    assert target.accounts.authorize(sa_user, "watch", "kubeflow.org", "pytorchjobs")
    assert not target.accounts.authorize(sa_user, "create", "kubeflow.org", "pytorchjobs")

    operator = target.write_kubeconfig(tmp_path / "operator.yaml")  # the operator's new credentials
    code, output = await _run(
        "clusters", "rotate-token", "gpu-a", "--context", "gpu-a", "--kubeconfig", str(operator),
        "-o", "json",
        url=api_url,
    )  # fmt: skip
    assert code == 0, output
    assert json.loads(output)["revision"] == 2
    code, output = await _run("clusters", "test", "gpu-a", url=api_url)
    assert code == 0, output

    code, output = await _run(
        "clusters", "leave", "gpu-a", "--context", "gpu-a", "--kubeconfig", str(operator), "--yes",
        url=api_url,
    )  # fmt: skip
    assert code == 0, output
    assert "left gpu-a" in output
    code, output = await _run("clusters", "get", "gpu-a", url=api_url)
    assert code == 1
    assert "404" in output
    assert _names(target, kubesim.NAMESPACE) == []
    assert _names(target, kubesim.SERVICE_ACCOUNT) == []
    assert _names(target, kubesim.CLUSTER_ROLE) == []
    assert _names(target, kubesim.CLUSTER_ROLE_BINDING) == []


async def test_join_reuses_existing_objects_and_leave_keeps_what_it_did_not_create(
    api_url: str, target: kubesim.Cluster, tmp_path: Path
) -> None:
    operator = target.write_kubeconfig(tmp_path / "operator.yaml")
    target.store.create(kubesim.NAMESPACE, {"metadata": {"name": "observability"}})
    code, output = await _run(
        "clusters", "join", "--context", "gpu-a", "--kubeconfig", str(operator), "--id", "gpu-a",
        "--namespace", "observability", "--secret-token", url=api_url,
    )  # fmt: skip
    assert code == 0, output
    assert "exists (reused)" in output
    assert "joined gpu-a" in output
    secret = target.store.get(kubesim.SECRET, "observability", "trainwatch-token")
    assert secret["type"] == kubesim.SERVICE_ACCOUNT_TOKEN_TYPE
    code, output = await _run("clusters", "test", "gpu-a", url=api_url)
    assert code == 0, output

    # Joining again is idempotent on the cluster's side; the registry refuses the duplicate id.
    code, output = await _run(
        "clusters", "join", "--context", "gpu-a", "--kubeconfig", str(operator), "--dry-run",
        "--namespace", "observability", url=api_url,
    )  # fmt: skip
    assert code == 0, output
    assert "create" not in output.replace("created", "")

    code, output = await _run(
        "clusters", "leave", "gpu-a", "--context", "gpu-a", "--kubeconfig", str(operator), "--yes",
        url=api_url,
    )  # fmt: skip
    assert code == 0, output
    assert "kept (not created by trainwatch)" in output
    assert _names(target, kubesim.NAMESPACE) == ["observability"]  # it was there before the join
    assert target.store.list_objects(kubesim.SECRET, namespace="observability") == []
    assert _names(target, kubesim.SERVICE_ACCOUNT) == []


async def test_leave_refuses_a_context_of_another_cluster(
    api_url: str, sim: kubesim.Simulator, target: kubesim.Cluster, tmp_path: Path
) -> None:
    operator = target.write_kubeconfig(tmp_path / "operator.yaml")
    code, output = await _run(
        "clusters", "join", "--context", "gpu-a", "--kubeconfig", str(operator), url=api_url
    )
    assert code == 0, output
    other = await sim.add_cluster("gpu-b", kinds=[kubesim.PYTORCHJOB])
    elsewhere = other.write_kubeconfig(tmp_path / "other.yaml")
    code, output = await _run(
        "clusters", "leave", "gpu-a", "--context", "gpu-b", "--kubeconfig", str(elsewhere), "--yes",
        url=api_url,
    )  # fmt: skip
    assert code == 1
    assert "is registered at" in output
    assert _names(target, kubesim.SERVICE_ACCOUNT) == ["trainwatch"]
