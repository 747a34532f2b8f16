"""The pure intake: what is kept, what the fingerprint covers, what the operator may allow."""

from __future__ import annotations

import pytest
import yaml
from registry_kubeconfigs import as_json, as_yaml, changed, client_cert, kubeconfig

from trainwatch_registry.addresses import AddressPolicy
from trainwatch_registry.kubeconfig import IntakePolicy, KubeconfigRefused, sanitize


def test_reduced_to_the_one_context_used() -> None:
    result = sanitize(as_yaml(kubeconfig()))
    assert result.context == "main"
    assert result.server == "https://k8s.example.com:6443"
    doc = yaml.safe_load(result.to_yaml())
    assert [c["name"] for c in doc["clusters"]] == ["main"]
    assert [u["name"] for u in doc["users"]] == ["ops"]
    assert doc["contexts"] == [
        {"name": "main", "context": {"cluster": "main", "user": "ops", "namespace": "ml"}}
    ]
    assert doc["current-context"] == "main"
    assert "preferences" not in doc
    assert "other-secret-token" not in result.to_yaml()
    assert "sim-token-1234" not in repr(result)


def test_yaml_and_json_and_bom_give_the_same_result() -> None:
    from_yaml = sanitize(as_yaml(kubeconfig()))
    from_json = sanitize(as_json(kubeconfig()))
    with_bom = sanitize("\ufeff" + as_json(kubeconfig()))
    assert from_yaml.document == from_json.document == with_bom.document


def test_the_fingerprint_covers_the_connection_only() -> None:
    base = sanitize(as_yaml(kubeconfig())).connection_fingerprint
    renamed = kubeconfig()
    renamed["contexts"][0]["context"]["namespace"] = "elsewhere"
    renamed["preferences"] = {"colors": True}
    assert sanitize(as_yaml(renamed)).connection_fingerprint == base
    assert sanitize(as_yaml(kubeconfig(token="another"))).connection_fingerprint != base
    assert sanitize(as_yaml(kubeconfig(server="https://k8s.example.com:7443"))).connection_fingerprint != base
    no_ca = changed(kubeconfig(), "clusters", {"certificate-authority-data": None})
    assert sanitize(as_yaml(no_ca)).connection_fingerprint != base


def test_client_certificates_are_kept_whole() -> None:
    cert = client_cert()
    doc = changed(kubeconfig(), "users", {"token": None, "client-certificate-data": cert.cert_b64,
                                          "client-key-data": cert.key_b64})  # fmt: skip
    result = sanitize(as_yaml(doc))
    assert result.auth_method == "client-certificate"
    user = result.document["users"][0]["user"]
    assert user == {"client-certificate-data": cert.cert_b64, "client-key-data": cert.key_b64}


def test_every_problem_is_reported_at_once() -> None:
    doc = changed(kubeconfig(), "clusters", {"server": "http://127.0.0.1", "insecure-skip-tls-verify": True})
    with pytest.raises(KubeconfigRefused) as refused:
        sanitize(as_yaml(doc))
    codes = {r.code for r in refused.value.refusals}
    assert codes == {"server_not_https", "server_loopback", "insecure_skip_tls_verify"}


def test_the_operator_may_allow_loopback_and_exec_plugins() -> None:
    loopback = as_yaml(kubeconfig(server="https://127.0.0.1:6443"))
    allowed = IntakePolicy(addresses=AddressPolicy(allow_loopback=True), allow_exec_plugins=True)
    assert sanitize(loopback, policy=allowed).server == "https://127.0.0.1:6443"
    plugin = {"apiVersion": "client.authentication.k8s.io/v1", "command": "aws", "args": ["eks", "get-token"]}
    with_exec = as_yaml(changed(kubeconfig(), "users", {"exec": plugin, "token": None}))
    assert sanitize(with_exec, policy=allowed).auth_method == "exec"
    with pytest.raises(KubeconfigRefused, match="exec credential plugin"):
        sanitize(with_exec)


def test_metadata_services_are_refused_even_when_link_local_is_allowed() -> None:
    policy = IntakePolicy(addresses=AddressPolicy(allow_loopback=True, allow_link_local=True))
    assert sanitize(as_yaml(kubeconfig(server="https://169.254.3.4")), policy=policy)
    with pytest.raises(KubeconfigRefused, match="metadata"):
        sanitize(as_yaml(kubeconfig(server="https://169.254.169.254")), policy=policy)


def test_private_addresses_and_path_prefixes_are_fine() -> None:
    for server in (
        "https://10.0.0.5:6443",
        "https://rancher.example.com/k8s/clusters/c-abc12",
        "https://[fd12::1]",
    ):
        assert sanitize(as_yaml(kubeconfig(server=server))).server == server
