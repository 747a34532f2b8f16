"""Every container in deploy/k8s meets the Pod Security Standard ``restricted`` (v1.36), so the
manifests apply without warnings to a namespace labelled ``pod-security.kubernetes.io/enforce:
restricted``: https://kubernetes.io/docs/concepts/security/pod-security-standards/#restricted"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

K8S = Path(__file__).resolve().parents[1] / "deploy" / "k8s"
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod"}


def _pod_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") not in WORKLOADS:
                continue
            spec = doc["spec"]
            if doc["kind"] == "CronJob":
                spec = spec["jobTemplate"]["spec"]
            pod = spec if doc["kind"] == "Pod" else spec["template"]["spec"]
            yield f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", pod


PODS = list(_pod_specs())


def test_there_are_workloads_to_check() -> None:
    assert len(PODS) >= 5


@pytest.mark.parametrize(("where", "pod"), PODS, ids=[where for where, _ in PODS])
def test_pod_meets_restricted(where: str, pod: dict[str, Any]) -> None:
    pod_context = pod.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(field), f"{where}: {field}"
    for volume in pod.get("volumes") or []:
        assert "hostPath" not in volume, f"{where}: hostPath volume {volume['name']}"
    containers = [
        *(pod.get("initContainers") or []),
        *pod["containers"],
        *(pod.get("ephemeralContainers") or []),
    ]
    for container in containers:
        name = f"{where} container {container['name']}"
        context = container.get("securityContext") or {}
        assert context.get("allowPrivilegeEscalation") is False, (
            f"{name}: allowPrivilegeEscalation must be false"
        )
        assert not context.get("privileged"), f"{name}: privileged"
        capabilities = context.get("capabilities") or {}
        assert "ALL" in (capabilities.get("drop") or []), f"{name}: capabilities.drop must include ALL"
        assert set(capabilities.get("add") or []) <= {"NET_BIND_SERVICE"}, f"{name}: capabilities.add"
        non_root = context.get("runAsNonRoot", pod_context.get("runAsNonRoot"))
        assert non_root is True, f"{name}: runAsNonRoot must be true (pod or container)"
        assert context.get("runAsUser", pod_context.get("runAsUser")) != 0, f"{name}: runAsUser 0"
        seccomp = context.get("seccompProfile") or pod_context.get("seccompProfile") or {}
        assert seccomp.get("type") in ("RuntimeDefault", "Localhost"), (
            f"{name}: seccompProfile RuntimeDefault"
        )
        for port in container.get("ports") or []:
            assert not port.get("hostPort"), f"{name}: hostPort"


def test_the_namespace_enforces_restricted() -> None:
    namespace = yaml.safe_load((K8S / "namespace.yaml").read_text())
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
