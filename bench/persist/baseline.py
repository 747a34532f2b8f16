"""The persister source of another git ref, for a baseline measured in the same run.

``git archive <ref> services/persister/src`` is extracted into a scratch directory, and a process
started with that directory first on PYTHONPATH imports that ref's ``trainwatch_persister``
instead of this tree's (which the virtualenv installs through a .pth file, after PYTHONPATH).
"""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]


def persister_source(ref: str, into: Path) -> str:
    """The persister package of ``ref``, extracted under ``into``; returns the PYTHONPATH entry."""
    archive = subprocess.run(
        ["git", "-C", str(REPOSITORY), "archive", ref, "services/persister/src"],
        check=True,
        capture_output=True,
    )
    path = into / "archive.tar"
    path.write_bytes(archive.stdout)
    with tarfile.open(path) as tar:
        tar.extractall(into, filter="data")
    return str(into / "services/persister/src")


def fork_point(branch: str = "main") -> str:
    """Where this tree left ``branch``: the code it changes. ``main`` itself may have moved on to
    a trainwatch_common that this tree's lacks (only the persister source is swapped)."""
    return subprocess.run(
        ["git", "-C", str(REPOSITORY), "merge-base", "HEAD", branch],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()[:7]


def short_rev(ref: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPOSITORY), "rev-parse", "--short", ref],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def tree_label() -> str:
    """This tree's commit, with + when services/ has uncommitted changes."""
    dirty = subprocess.run(
        ["git", "-C", str(REPOSITORY), "status", "--porcelain", "services"], capture_output=True, text=True
    ).stdout.strip()
    return f"this tree ({short_rev('HEAD')}{'+' if dirty else ''})"
