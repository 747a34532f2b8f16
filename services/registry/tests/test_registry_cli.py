"""The `trainwatch` CLI against a registry served by uvicorn on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import uvicorn
from conftest import TOKENS, make_settings
from registry_kubeconfigs import as_yaml, kubeconfig
from typer.testing import CliRunner, Result

from trainwatch_common.testing import free_port
from trainwatch_registry.app import create_app
from trainwatch_registry.cli import app as cli


@pytest.fixture
async def api_url(sqlite_url: str, nats_url: str, encryption_key: str) -> AsyncIterator[str]:
    settings = make_settings(database_url=sqlite_url, nats_url=nats_url, encryption_key=encryption_key)
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


async def _invoke(*args: str, url: str, token: str = "admin-token", stdin: str | None = None) -> Result:
    runner = CliRunner()
    env = {"TRAINWATCH_API_URL": url, "TRAINWATCH_API_TOKEN": token, "COLUMNS": "200"}
    return await asyncio.to_thread(runner.invoke, cli, list(args), env=env, input=stdin)


async def _run(*args: str, url: str, token: str = "admin-token", stdin: str | None = None) -> tuple[int, str]:
    """Exit code and what a terminal shows (stdout and stderr)."""
    result = await _invoke(*args, url=url, token=token, stdin=stdin)
    return result.exit_code, result.output


async def test_add_list_get_update_rotate_remove(api_url: str, tmp_path: Path) -> None:
    kubeconfig_file = tmp_path / "east.yaml"
    kubeconfig_file.write_text(as_yaml(kubeconfig()))
    code, output = await _run(
        "clusters", "add", "--name", "GPU East", "--kubeconfig", str(kubeconfig_file), "--label", "tier=gpu",
        "--kind", "pytorchjob", "--allow-unreachable", url=api_url,
    )  # fmt: skip
    assert code == 0, output
    assert "registered gpu-east at revision 1" in output
    assert "sim-token-1234" not in output

    code, output = await _run("clusters", "list", url=api_url, token="viewer-token")
    assert code == 0, output
    assert "gpu-east" in output
    assert "https://k8s.example.com:6443" in output
    assert "1 cluster(s)" in output

    code, output = await _run("clusters", "get", "gpu-east", url=api_url, token="viewer-token")
    assert code == 0
    assert "pytorchjob in all namespaces" in output

    code, output = await _run("clusters", "update", "gpu-east", "--description", "A100 pool", url=api_url)
    assert code == 0
    assert "revision 2" in output

    rotated = tmp_path / "rotated.yaml"
    rotated.write_text(as_yaml(kubeconfig(token="fresh-token-9999")))
    code, output = await _run("clusters", "rotate", "gpu-east", "--kubeconfig", str(rotated), url=api_url)
    assert code == 0
    assert "revision 3" in output

    code, output = await _run("clusters", "remove", "gpu-east", "--yes", url=api_url)
    assert code == 0
    assert "removed gpu-east" in output


async def test_errors_are_readable(api_url: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(as_yaml(kubeconfig(server="http://insecure.example.com")))
    code, output = await _run("clusters", "add", "--name", "bad", "--kubeconfig", str(bad), url=api_url)
    assert code == 1
    assert "422" in output
    assert "must use https" in output

    code, output = await _run("clusters", "list", url=api_url, token="nope")
    assert code == 1
    assert "401" in output
    assert "TRAINWATCH_API_TOKEN" in output

    code, output = await _run("clusters", "get", "missing", url=api_url, token="viewer-token")
    assert code == 1
    assert "404" in output

    code, output = await _run("clusters", "list", url=f"http://127.0.0.1:{free_port()}")
    assert code == 1
    assert "cannot reach the registry" in output


async def test_owner_flags_and_an_update_changes_only_the_watch_options_given(
    api_url: str, tmp_path: Path
) -> None:
    kubeconfig_file = tmp_path / "east.yaml"
    kubeconfig_file.write_text(as_yaml(kubeconfig()))
    code, output = await _run(
        "clusters", "add", "--name", "East", "--kubeconfig", str(kubeconfig_file), "--allow-unreachable",
        "--owner-annotation", "trainwatch.io/owner", "--kind", "pytorchjob", "--namespace", "team-a",
        url=api_url,
    )  # fmt: skip
    assert code == 0, output

    async def watch() -> dict[str, object]:
        code, output = await _run("clusters", "get", "east", "-o", "json", url=api_url)
        assert code == 0, output
        found: dict[str, object] = json.loads(output)["watch"]
        return found

    assert (await watch())["owner_annotation"] == "trainwatch.io/owner"
    code, output = await _run("clusters", "update", "east", "--kind", "mpijob", url=api_url)
    assert code == 0, output
    after = await watch()
    assert after["kinds"] == ["mpijob"]
    assert after["include_namespaces"] == ["team-a"]  # not given: kept
    assert after["owner_annotation"] == "trainwatch.io/owner"  # not given: kept
    code, output = await _run("clusters", "update", "east", "--owner-label", "team.io/owner", url=api_url)
    assert code == 0, output
    after = await watch()
    assert after["owner_label"] == "team.io/owner"
    assert after["kinds"] == ["mpijob"]
