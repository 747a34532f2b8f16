"""Each service README's module table lists exactly the service's modules and packages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = sorted(p.name for p in (ROOT / "services").iterdir() if (p / "README.md").exists())
SKIPPED = {"__init__.py", "__main__.py", "py.typed", "__pycache__"}


def modules_of(service: str) -> set[str]:
    package = ROOT / "services" / service / "src" / f"trainwatch_{service}"
    return {f"{p.name}/" if p.is_dir() else p.name for p in package.iterdir() if p.name not in SKIPPED}


def listed_in_readme(service: str) -> set[str]:
    text = (ROOT / "services" / service / "README.md").read_text()
    section = text.split("## Modules", 1)
    assert len(section) == 2, f"services/{service}/README.md has no '## Modules' section"
    table = section[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`]+)`", table, flags=re.MULTILINE))


@pytest.mark.parametrize("service", SERVICES)
def test_the_module_table_lists_every_module_and_nothing_else(service: str) -> None:
    listed, present = listed_in_readme(service), modules_of(service)
    assert sorted(present - listed) == [], f"services/{service}/README.md: add these to its module table"
    assert sorted(listed - present) == [], f"services/{service}/README.md lists modules that do not exist"


def test_every_service_is_checked() -> None:
    assert SERVICES == ["dashboard", "notifier", "persister", "registry", "watcher"]
