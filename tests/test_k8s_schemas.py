"""Every shipped Kubernetes object validated offline against the official API schemas (issue 17).

The schemas are the Kubernetes OpenAPI documents converted to JSON Schema, bundled by the
``kubernetes-validate`` package for each release; the "strict" variant sets
``additionalProperties: false`` everywhere, so an unknown or misspelt field is an error, as it is
for ``kubectl apply --validate=strict``. What is validated is what ``kubectl apply -k`` sends: the
resources each kustomization lists, with its namespace set and its generated ConfigMaps, plus the
files applied on their own (secrets.example.yaml, deploy/rbac). Where kubectl is installed (the
machine image has it), its own kustomize renders both kustomizations too: the same objects, and its
output passes the schemas.

ServiceMonitor and PrometheusRule are custom resources of the Prometheus Operator: they are
validated against the operator's own CRDs (its openAPIV3Schema, vendored unmodified under
tests/schemas/prometheus-operator/, with the release and commit in its README), made strict the
way the API server's strict field validation is, and their metadata against the strict ObjectMeta.
test_deploy_manifests.py checks their content (metric names, selectors).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
# A recent release that the managed offerings run; the schemas of newer ones are bundled too.
KUBERNETES_VERSION = "1.33.0"
CUSTOM_RESOURCE_GROUPS = {"monitoring.coreos.com"}
# Kinds that have no namespace; kustomize leaves their metadata alone.
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}


def _schema_dir() -> Any:
    return (
        resources.files("kubernetes_validate")
        / "kubernetes-json-schema"
        / (f"v{KUBERNETES_VERSION}-local-strict")
    )


_K8S = "/api/_definitions.json#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1."
# The Prometheus Operator's own CRDs, vendored unmodified (tests/schemas/prometheus-operator/README.md
# says which release and commit, and how to update them).
CRD_DIR = ROOT / "tests" / "schemas" / "prometheus-operator"


def strict_structural(schema: Any) -> Any:
    """A CRD's structural schema as the API server applies it with strict field validation
    (``kubectl apply --validate=strict``): an object's fields are exactly its ``properties``
    unless it preserves unknown fields or is a map (``additionalProperties``). The OpenAPI
    keywords it uses (type, properties, items, required, enum, pattern, anyOf, minimum, ...) are
    JSON Schema's; the ``x-kubernetes-*`` ones constrain nothing a shipped object could break
    (list and map types, int-or-string, already spelt out by its anyOf), and there are no CEL
    validations in these CRDs (``test_the_vendored_crds_are_what_the_readme_says`` checks)."""
    if isinstance(schema, list):
        return [strict_structural(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {
        key: strict_structural(value) for key, value in schema.items() if not key.startswith("x-kubernetes-")
    }
    if "properties" in schema:  # ``properties`` maps names to schemas: not a schema itself
        out["properties"] = {name: strict_structural(sub) for name, sub in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    return out


@cache
def custom_resource_schema(kind: str, api_version: str) -> dict[str, Any]:
    """The vendored CRD's schema of ``kind`` at ``api_version``, strict, with metadata against
    Kubernetes's strict ObjectMeta (a CRD's schema says only ``type: object`` there: the API
    server validates ObjectMeta itself)."""
    group, _, version = api_version.rpartition("/")
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["group"] != group or crd["spec"]["names"]["kind"] != kind:
            continue
        [served] = [v for v in crd["spec"]["versions"] if v["name"] == version and v["served"]]
        schema: dict[str, Any] = strict_structural(served["schema"]["openAPIV3Schema"])
        schema["properties"]["apiVersion"] = {"const": api_version}
        schema["properties"]["kind"] = {"const": kind}
        schema["properties"]["metadata"] = {"$ref": _K8S + "ObjectMeta"}
        schema["required"] = sorted({"apiVersion", "kind", "metadata", *schema.get("required", [])})
        return schema
    raise LookupError(f"no vendored CRD for {api_version} {kind} in {CRD_DIR}")


@cache
def _definitions() -> dict[str, Any]:
    result: dict[str, Any] = json.loads((_schema_dir() / "_definitions.json").read_text())
    return result


@cache
def _validator(kind: str, api_version: str) -> jsonschema.protocols.Validator:
    definitions = Resource.from_contents(_definitions())
    group, _, version = api_version.rpartition("/")
    if group in CUSTOM_RESOURCE_GROUPS:
        schema: dict[str, Any] = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://kubernetes.io/api/{kind.lower()}/{api_version}",
            **custom_resource_schema(kind, api_version),
        }
    else:
        # rbac.authorization.k8s.io/v1 -> rbac-v1, v1 -> v1 (the package's file names).
        short = f"{group.split('.')[0]}-{version}" if group else version
        path = _schema_dir() / f"{kind.lower()}-{short}.json"
        schema = json.loads(path.read_text())
    # The schemas refer to the definitions by their $id (https://kubernetes.io/api/_definitions.json).
    registry: Registry[Any] = Resource.from_contents(schema) @ (definitions @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def schema_errors(doc: dict[str, Any]) -> list[str]:
    """Every way the object breaks its kind's schema, as 'path: message'."""
    validator = _validator(str(doc["kind"]), str(doc["apiVersion"]))
    return [
        f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in validator.iter_errors(doc)
    ]


