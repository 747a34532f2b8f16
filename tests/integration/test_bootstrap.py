"""scripts/install_uv.sh (run by `make bootstrap`) installs uv as a non-root user, also where the
system Python refuses `pip install --user` (PEP 668: Debian 12, Ubuntu 24.04)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"


def _as_unprivileged(script: str, home: Path) -> subprocess.CompletedProcess[str]:
    """``script`` as a user without root (nobody when the tests run as root), with a fresh HOME
    and a PATH where no uv is."""
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    argv = ["bash", "-c", script]
    if os.geteuid() == 0:
        home.chmod(0o777)
        argv = [
            "/usr/sbin/runuser",
            "-u",
            "nobody",
            "--",
            "env",
            *(f"{k}={v}" for k, v in env.items()),
            *argv,
        ]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)


@pytest.fixture
def home() -> Iterator[Path]:
    """A fresh HOME the unprivileged user can write (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="trainwatch-bootstrap-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_install_uv_as_a_non_root_user(home: Path) -> None:
    refused = _as_unprivileged(f"{SYSTEM_PYTHON} -m pip install --user uv", home)
    externally_managed = "externally-managed-environment" in refused.stderr

    done = _as_unprivileged("scripts/install_uv.sh && ~/.local/bin/uv --version", home)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("uv ")
    if externally_managed:  # this machine's Python is like Debian 12's: the virtualenv route
        assert "its own virtualenv" in done.stderr
        assert (home / ".local/share/trainwatch/uv-venv/bin/uv").exists()
    again = _as_unprivileged("scripts/install_uv.sh", home)
    assert again.returncode == 0, again.stderr
    assert again.stderr == ""  # installed: nothing to do


@pytest.mark.skipif(shutil.which("apt-cache") is None, reason="not a Debian-family system")
def test_bootstrap_sorts_out_package_names_this_distribution_does_not_have() -> None:
    # Issue 20: one name apt has no candidate for (chromium on Ubuntu 24.04, where Chromium is a
    # snap) failed the whole `apt-get install` of bootstrap. scripts/apt_unavailable.sh names them
    # first, from the real package lists: an unknown name, a virtual package with no candidate.
    names = ["bash", "trainwatch-no-such-package", "mail-transport-agent"]
    result = subprocess.run(
        ["scripts/apt_unavailable.sh", *names], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["trainwatch-no-such-package", "mail-transport-agent"]
    every_one = subprocess.run(
        ["scripts/apt_unavailable.sh", "bash"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert every_one.stdout.strip() == ""
