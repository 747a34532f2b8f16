"""Checks on the repository as a whole: architecture rules, lint, and deploy files that point at real code."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ["registry", "watcher", "notifier", "persister", "dashboard"]


def run_tool(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True)


def test_import_linter_contracts_are_kept() -> None:
    result = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports"))], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_ruff_is_clean() -> None:
    result = run_tool("ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("service", SERVICES)
def test_every_service_has_a_python_m_entry_point(service: str) -> None:
    assert importlib.util.find_spec(f"trainwatch_{service}.__main__") is not None


def test_kubernetes_manifests_run_modules_that_exist() -> None:
    commands = []
    for path in sorted((ROOT / "deploy" / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "Deployment":
                for container in doc["spec"]["template"]["spec"]["containers"]:
                    commands.append(container["command"])
                    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert sorted(c[2] for c in commands) == sorted(f"trainwatch_{s}" for s in SERVICES)
    for command in commands:
        assert importlib.util.find_spec(command[2]) is not None


def test_compose_runs_every_service_with_replicas_where_it_matters() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    for service in SERVICES:
        assert services[service]["command"] == ["python", "-m", f"trainwatch_{service}"]
    assert services["watcher"]["deploy"]["replicas"] >= 2


def test_ci_calls_the_readme_test_command() -> None:
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make run" in readme
    assert "make test" in readme
