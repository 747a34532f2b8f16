"""The CLI's checks before it registers: a connection check (`--allow-unreachable` to skip the
refusal), one registration per API server (`--force`), and a rotation that stays on its cluster.
A kubesim cluster, a registry served by uvicorn on loopback, the CLI through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

from registry_kubeconfigs import as_yaml, kubeconfig
from test_registry_join import _run, api_url, sim, target

import kubesim
from trainwatch_common.testing import free_port

__all__ = ["api_url", "sim", "target"]  # the fixtures, shared with the join tests


async def _cluster_ids(api_url: str) -> list[str]:
    code, output = await _run("clusters", "list", "-o", "json", url=api_url)
    assert code == 0, output
    return [c["id"] for c in json.loads(output)]


async def test_add_refuses_a_cluster_it_cannot_reach_unless_allowed(api_url: str, tmp_path: Path) -> None:
    closed = tmp_path / "closed.yaml"
    closed.write_text(as_yaml(kubeconfig(server=f"https://127.0.0.1:{free_port()}")))  # nothing listens

    code, output = await _run("clusters", "add", "--name", "Closed", "--kubeconfig", str(closed), url=api_url)
    assert code == 2, output
    assert "the connection check of closed failed" in output
    assert "nothing registered" in output
    assert "--allow-unreachable" in output
    assert await _cluster_ids(api_url) == []

    code, output = await _run(
        "clusters", "add", "--name", "Closed", "--kubeconfig", str(closed), "--allow-unreachable", url=api_url
    )
    assert code == 0, output
    assert "registering it anyway" in output
    assert "registered closed at revision 1" in output
    assert await _cluster_ids(api_url) == ["closed"]


async def test_add_refuses_a_cluster_whose_credentials_the_check_refuses(
    api_url: str, target: kubesim.Cluster, tmp_path: Path
) -> None:
    target.forbid("pytorchjobs.kubeflow.org")  # reachable, but the credentials cannot list a kind
    path = target.write_kubeconfig(tmp_path / "gpu-a.yaml")
    code, output = await _run("clusters", "add", "--name", "GPU A", "--kubeconfig", str(path), url=api_url)
    assert code == 2, output
    assert "pytorchjob: forbidden" in output
    assert await _cluster_ids(api_url) == []


async def test_add_and_join_refuse_an_api_server_registered_already(
    api_url: str, target: kubesim.Cluster, tmp_path: Path
) -> None:
    path = target.write_kubeconfig(tmp_path / "gpu-a.yaml")
    code, output = await _run("clusters", "add", "--name", "GPU A", "--kubeconfig", str(path), url=api_url)
    assert code == 0, output  # reachable: no flag needed
    assert "registered gpu-a" in output

    code, output = await _run(
        "clusters", "add", "--name", "GPU A again", "--kubeconfig", str(path), url=api_url
    )
    assert code == 1, output
    assert f"{target.url} is already registered as gpu-a" in output
    assert "--force" in output
    code, output = await _run(
        "clusters", "add", "--name", "GPU A again", "--kubeconfig", str(path), "--dry-run", url=api_url
    )
    assert code == 1, output  # the dry run says what the real run would refuse
    assert "already registered as gpu-a" in output
    assert await _cluster_ids(api_url) == ["gpu-a"]

    # join checks before it creates anything in the cluster
    code, output = await _run(
        "clusters",
        "join",
        "--context",
        "gpu-a",
        "--kubeconfig",
        str(path),
        "--id",
        "gpu-a-joined",
        url=api_url,
    )
    assert code == 1, output
    assert "already registered as gpu-a" in output
    assert target.store.list_objects(kubesim.SERVICE_ACCOUNT) == []
    assert await _cluster_ids(api_url) == ["gpu-a"]

    code, output = await _run(
        "clusters", "add", "--name", "GPU A again", "--kubeconfig", str(path), "--force", url=api_url
    )
    assert code == 0, output
    assert "registering anyway: --force" in output
    code, output = await _run(
        "clusters", "join", "--context", "gpu-a", "--kubeconfig", str(path), "--id", "gpu-a-joined",
        "--force", url=api_url,
    )  # fmt: skip
    assert code == 0, output
    assert "already registered as gpu-a, gpu-a-again" in output
    assert await _cluster_ids(api_url) == ["gpu-a", "gpu-a-again", "gpu-a-joined"]


async def test_join_registers_a_cluster_the_registry_cannot_check_only_when_allowed(
    api_url: str, target: kubesim.Cluster, tmp_path: Path
) -> None:
    operator = target.write_kubeconfig(tmp_path / "operator.yaml")
    target.forbid("pytorchjobs.kubeflow.org")  # the registry's check of the new token fails
    code, output = await _run(
        "clusters", "join", "--context", "gpu-a", "--kubeconfig", str(operator), url=api_url
    )
    assert code == 1, output
    assert "nothing registered" in output
    assert "--allow-unreachable" in output
    assert await _cluster_ids(api_url) == []

    code, output = await _run(
        "clusters", "join", "--context", "gpu-a", "--kubeconfig", str(operator), "--allow-unreachable",
        url=api_url,
    )  # fmt: skip
    assert code == 0, output
    assert "registering it anyway" in output
    assert "joined gpu-a" in output
    assert await _cluster_ids(api_url) == ["gpu-a"]


async def test_rotate_refuses_a_kubeconfig_for_another_api_server(
    api_url: str, sim: kubesim.Simulator, target: kubesim.Cluster, tmp_path: Path
) -> None:
    path = target.write_kubeconfig(tmp_path / "gpu-a.yaml")
    code, output = await _run("clusters", "add", "--name", "GPU A", "--kubeconfig", str(path), url=api_url)
    assert code == 0, output
    other = await sim.add_cluster("gpu-b", kinds=[kubesim.PYTORCHJOB])
    elsewhere = other.write_kubeconfig(tmp_path / "gpu-b.yaml")

    code, output = await _run("clusters", "rotate", "gpu-a", "--kubeconfig", str(elsewhere), url=api_url)
    assert code == 1, output
    assert f"the new kubeconfig points at {other.url}, but gpu-a is registered at {target.url}" in output
    assert "nothing changed" in output
    code, output = await _run("clusters", "get", "gpu-a", "-o", "json", url=api_url)
    assert json.loads(output)["server"] == target.url
    assert json.loads(output)["revision"] == 1

    target.rotate_token()  # new credentials for the same server: no question asked
    renewed = target.write_kubeconfig(tmp_path / "gpu-a.yaml")
    code, output = await _run("clusters", "rotate", "gpu-a", "--kubeconfig", str(renewed), url=api_url)
    assert code == 0, output
    assert "revision 2" in output

    code, output = await _run(
        "clusters", "rotate", "gpu-a", "--kubeconfig", str(elsewhere), "--force", url=api_url
    )
    assert code == 0, output
    assert "rotating anyway: --force" in output
    code, output = await _run("clusters", "get", "gpu-a", "-o", "json", url=api_url)
    assert json.loads(output)["server"] == other.url