def _yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)]


def kustomize_build(directory: Path) -> list[tuple[str, dict[str, Any]]]:
    """What ``kubectl kustomize`` renders from the fields our kustomizations use (resources,
    namespace, configMapGenerator); any other field fails, so this cannot silently drift."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    understood = {"apiVersion", "kind", "namespace", "resources", "configMapGenerator"}
    assert set(kustomization) <= understood, f"{directory}: {set(kustomization) - understood}"
    namespace = kustomization.get("namespace")
    rendered: list[tuple[str, dict[str, Any]]] = []
    for name in kustomization.get("resources", []):
        for doc in _yaml_docs(directory / name):
            rendered.append((str((directory / name).relative_to(DEPLOY)), doc))
    for generator in kustomization.get("configMapGenerator", []):
        options = generator.get("options", {})
        metadata: dict[str, Any] = {"name": generator["name"]}
        if options.get("labels"):
            metadata["labels"] = options["labels"]
        data = {Path(f).name: (directory / f).read_text() for f in generator["files"]}
        doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}
        rendered.append((f"{directory.relative_to(DEPLOY)}/kustomization.yaml (generated)", doc))
    for _, doc in rendered:
        if namespace and doc["kind"] not in CLUSTER_SCOPED:
            doc.setdefault("metadata", {})["namespace"] = namespace
    return rendered


def shipped_objects() -> list[tuple[str, dict[str, Any]]]:
    objects = [*kustomize_build(K8S), *kustomize_build(K8S / "monitoring")]
    applied_alone = [K8S / "secrets.example.yaml", *sorted((DEPLOY / "rbac").glob("*.yaml"))]
    for path in applied_alone:
        objects += [(str(path.relative_to(DEPLOY)), doc) for doc in _yaml_docs(path)]
    return objects


OBJECTS = shipped_objects()


def _id(item: tuple[str, dict[str, Any]]) -> str:
    source, doc = item
    return f"{source}:{doc['kind']}/{doc['metadata']['name']}"


def test_every_file_is_validated() -> None:
    """No YAML under deploy/ escapes validation by being left out of the list above."""
    sources = {source for source, _ in OBJECTS if not source.endswith("(generated)")}
    files = {str(p.relative_to(DEPLOY)) for p in DEPLOY.rglob("*.yaml") if p.name != "kustomization.yaml"}
    assert files == sources, (files, sources)
    kinds = {doc["kind"] for _, doc in OBJECTS}
    assert {"Deployment", "StatefulSet", "NetworkPolicy", "PodDisruptionBudget", "Secret"} <= kinds


@pytest.mark.parametrize("item", OBJECTS, ids=_id)
def test_object_matches_the_kubernetes_schema(item: tuple[str, dict[str, Any]]) -> None:
    _, doc = item
    assert schema_errors(doc) == []


KUBECTL = shutil.which("kubectl")  # the machine image ships it (kustomize built in)
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")


def kubectl_kustomize(directory: Path) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    rendered = subprocess.run(
        [KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if isinstance(doc, dict)]


def _key(doc: dict[str, Any]) -> tuple[str, str, str]:
    # kustomize appends a content hash to generated ConfigMaps' names: compare without it.
    name = re.sub(r"-[a-z0-9]{10}$", "", doc["metadata"]["name"]) if doc["kind"] == "ConfigMap" else None
    return doc["kind"], name or doc["metadata"]["name"], doc["metadata"].get("namespace", "")


@needs_kubectl
@pytest.mark.parametrize("directory", [K8S, K8S / "monitoring"], ids=["k8s", "monitoring"])
def test_kubectl_kustomize_output_matches_the_schemas(directory: Path) -> None:
    """The real kustomize (kubectl's) accepts the kustomization, renders the objects validated
    above, and its output passes the schemas too."""
    rendered = kubectl_kustomize(directory)
    ours = [doc for _, doc in kustomize_build(directory)]
    assert sorted(map(_key, rendered)) == sorted(map(_key, ours))
    for doc in rendered:
        assert schema_errors(doc) == [], _key(doc)


def _watcher_deployment() -> dict[str, Any]:
    [deployment] = [d for _, d in OBJECTS if d["kind"] == "Deployment" and d["metadata"]["name"] == "watcher"]
    return copy.deepcopy(deployment)


def test_an_unknown_field_is_an_error() -> None:
    deployment = _watcher_deployment()
    deployment["spec"]["template"]["spec"]["containers"][0]["resource"] = {"limits": {"cpu": "1"}}
    errors = schema_errors(deployment)
    assert any(
        re.search(r"spec\.template\.spec\.containers\.0: .*'resource' was unexpected", e) for e in errors
    ), errors


def test_a_wrong_type_is_an_error() -> None:
    deployment = _watcher_deployment()
    deployment["spec"]["replicas"] = "three"
    errors = schema_errors(deployment)
    assert any(e.startswith("spec.replicas: ") for e in errors), errors


def test_an_unknown_metadata_field_on_a_custom_resource_is_an_error() -> None:
    [rule] = [copy.deepcopy(d) for _, d in OBJECTS if d["kind"] == "PrometheusRule"]
    rule["metadata"]["label"] = {"release": "x"}
    assert any("'label' was unexpected" in e for e in schema_errors(rule))


def test_a_misspelt_alert_field_or_a_bad_duration_is_an_error() -> None:
    [rule] = [copy.deepcopy(d) for _, d in OBJECTS if d["kind"] == "PrometheusRule"]
    first = rule["spec"]["groups"][0]["rules"][0]
    first["expression"] = first.pop("expr")
    rule["spec"]["groups"][0]["rules"][1]["for"] = "5 minutes"
    errors = schema_errors(rule)
    assert any("'expr' is a required property" in e for e in errors), errors
    assert any(e.startswith("spec.groups.0.rules.1.for: ") for e in errors), errors


def test_a_wrong_selector_on_the_service_monitor_is_an_error() -> None:
    [monitor] = [copy.deepcopy(d) for _, d in OBJECTS if d["kind"] == "ServiceMonitor"]
    monitor["spec"]["selector"]["matchLabel"] = monitor["spec"]["selector"].pop("matchLabels")
    assert any("'matchLabel' was unexpected" in e for e in schema_errors(monitor))


def test_a_misspelt_endpoint_field_on_the_service_monitor_is_an_error() -> None:
    """The hand-written schema let an endpoint's unknown fields through; the operator's CRD does not."""
    [monitor] = [copy.deepcopy(d) for _, d in OBJECTS if d["kind"] == "ServiceMonitor"]
    endpoint = monitor["spec"]["endpoints"][0]
    endpoint["scrapeInterval"] = endpoint.pop("interval", "30s")
    endpoint["scheme"] = "ftp"  # the CRD's enum: http, https, HTTP, HTTPS
    errors = schema_errors(monitor)
    assert any("'scrapeInterval' was unexpected" in e for e in errors), errors
    assert any(e.startswith("spec.endpoints.0.scheme: ") for e in errors), errors


def test_the_vendored_crds_are_what_the_readme_says() -> None:
    """Unmodified files of the release the README names, one per kind we ship, with no CEL rules
    (``x-kubernetes-validations``) that the JSON Schema validation above would skip."""
    readme = (CRD_DIR / "README.md").read_text()
    version = re.search(r"release v(\d+\.\d+\.\d+)", readme)
    assert version, readme
    kinds = set()
    for path in sorted(CRD_DIR.glob("*.yaml")):
        text = path.read_text()
        crd = yaml.safe_load(text)
        assert crd["metadata"]["annotations"]["operator.prometheus.io/version"] == version.group(1)
        assert "x-kubernetes-validations" not in text, path
        assert path.name in readme, path.name
        kinds.add(crd["spec"]["names"]["kind"])
    assert kinds == {d["kind"] for _, d in OBJECTS if d["apiVersion"].startswith("monitoring.coreos.com/")}
    assert "Apache License" in (CRD_DIR / "LICENSE").read_text()  # theirs, shipped with their files


# Applied on their own, never by `kubectl apply -k`: the Secrets' example holds placeholders that
# would overwrite an operator's real Secrets on every apply (docs/deploy.md).
NOT_IN_THE_KUSTOMIZATION = {"secrets.example.yaml"}


@pytest.mark.parametrize("directory", [K8S, K8S / "monitoring"], ids=["k8s", "monitoring"])
def test_the_kustomization_lists_every_manifest_of_its_folder(directory: Path) -> None:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    listed = list(kustomization["resources"])
    assert len(listed) == len(set(listed)), "a resource listed twice"
    files = {p.name for p in directory.glob("*.yaml")} - {"kustomization.yaml"} - NOT_IN_THE_KUSTOMIZATION
    assert set(listed) == files
    generated = [f for g in kustomization.get("configMapGenerator", []) for f in g["files"]]
    assert all((directory / f).is_file() for f in generated), generated
