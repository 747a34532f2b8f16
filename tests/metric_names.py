"""Every Prometheus metric the services define, found in their source (for the tests that check
prefixes and that the shipped alert rules and dashboard name metrics that exist)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ("registry", "watcher", "notifier", "persister", "dashboard")
_TYPES: dict[str, tuple[str, ...]] = {
    "Counter": ("_total", "_created"),
    "Gauge": (),
    "Histogram": ("_bucket", "_count", "_sum", "_created"),
    "Summary": ("_count", "_sum", "_created"),
}


def defined_metrics() -> dict[str, tuple[str, str]]:
    """Metric name as defined -> (service, type)."""
    found: dict[str, tuple[str, str]] = {}
    sources = [(service, ROOT / "services" / service / "src") for service in SERVICES]
    sources.append(("common", ROOT / "libs" / "common" / "src"))
    for service, src in sources:
        for path in src.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute)):
                    continue
                kind = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                if kind in _TYPES and node.args and isinstance(node.args[0], ast.Constant):
                    name = node.args[0].value
                    if isinstance(name, str) and name.startswith("trainwatch_"):
                        found[name] = (service, kind)
    return found


def exposed_names() -> set[str]:
    """Every series name Prometheus sees (``_total`` on counters, ``_bucket`` on histograms...)."""
    names: set[str] = set()
    for name, (_, kind) in defined_metrics().items():
        base = name.removesuffix("_total") if kind == "Counter" else name
        names.add(base if kind != "Counter" else base + "_total")
        names.update(base + suffix for suffix in _TYPES[kind])
    return names
