"""Issue 15's attack cases against the registry: each test is named after the audit item it keeps closed.

Everything runs against a real registry (SQLite, a real nats-server) over its HTTP API, and a
refusal must be a 422 that names the problem and writes nothing.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from conftest import Bus, Harness
from registry_kubeconfigs import ADMIN, as_json, as_yaml, changed, create_body, kubeconfig

from trainwatch_common import fingerprint


async def refused(registry: Harness, text: str, *, code: str | None = None) -> list[dict[str, Any]]:
    """POST ``text`` as a new cluster; assert a 422 that stored nothing; return its detail."""
    response = await registry.client.post("/v1/clusters", json=create_body("refused", text), headers=ADMIN)
    assert response.status_code == 422, response.text
    detail: list[dict[str, Any]] = response.json()["detail"]
    if code is not None:
        assert f"kubeconfig.{code}" in [item["type"] for item in detail], detail
    assert await registry.cluster_rows() == []
    assert await registry.outbox_rows() == []
    return detail


# --- Bugs found on the way: 500s on odd kubeconfigs --------------------------------------------


@pytest.mark.parametrize("form", ["yaml", "json"])
async def test_bug_5000_digit_integer_is_422(registry: Harness, form: str) -> None:
    doc = kubeconfig()
    if form == "yaml":
        text = as_yaml(doc).replace("preferences: {}", "preferences: {colors: " + "7" * 5000 + "}")
        assert "7" * 5000 in text
    else:
        text = as_json(doc)[:-1] + ', "extra": ' + "7" * 5000 + "}"
    detail = await refused(registry, text)
    assert any("too many digits" in item["msg"] for item in detail), detail


async def test_bug_non_string_keys_in_user_is_422(registry: Harness) -> None:
    text = as_yaml(kubeconfig()).replace("token: sim-token-1234", "token: sim-token-1234\n    7: seven")
    assert "7: seven" in text
    detail = await refused(registry, text)
    assert any("key" in item["msg"] and "string" in item["msg"] for item in detail), detail


async def test_bug_mixed_null_and_string_unknown_keys_in_cluster_is_422(registry: Harness) -> None:
    text = as_yaml(kubeconfig()).replace(
        "server: https://k8s.example.com:6443",
        "server: https://k8s.example.com:6443\n    ~: 1\n    colour: red",
        1,
    )
    assert "~: 1" in text
    await refused(registry, text)


async def test_bug_non_ascii_token_refused_at_create_rotate_and_dry_run(registry: Harness) -> None:
    text = as_yaml(changed(kubeconfig(), "users", {"token": "sim-tökén-1234"}))
    detail = await refused(registry, text, code="token_not_ascii")
    assert "sim-tökén-1234" not in str(detail)
    dry = await registry.client.post(
        "/v1/clusters", params={"dry_run": "true"}, json=create_body("dry", text), headers=ADMIN
    )
    assert dry.status_code == 422, dry.text
    await registry.create(create_body("kept"))
    rotate = await registry.client.patch("/v1/clusters/kept", json={"kubeconfig": text}, headers=ADMIN)
    assert rotate.status_code == 422, rotate.text
    assert len(await registry.outbox_rows()) == 1


async def test_bug_multi_doc_json_reason_is_clear(registry: Harness) -> None:
    text = as_json(kubeconfig()) + "\n" + as_json(kubeconfig())
    detail = await refused(registry, text, code="multiple_documents")
    assert not any("Extra data" in item["msg"] for item in detail), detail


async def test_bug_bad_ca_reason_is_clear_and_alone(registry: Harness) -> None:
    not_a_cert = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").decode()
    doc = changed(kubeconfig(), "clusters", {"certificate-authority-data": not_a_cert})
    detail = await refused(registry, as_yaml(doc), code="bad_pem")
    assert len(detail) == 1, detail
    message = detail[0]["msg"]
    assert "not a PEM certificate" in message
    assert "ParseError" not in message
    assert "http" not in message  # no library FAQ links
    # An unrelated refusal is not joined by a bad_pem line about a good CA.
    detail = await refused(registry, as_yaml(changed(kubeconfig(), "users", {"token": "a b"})))
    assert [item["type"] for item in detail] == ["kubeconfig.token_control_chars"]
