"""Invariants of the shipped deploy (issue 17), read from deploy/k8s, deploy/k8s/monitoring and
docker-compose.yml as an operator applies them:

- every Deployment has a read-only root filesystem and a writable /tmp (an emptyDir);
- every workload with more than one replica has a PodDisruptionBudget, and topology spread;
- a pod gets only the secrets its service reads (each key is one of its settings), and its own
  NATS password only; the same holds in compose;
- one stream owner: only the registry runs with TRAINWATCH_MANAGE_STREAMS=true; streams have 3
  replicas on a three-node NATS;
- every pod has a NetworkPolicy and its own ServiceAccount without an API token;
- the alert rules and the Grafana dashboard name only metrics the code defines; the alerts the
  issue asks for are there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from metric_names import exposed_names

from trainwatch_common.auth import ApiTokens
from trainwatch_dashboard.settings import DashboardSettings
from trainwatch_notifier.settings import NotifierSettings
from trainwatch_persister.settings import PersisterSettings
from trainwatch_registry.settings import RegistrySettings
from trainwatch_watcher.settings import WatcherSettings

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
SERVICES = ("registry", "watcher", "notifier", "persister", "dashboard")
SETTINGS = {
    "registry": [RegistrySettings, ApiTokens],
    "watcher": [WatcherSettings],
    "notifier": [NotifierSettings, ApiTokens],  # its admin API (silences)
    "persister": [PersisterSettings, ApiTokens],
    "dashboard": [DashboardSettings],
}


def _env_names(service: str) -> set[str]:
    """Every environment variable the service reads: its settings' fields, and for the notifier
    the ${VARS} of its shipped rules file."""
    names = {f"TRAINWATCH_{field.upper()}" for cls in SETTINGS[service] for field in cls.model_fields}
    if service == "notifier":
        rules = (ROOT / "services" / "notifier" / "rules.example.yaml").read_text()
        names |= set(re.findall(r"^[^#\n]*?\$\{([A-Z_]+)\}", rules, re.MULTILINE))
    return names


def _docs(*paths: Path) -> list[dict[str, Any]]:
    return [doc for path in paths for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)]


DOCS = _docs(*sorted(K8S.glob("*.yaml")), *sorted((K8S / "monitoring").glob("*.yaml")))


def _of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in DOCS if doc.get("kind") == kind]


def _name(doc: dict[str, Any]) -> str:
    return str(doc["metadata"]["name"])


DEPLOYMENTS = {_name(doc): doc for doc in _of_kind("Deployment")}
WORKLOADS = {_name(doc): doc for doc in [*_of_kind("Deployment"), *_of_kind("StatefulSet")]}
SECRETS = {_name(doc): doc for doc in _docs(K8S / "secrets.example.yaml")}


def test_every_service_is_deployed() -> None:
    assert set(DEPLOYMENTS) == set(SERVICES)
    assert "nats" in WORKLOADS


@pytest.mark.parametrize("name", SERVICES)
def test_read_only_root_with_a_tmp_volume(name: str) -> None:
    pod = DEPLOYMENTS[name]["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in pod.get("volumes") or []}
    for container in pod["containers"]:
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        mounts = {mount["mountPath"]: mount["name"] for mount in container.get("volumeMounts") or []}
        assert "/tmp" in mounts, f"{name}: no /tmp on a read-only root filesystem"
        assert "emptyDir" in volumes[mounts["/tmp"]]


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_multi_replica_workloads_have_a_pdb_and_spread(name: str) -> None:
    workload = WORKLOADS[name]
    if workload["spec"].get("replicas", 1) < 2:
        return
    labels = workload["spec"]["selector"]["matchLabels"]
    budgets = [
        pdb for pdb in _of_kind("PodDisruptionBudget") if pdb["spec"]["selector"]["matchLabels"] == labels
    ]
    assert len(budgets) == 1, f"{name}: {workload['spec']['replicas']} replicas and no PodDisruptionBudget"
    assert budgets[0]["spec"].get("maxUnavailable") == 1 or budgets[0]["spec"].get("minAvailable")
    spread = workload["spec"]["template"]["spec"].get("topologySpreadConstraints") or []
    assert any(c["labelSelector"]["matchLabels"] == labels for c in spread), f"{name}: no topology spread"


def _secret_keys(pod: dict[str, Any]) -> dict[str, set[str]]:
    """Secret name -> the keys this pod's containers receive from it."""
    given: dict[str, set[str]] = {}
    for container in pod["containers"]:
        for source in container.get("envFrom") or []:
            if "secretRef" in source:
                secret = source["secretRef"]["name"]
                given.setdefault(secret, set()).update(SECRETS[secret]["stringData"])
        for env in container.get("env") or []:
            ref = (env.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                given.setdefault(ref["name"], set()).add(ref["key"])
    assert not [v for v in pod.get("volumes") or [] if "secret" in v], "secrets as files: check them too"
    return given


@pytest.mark.parametrize("name", SERVICES)
def test_a_pod_gets_only_the_secrets_its_service_reads(name: str) -> None:
    given = _secret_keys(DEPLOYMENTS[name]["spec"]["template"]["spec"])
    assert given.pop("trainwatch-nats", set()) == {name}, f"{name}: only its own NATS password"
    assert set(given) == {f"trainwatch-{name}"}, f"{name}: only its own Secret"
    unused = given[f"trainwatch-{name}"] - _env_names(name)
    assert not unused, f"{name} receives secrets it never reads: {sorted(unused)}"


def test_every_secret_key_is_read_by_some_service() -> None:
    for secret, doc in SECRETS.items():
        if secret == "trainwatch-nats":
            continue
        service = secret.removeprefix("trainwatch-")
        assert set(doc["stringData"]) <= _env_names(service), secret


def test_compose_gives_each_service_only_what_it_reads() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for service in SERVICES:
        environment = compose[service]["environment"]
        secret_like = {k for k, v in environment.items() if "${" in str(v) and k.startswith("TRAINWATCH_")}
        assert secret_like <= _env_names(service), f"{service}: {sorted(secret_like - _env_names(service))}"
        assert compose[service]["read_only"] is True
        assert "/tmp" in compose[service]["tmpfs"]
        # The notifier's admin API (silences) checks admin tokens as the registry's and persister's do.
        assert "TRAINWATCH_ADMIN_TOKENS" not in environment or service in (
            "registry",
            "persister",
            "notifier",
        )
        published = compose[service].get("ports") or []
        if compose[service].get("deploy", {}).get("replicas", 1) > 1:
            fixed = [port for port in published if re.match(r"^(\d+\.){0,4}\d+:\d+", str(port))]
            assert not fixed, f"{service}: {compose[service]['deploy']['replicas']} replicas on one host port"


def test_one_stream_owner_and_three_replicas() -> None:
    config = next(doc for doc in _of_kind("ConfigMap") if _name(doc) == "trainwatch-config")["data"]
    assert config["TRAINWATCH_MANAGE_STREAMS"] == "false"
    assert config["TRAINWATCH_STREAM_REPLICAS"] == "3"
    assert len(config["TRAINWATCH_NATS_URL"].split(",")) == 3
    assert WORKLOADS["nats"]["spec"]["replicas"] == 3
    for name, deployment in DEPLOYMENTS.items():
        env = {
            e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert env.get("TRAINWATCH_MANAGE_STREAMS", "false") == ("true" if name == "registry" else "false")
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    owners = [s for s in SERVICES if compose[s]["environment"]["TRAINWATCH_MANAGE_STREAMS"] == "true"]
    assert owners == ["registry"]
    assert compose["registry"]["environment"]["TRAINWATCH_STREAM_REPLICAS"] == "3"


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_every_pod_has_a_network_policy(name: str) -> None:
    labels = WORKLOADS[name]["spec"]["template"]["metadata"]["labels"]
    policies = [
        p for p in _of_kind("NetworkPolicy")
        if p["spec"]["podSelector"].get("matchLabels")
        and p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    ]  # fmt: skip
    assert policies, f"{name}: no NetworkPolicy selects its pods"
    assert any(p["spec"]["podSelector"] == {} for p in _of_kind("NetworkPolicy")), "a default deny"


@pytest.mark.parametrize("name", SERVICES)
def test_own_service_account_without_an_api_token(name: str) -> None:
    pod = DEPLOYMENTS[name]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == f"trainwatch-{name}"
    assert pod["automountServiceAccountToken"] is False
    assert f"trainwatch-{name}" in {_name(sa) for sa in _of_kind("ServiceAccount")}


_PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
                 "unless", "offset"}  # fmt: skip


def _metrics_in(expr: str) -> set[str]:
    expr = re.sub(r"\{[^}]*\}", "", re.sub(r"\[[^\]]*\]", "", expr))
    expr = re.sub(r"\b(by|without)\s*\([^)]*\)", "", expr)
    return {word for word in re.findall(r"\btrainwatch_[a-z0-9_]+\b", expr)}


def test_alert_rules_name_existing_metrics_and_cover_the_issue() -> None:
    [rule] = _of_kind("PrometheusRule")
    alerts = {r["alert"]: r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]}
    exposed = exposed_names()
    for alert, expr in alerts.items():
        metrics = _metrics_in(expr)
        assert metrics, f"{alert}: names no Trainwatch metric"
        assert metrics <= exposed, f"{alert}: {sorted(metrics - exposed)} are not defined in the code"
    wanted = {
        "watch lag": "trainwatch_watcher_watch_lag_seconds",
        "cluster unreachable": "trainwatch_watcher_cluster_reachable",
        "clusters without an owner": "trainwatch_watcher_clusters_unowned",
        "no watcher replica": "trainwatch_watcher_live_replicas",
        "dead letters": "trainwatch_persister_deadlettered_total",
        "notifier dead letters": "trainwatch_notifier_deadletters_total",
        "consumer pending": "trainwatch_persister_consumer_pending",
    }
    for what, metric in wanted.items():
        assert any(metric in expr for expr in alerts.values()), f"no alert on {what}"


def test_the_grafana_dashboard_names_existing_metrics() -> None:
    dashboard = json.loads((K8S / "monitoring" / "trainwatch-dashboard.json").read_text())
    exposed = exposed_names()
    expressions = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert any("trainwatch_persister_jobs" in e for e in expressions), "jobs by phase shown"
    assert any("trainwatch_watcher_clusters_unowned" in e for e in expressions), "unowned shown"
    assert any("trainwatch_watcher_watch_lag_seconds" in e for e in expressions), "watch lag shown"
    for expr in expressions:
        assert _metrics_in(expr) <= exposed, expr


def test_the_service_monitor_finds_every_service() -> None:
    [monitor] = _of_kind("ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    for service in SERVICES:
        matching = [
            s for s in _of_kind("Service")
            if selector.items() <= (s["metadata"].get("labels") or {}).items()
            and s["metadata"]["labels"].get("app.kubernetes.io/name") == service
        ]  # fmt: skip
        assert matching, f"no Service for {service}'s /metrics"
        ports = {port["name"] for port in matching[0]["spec"]["ports"]}
        assert monitor["spec"]["endpoints"][0]["port"] in ports
