"""What a kubectl user expects of the `trainwatch` CLI: -o table|json|yaml, exit codes, --version,
errors printed literally, clear errors, no 80-column cut when piped."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from registry_kubeconfigs import as_yaml, kubeconfig
from test_registry_cli import _invoke, _run, api_url
from test_registry_expiry import jwt

from trainwatch_common.events.clusters import CLUSTER_ID_PATTERN

__all__ = ["api_url"]  # the fixture, shared with the CLI's other tests


async def test_output_formats(api_url: str, tmp_path: Path) -> None:
    path = tmp_path / "east.yaml"
    path.write_text(as_yaml(kubeconfig()))
    result = await _invoke(
        "clusters", "add", "--name", "GPU East", "--kubeconfig", str(path), "-o", "json",
        "--allow-unreachable", url=api_url,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["id"] == "gpu-east"  # the warning went to stderr
    code, output = await _run("clusters", "get", "gpu-east", "-o", "yaml", url=api_url)
    assert code == 0, output
    got = yaml.safe_load(output)
    assert got["server"] == "https://k8s.example.com:6443"
    assert "credentials_expire_at" in got
    code, output = await _run("clusters", "list", "--output", "json", url=api_url)
    assert [c["id"] for c in json.loads(output)] == ["gpu-east"]
    code, output = await _run("clusters", "list", "-o", "xml", url=api_url)
    assert code == 2
    assert "xml" in output


async def test_a_failed_dry_run_exits_non_zero(api_url: str, tmp_path: Path) -> None:
    path = tmp_path / "unreachable.yaml"
    path.write_text(as_yaml(kubeconfig(server="https://unreachable.invalid:6443")))
    code, output = await _run(
        "clusters", "add", "--name", "x", "--kubeconfig", str(path), "--dry-run", url=api_url
    )
    assert code == 2, output
    assert "failed" in output
    code, output = await _run(
        "clusters", "add", "--name", "x", "--kubeconfig", str(path), "--dry-run", "-o", "json", url=api_url
    )
    assert code == 2
    assert json.loads(output)["connectivity"]["ok"] is False


async def test_version() -> None:
    code, output = await _run("--version", url="http://127.0.0.1:1")
    assert code == 0
    assert output.startswith("trainwatch ")


async def test_errors_print_brackets_literally_and_cjk_names_need_an_id(api_url: str, tmp_path: Path) -> None:
    path = tmp_path / "east.yaml"
    path.write_text(as_yaml(kubeconfig()))
    code, output = await _run(
        "clusters", "add", "--name", "x", "--id", "Not_A_Slug", "--kubeconfig", str(path), url=api_url
    )
    assert code == 1
    assert CLUSTER_ID_PATTERN in output  # '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$', brackets and all
    code, output = await _run("clusters", "add", "--name", "训练集群", "--kubeconfig", str(path), url=api_url)
    assert code == 1
    assert "cannot make a cluster id from the name '训练集群'" in output
    assert "--id" in output
    code, output = await _run(
        "clusters", "add", "--name", "训练集群", "--id", "train-cn", "--kubeconfig", str(path),
        "--allow-unreachable", url=api_url,
    )  # fmt: skip
    assert code == 0, output
    assert "训练集群" in output


async def test_piped_output_is_not_cut_at_80_columns(api_url: str, tmp_path: Path) -> None:
    path = tmp_path / "long.yaml"
    long_server = "https://" + "a" * 60 + ".example.com:6443"
    path.write_text(as_yaml(kubeconfig(server=long_server)))
    code, output = await _run(
        "clusters", "add", "--name", "n" * 60, "--id", "long", "--kubeconfig", str(path),
        "--allow-unreachable", url=api_url,
    )  # fmt: skip
    assert code == 0, output
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(TRAINWATCH_API_URL=api_url, TRAINWATCH_API_TOKEN="admin-token")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "trainwatch_registry.cli", "clusters", "list", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await process.communicate()
    assert process.returncode == 0, stderr.decode()
    line = next(line for line in stdout.decode().splitlines() if "long" in line)
    assert "n" * 60 in line
    assert long_server in line


async def test_list_get_and_health_show_when_credentials_expire(api_url: str, tmp_path: Path) -> None:
    soon, later = jwt(time.time() + 3 * 86400 + 600), jwt(time.time() + 60 * 86400 + 600)
    for cluster_id, token in (("soon", soon), ("later", later), ("static", "opaque-token")):
        path = tmp_path / f"{cluster_id}.yaml"
        path.write_text(as_yaml(kubeconfig(server=f"https://{cluster_id}.example.com:6443", token=token)))
        code, output = await _run(
            "clusters", "add", "--name", cluster_id, "--kubeconfig", str(path), "--allow-unreachable",
            url=api_url,
        )  # fmt: skip
        assert code == 0, output

    code, output = await _run("clusters", "list", url=api_url)
    assert code == 0, output
    assert "CREDENTIALS" in output
    rows = {
        c: next(line for line in output.splitlines() if f"{c}.example.com" in line) for c in ("soon", "later")
    }
    assert "expires in 3d" in rows["soon"]
    assert "expires in 60d" in rows["later"]

    code, output = await _run("clusters", "health", "soon", url=api_url)
    assert code == 0, output
    assert "expires in 3d at" in output
    assert "trainwatch clusters rotate-token soon" in output  # expiring: how to renew
    assert soon not in output
    code, output = await _run("clusters", "health", "later", "-o", "json", url=api_url)
    assert code == 0, output
    health = json.loads(output)
    assert health["credentials_state"] == "ok"
    assert health["health"] is None  # no watcher has reported yet
    code, output = await _run("clusters", "get", "static", url=api_url)
    assert "no expiry known" in output
    code, output = await _run("clusters", "health", "missing", url=api_url)
    assert code == 1
    assert "404" in output


def _bash(script: str, home: Path) -> subprocess.CompletedProcess[str]:
    """``script`` in a real bash (the shell typer detects), with the venv's ``trainwatch`` on PATH."""
    bin_dir = str(Path(sys.executable).parent)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "HOME": str(home), "SHELL": "/bin/bash"}
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)


def test_shell_completion_completes_commands_and_phases(tmp_path: Path) -> None:
    completing = (
        "source <(trainwatch --show-completion) || exit 1\n"
        'complete_words() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _trainwatch_completion trainwatch;'
        ' printf "%s\\n" "${COMPREPLY[@]}"; }\n'
        "complete_words trainwatch clusters jo\n"
        "complete_words trainwatch j\n"
        "complete_words trainwatch jobs list --phase Fa\n"
        "complete_words trainwatch clusters list -o y\n"
    )
    done = _bash(completing, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["join", "jobs", "Failed", "yaml"]

    installed = _bash("trainwatch --install-completion", tmp_path)
    assert installed.returncode == 0, installed.stderr
    assert "completion installed" in installed.stdout
    assert (
        "_TRAINWATCH_COMPLETE=complete_bash" in (tmp_path / ".bash_completions" / "trainwatch.sh").read_text()
    )
    assert "trainwatch.sh" in (tmp_path / ".bashrc").read_text()
