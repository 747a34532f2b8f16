"""The published OpenAPI document matches the code (regenerate: `python -m trainwatch_registry openapi`)."""

from __future__ import annotations

import json

from trainwatch_registry import openapi


def test_committed_openapi_is_current() -> None:
    assert openapi.PUBLISHED.exists(), "run `uv run python -m trainwatch_registry openapi`"
    committed = openapi.PUBLISHED.read_text()
    assert committed == openapi.render(), (
        "docs/openapi/registry.json is stale: run `uv run python -m trainwatch_registry openapi`"
    )


def test_the_kubeconfig_is_write_only_in_the_spec() -> None:
    spec = json.loads(openapi.render())
    create = spec["components"]["schemas"]["ClusterCreate"]["properties"]["kubeconfig"]
    assert create["writeOnly"] is True
    public = spec["components"]["schemas"]["ClusterPublic"]["properties"]
    assert "kubeconfig" not in public
    assert "connection_fingerprint" in public
