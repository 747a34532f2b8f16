"""The pure half of `clusters join`: rules, plan, lifetimes, the registered kubeconfig, the
operator's context (token, client certificate, exec plugin)."""

from __future__ import annotations

import base64
import json
import stat
import sys
from pathlib import Path

import pytest
import yaml

from trainwatch_common.kinds import ALL_JOB_KINDS
from trainwatch_registry import join

REPO = Path(__file__).resolve().parents[3]


def test_rules_read_every_job_kind_and_the_evidence_and_write_nothing() -> None:
    rules = join.reader_rules()
    granted = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    for kind in ALL_JOB_KINDS:
        assert (kind.group, kind.plural) in granted, kind
    for needed in [
        ("", "pods"),
        ("", "pods/log"),
        ("", "events"),
        ("events.k8s.io", "events"),
        ("kueue.x-k8s.io", "workloads"),
        ("visibility.kueue.x-k8s.io", "clusterqueues/pendingworkloads"),
        ("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads"),
        ("scheduling.volcano.sh", "podgroups"),
        ("scheduling.x-k8s.io", "podgroups"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
    ]:
        assert needed in granted, needed
    assert all(rule["verbs"] == ["get", "list", "watch"] for rule in rules)
    assert not any("secrets" in rule["resources"] or "*" in rule["resources"] for rule in rules)


def test_deploy_yaml_is_generated_from_the_same_rules() -> None:
    path = REPO / "deploy" / "rbac" / "trainwatch-reader.yaml"
    text = path.read_text()
    assert text == join.reader_role_yaml(), "regenerate: uv run python -m trainwatch_registry.join > " + str(
        path
    )
    role = yaml.safe_load(text)
    assert role["rules"] == join.reader_rules()
    assert "labels" not in role["metadata"]  # applied by hand: `leave` never deletes it


def test_plan_labels_every_object_and_names_them_from_the_options() -> None:
    options = join.JoinOptions("gpu-a", namespace="tw")
    objects = join.plan(options)
    assert [(o.kind, o.name, o.namespace) for o in objects] == [
        ("Namespace", "tw", None),
        ("ServiceAccount", "trainwatch", "tw"),
        ("ClusterRole", "trainwatch-reader", None),
        ("ClusterRoleBinding", "trainwatch-reader-tw", None),
    ]
    for obj in objects:
        assert obj.manifest["metadata"]["labels"] == join.MANAGED_BY
        assert obj.manifest["metadata"]["name"] == obj.name
    binding = objects[3].manifest
    assert binding["roleRef"]["name"] == "trainwatch-reader"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "trainwatch", "namespace": "tw"}]
    assert objects[1].path == "/api/v1/namespaces/tw/serviceaccounts/trainwatch"
    secret = join.plan(join.JoinOptions("gpu-a", namespace="tw", secret_token=True))[-1]
    assert (secret.kind, secret.name, secret.manifest["type"]) == (
        "Secret",
        "trainwatch-token",
        "kubernetes.io/service-account-token",
    )
    assert secret.manifest["metadata"]["annotations"] == {"kubernetes.io/service-account.name": "trainwatch"}


@pytest.mark.parametrize(
    ("text", "seconds"), [("8760h", 8760 * 3600), ("30d", 30 * 86400), ("90m", 5400), ("600s", 600)]
)
def test_lifetimes(text: str, seconds: int) -> None:
    assert join.parse_lifetime(text) == seconds


@pytest.mark.parametrize("text", ["1y", "h", "-5h", "5m", "8760"])
def test_bad_lifetimes_are_refused_with_the_reason(text: str) -> None:
    with pytest.raises(join.JoinError, match="lifetime"):
        join.parse_lifetime(text)


def _operator_kubeconfig(tmp_path: Path, user: dict[str, object]) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": "https://gpu-a.example.com:6443/",
                    "certificate-authority-data": base64.b64encode(b"CA PEM").decode(),
                },
            }
        ],
        "users": [{"name": "me", "user": user}],
        "contexts": [{"name": "gpu-a", "context": {"cluster": "c", "user": "me"}}],
    }
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(config))
    return path


def test_registered_kubeconfig_has_the_servers_ca_and_only_the_new_token(tmp_path: Path) -> None:
    op = join.load_operator_context(_operator_kubeconfig(tmp_path, {"token": "operator-secret"}), "gpu-a")
    assert op.server == "https://gpu-a.example.com:6443"
    assert op.headers == {"Authorization": "Bearer operator-secret"}
    text = join.registered_kubeconfig(op, "gpu-a", "sa-token")
    assert "operator-secret" not in text
    config = yaml.safe_load(text)
    assert config["current-context"] == "gpu-a"
    assert config["clusters"][0]["cluster"] == {
        "server": "https://gpu-a.example.com:6443",
        "certificate-authority-data": base64.b64encode(b"CA PEM").decode(),
    }
    assert config["users"][0]["user"] == {"token": "sa-token"}


def test_the_operators_exec_plugin_is_run(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.py"
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential"}
    plugin.write_text(
        "import json, os\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        f"cred = {credential!r}\n"
        "cred['status'] = {'token': 'from-plugin-' + os.environ['PROFILE'] + '-' + str(len(info['spec']))}\n"
        "print(json.dumps(cred))\n"
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin)],
            "env": [{"name": "PROFILE", "value": "prod"}],
        }
    }
    op = join.load_operator_context(_operator_kubeconfig(tmp_path, user), "gpu-a")
    assert op.token == "from-plugin-prod-2"
    failing = {"exec": {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]}}
    with pytest.raises(join.JoinError, match="exited with 3"):
        join.load_operator_context(_operator_kubeconfig(tmp_path, failing), "gpu-a")


def test_unknown_context_and_plain_http_are_clear_errors(tmp_path: Path) -> None:
    path = _operator_kubeconfig(tmp_path, {"token": "t"})
    with pytest.raises(join.JoinError, match="no context named 'nope'"):
        join.load_operator_context(path, "nope")
    config = yaml.safe_load(path.read_text())
    config["clusters"][0]["cluster"]["server"] = "http://gpu-a.example.com"
    path.write_text(json.dumps(config))
    with pytest.raises(join.JoinError, match="not https"):
        join.load_operator_context(path, "gpu-a")
