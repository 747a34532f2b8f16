"""``trainwatch clusters join``: give Trainwatch its own read-only identity in a cluster.

Runs on the operator's machine with the operator's kubeconfig (any credential it has, exec
plugins included: they are the operator's). In the target cluster it creates a namespace, a
ServiceAccount, the read-only ClusterRole that watching and diagnosis need and its binding, then
mints a token (a TokenRequest with a lifetime, or a service-account-token Secret) and builds a
static-token kubeconfig from it, which the CLI registers with the registry.

Two halves: the plan (``reader_rules``, ``plan``, ``registered_kubeconfig``, ``parse_lifetime``)
is pure data and unit-tested; ``KubeApi`` makes the Kubernetes calls over httpx. Every object
created is labelled ``app.kubernetes.io/managed-by=trainwatch``; ``leave`` deletes only objects
with that label, so an existing namespace or role that was reused is left alone.
"""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

from trainwatch_common.kinds import ALL_JOB_KINDS

__all__ = [
    "MANAGED_BY",
    "JoinError",
    "JoinOptions",
    "KubeApi",
    "Minted",
    "OperatorContext",
    "PlannedObject",
    "load_operator_context",
    "parse_lifetime",
    "plan",
    "reader_cluster_role",
    "reader_rules",
    "registered_kubeconfig",
]

MANAGED_BY = {"app.kubernetes.io/managed-by": "trainwatch"}
ROLE_NAME = "trainwatch-reader"
READ_VERBS = ["get", "list", "watch"]

# What watching and diagnosis read besides the job kinds (trainwatch_common.kinds).
_EVIDENCE: dict[str, list[str]] = {
    "": ["events", "pods", "pods/log"],
    "events.k8s.io": ["events"],
    "kueue.x-k8s.io": ["clusterqueues", "localqueues", "workloads"],
    "visibility.kueue.x-k8s.io": ["clusterqueues/pendingworkloads", "localqueues/pendingworkloads"],
    "scheduling.volcano.sh": ["podgroups"],
    "scheduling.x-k8s.io": ["podgroups"],
    "apiextensions.k8s.io": ["customresourcedefinitions"],
}


class JoinError(Exception):
    """A join step failed; the message says which and why (never a credential)."""


def reader_rules() -> list[dict[str, Any]]:
    """The ClusterRole's rules: read (get, list, watch) the job kinds of every group in
    ``trainwatch_common.kinds`` and the evidence diagnosis reads; nothing else."""
    by_group: dict[str, set[str]] = {}
    for kind in ALL_JOB_KINDS:
        by_group.setdefault(kind.group, set()).add(kind.plural)
    for group, resources in _EVIDENCE.items():
        by_group.setdefault(group, set()).update(resources)
    return [
        {"apiGroups": [group], "resources": sorted(resources), "verbs": list(READ_VERBS)}
        for group, resources in sorted(by_group.items())
    ]


def reader_cluster_role(name: str = ROLE_NAME, *, managed: bool = True) -> dict[str, Any]:
    """The ClusterRole; ``managed`` labels it as join's (``leave`` deletes it then)."""
    meta: dict[str, Any] = {"name": name}
    if managed:
        meta["labels"] = dict(MANAGED_BY)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": meta,
        "rules": reader_rules(),
    }


READER_YAML_HEADER = """\
# The read-only ClusterRole Trainwatch needs in a watched cluster (what `trainwatch clusters join`
# creates), for operators who apply RBAC themselves. Generated from
# trainwatch_registry.join.reader_rules(); regenerate with
#   uv run python -m trainwatch_registry.join > deploy/rbac/trainwatch-reader.yaml
# Bind it to the identity whose token you register (a ClusterRoleBinding). Not labelled
# managed-by=trainwatch, so `clusters leave` never deletes it.
"""


def reader_role_yaml() -> str:
    """deploy/rbac/trainwatch-reader.yaml: the ClusterRole as YAML."""
    return READER_YAML_HEADER + yaml.safe_dump(reader_cluster_role(managed=False), sort_keys=False)


_LIFETIME = re.compile(r"^(\d+)(s|m|h|d)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_lifetime(text: str) -> int:
    """``"8760h"``, ``"30d"``, ``"90m"``, ``"600s"`` -> seconds (at least 10 minutes, as the
    apiserver requires)."""
    match = _LIFETIME.match(text.strip())
    if not match:
        raise JoinError(f"token lifetime {text!r} is not a number with s, m, h or d (e.g. 8760h)")
    seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if seconds < 600:
        raise JoinError(f"token lifetime {text!r} is shorter than 10 minutes, the apiserver's minimum")
    return seconds


@dataclass(frozen=True)
class JoinOptions:
    cluster_id: str
    namespace: str = "trainwatch"
    service_account: str = "trainwatch"
    role: str = ROLE_NAME
    lifetime_seconds: int = 8760 * 3600
    secret_token: bool = False

    @property
    def binding(self) -> str:
        return f"{self.role}-{self.namespace}"

    @property
    def secret(self) -> str:
        return f"{self.service_account}-token"


@dataclass(frozen=True)
class PlannedObject:
    """One object join creates (or reuses): where it lives and its manifest."""

    kind: str
    name: str
    namespace: str | None
    collection: str  # the API path of its collection
    manifest: dict[str, Any]

    @property
    def path(self) -> str:
        return f"{self.collection}/{self.name}"

    @property
    def display(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


def _meta(name: str, namespace: str | None = None, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(MANAGED_BY), **extra}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def plan(options: JoinOptions) -> list[PlannedObject]:
    """The objects join creates, in creation order (leave deletes them in reverse)."""
    ns, sa = options.namespace, options.service_account
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    objects = [
        PlannedObject(
            "Namespace",
            ns,
            None,
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(ns)},
        ),
        PlannedObject(
            "ServiceAccount",
            sa,
            ns,
            f"/api/v1/namespaces/{ns}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(sa, ns)},
        ),
        PlannedObject(
            "ClusterRole", options.role, None, f"{rbac}/clusterroles", reader_cluster_role(options.role)
        ),
        PlannedObject(
            "ClusterRoleBinding",
            options.binding,
            None,
            f"{rbac}/clusterrolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": _meta(options.binding),
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": options.role,
                },
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
            },
        ),
    ]
    if options.secret_token:
        annotations = {"kubernetes.io/service-account.name": sa}
        objects.append(
            PlannedObject(
                "Secret",
                options.secret,
                ns,
                f"/api/v1/namespaces/{ns}/secrets",
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": _meta(options.secret, ns, annotations=annotations),
                    "type": "kubernetes.io/service-account-token",
                },
            )
        )
    return objects


# --------------------------------------------------------------------------- the operator's side
@dataclass
class OperatorContext:
    """The operator's context, resolved: where the API server is, how to trust it, and how the
    operator authenticates (never stored, never registered)."""

    context: str
    server: str
    ca_pem: bytes | None
    tls_server_name: str | None = None
    insecure: bool = False
    token: str | None = None
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


def _data_or_file(entry: dict[str, Any], key: str, base: Path) -> bytes | None:
    if entry.get(f"{key}-data"):
        return base64.b64decode(entry[f"{key}-data"])
    if entry.get(key):
        path = Path(os.path.expanduser(str(entry[key])))
        return (path if path.is_absolute() else base / path).read_bytes()
    return None


def _named(items: Any, name: str, what: str) -> dict[str, Any]:
    for item in items or ():
        if isinstance(item, dict) and item.get("name") == name:
            body = item.get(what)
            return body if isinstance(body, dict) else {}
    raise JoinError(f"the kubeconfig has no {what} named {name!r}")


def _exec_credential(spec: dict[str, Any], server: str) -> dict[str, Any]:
    """Run a client-go credential plugin (the operator's own: EKS, GKE, AKS, SSO) and return its
    ExecCredential status."""
    command = spec.get("command")
    if not command:
        raise JoinError("the context's exec plugin has no command")
    env = dict(os.environ)
    for item in spec.get("env") or ():
        env[str(item["name"])] = str(item["value"])
    info = {
        "apiVersion": spec.get("apiVersion", "client.authentication.k8s.io/v1"),
        "kind": "ExecCredential",
        "spec": {"interactive": False, "cluster": {"server": server}},
    }
    env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
    try:
        done = subprocess.run(  # the operator's own plugin, from their kubeconfig
            [str(command), *map(str, spec.get("args") or ())],
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JoinError(f"the exec plugin {command!r} failed: {exc}") from None
    if done.returncode != 0:
        raise JoinError(f"the exec plugin {command!r} exited with {done.returncode}")
    try:
        status = json.loads(done.stdout).get("status") or {}
    except (ValueError, AttributeError):
        raise JoinError(f"the exec plugin {command!r} did not print an ExecCredential") from None
    return status if isinstance(status, dict) else {}


def load_operator_context(path: Path, context: str) -> OperatorContext:
    """Resolve ``context`` in the operator's kubeconfig at ``path``."""
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise JoinError(f"cannot read the kubeconfig {path}: {exc}") from None
    if not isinstance(config, dict):
        raise JoinError(f"{path} is not a kubeconfig")
    ctx = _named(config.get("contexts"), context, "context")
    cluster = _named(config.get("clusters"), str(ctx.get("cluster")), "cluster")
    user = _named(config.get("users"), str(ctx.get("user")), "user") if ctx.get("user") else {}
    server = str(cluster.get("server") or "")
    if not server.startswith("https://"):
        raise JoinError(f"context {context!r}: the server {server!r} is not https (Trainwatch needs TLS)")
    base = path.parent
    op = OperatorContext(
        context=context,
        server=server.rstrip("/"),
        ca_pem=_data_or_file(cluster, "certificate-authority", base),
        tls_server_name=cluster.get("tls-server-name"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
    )
    if user.get("token"):
        op.token = str(user["token"])
    elif user.get("tokenFile"):
        op.token = Path(os.path.expanduser(str(user["tokenFile"]))).read_text().strip()
    elif isinstance(user.get("exec"), dict):
        status = _exec_credential(user["exec"], server)
        op.token = status.get("token")
        if status.get("clientCertificateData"):
            op.client_cert_pem = str(status["clientCertificateData"]).encode()
            op.client_key_pem = str(status.get("clientKeyData", "")).encode()
    if op.token is None and op.client_cert_pem is None:
        op.client_cert_pem = _data_or_file(user, "client-certificate", base)
        op.client_key_pem = _data_or_file(user, "client-key", base)
    if user.get("username") and user.get("password"):
        raw = f"{user['username']}:{user['password']}".encode()
        op.headers["Authorization"] = "Basic " + base64.b64encode(raw).decode()
    if op.token:
        op.headers["Authorization"] = f"Bearer {op.token}"
    return op


def registered_kubeconfig(op: OperatorContext, cluster_id: str, token: str) -> str:
    """The static-token kubeconfig Trainwatch registers: the operator's server and CA, the
    ServiceAccount's token, nothing of the operator's credentials."""
    cluster: dict[str, Any] = {"server": op.server}
    if op.ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(op.ca_pem).decode()
    if op.tls_server_name:
        cluster["tls-server-name"] = op.tls_server_name
    user = f"trainwatch@{cluster_id}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_id, "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": cluster_id, "context": {"cluster": cluster_id, "user": user}}],
        "current-context": cluster_id,
    }
    return yaml.safe_dump(config, sort_keys=False)


# ------------------------------------------------------------------------------ the calls
@dataclass(frozen=True)
class Minted:
    token: str
    expires_at: datetime | None


class KubeApi:
    """The few Kubernetes calls join, leave and rotate-token make, with the operator's
    credentials."""

    def __init__(self, op: OperatorContext, client: httpx.Client) -> None:
        self.op = op
        self._client = client

    @classmethod
    @contextmanager
    def connect(cls, op: OperatorContext, timeout: float = 30.0) -> Iterator[KubeApi]:
        with tempfile.TemporaryDirectory(prefix="trainwatch-join-") as workdir:
            verify: ssl.SSLContext | bool
            if op.insecure and not op.ca_pem:
                verify = False
            else:
                verify = ssl.create_default_context(cadata=op.ca_pem.decode() if op.ca_pem else None)
                if op.client_cert_pem and op.client_key_pem:
                    cert, key = Path(workdir) / "client.crt", Path(workdir) / "client.key"
                    cert.write_bytes(op.client_cert_pem)
                    key.write_bytes(op.client_key_pem)
                    verify.load_cert_chain(cert, key)
            headers = {"Accept": "application/json", **op.headers}
            with httpx.Client(base_url=op.server, headers=headers, verify=verify, timeout=timeout) as client:
                yield cls(op, client)

    def _request(self, method: str, path: str, body: Any = None) -> httpx.Response:
        try:
            return self._client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise JoinError(f"cannot reach {self.op.server}: {exc}") from None

    @staticmethod
    def _status(response: httpx.Response, what: str) -> JoinError:
        try:
            message = response.json().get("message") or response.text
        except ValueError:
            message = response.text
        return JoinError(f"{what}: {response.status_code} {message}")

    def get(self, path: str) -> dict[str, Any] | None:
        response = self._request("GET", path)
        if response.status_code == 404:
            return None
        if response.status_code >= 400:
            raise self._status(response, f"GET {path}")
        result: dict[str, Any] = response.json()
        return result

    def ensure(self, obj: PlannedObject) -> str:
        """Create ``obj``; an existing one is reused. Returns "created" or "exists"."""
        response = self._request("POST", obj.collection, obj.manifest)
        if response.status_code == 201:
            return "created"
        if response.status_code == 409:
            return "exists"
        raise self._status(response, f"creating {obj.display}")

    def delete_if_managed(self, obj: PlannedObject) -> str:
        """Delete ``obj`` if Trainwatch created it (it carries the managed-by label)."""
        current = self.get(obj.path)
        if current is None:
            return "absent"
        labels = (current.get("metadata") or {}).get("labels") or {}
        if any(labels.get(k) != v for k, v in MANAGED_BY.items()):
            return "kept (not created by trainwatch)"
        response = self._request("DELETE", obj.path)
        if response.status_code in (200, 202, 404):
            return "deleted"
        raise self._status(response, f"deleting {obj.display}")

    def token_request(self, options: JoinOptions) -> Minted:
        path = f"/api/v1/namespaces/{options.namespace}/serviceaccounts/{options.service_account}/token"
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": options.lifetime_seconds},
        }
        response = self._request("POST", path, body)
        if response.status_code != 201:
            raise self._status(response, "requesting a token")
        status = response.json().get("status") or {}
        expires = status.get("expirationTimestamp")
        return Minted(
            str(status["token"]), datetime.fromisoformat(expires.replace("Z", "+00:00")) if expires else None
        )

    def secret_token(self, options: JoinOptions, wait_seconds: float = 30.0) -> Minted:
        """The token the token controller puts into the join's Secret (it may take a moment)."""
        path = f"/api/v1/namespaces/{options.namespace}/secrets/{options.secret}"
        deadline = time.monotonic() + wait_seconds
        delay = 0.05
        while True:
            secret = self.get(path) or {}
            token = (secret.get("data") or {}).get("token")
            if token:
                return Minted(base64.b64decode(token).decode(), None)
            if time.monotonic() > deadline:
                raise JoinError(f"the token controller did not fill {path} within {wait_seconds:.0f}s")
            time.sleep(delay)  # waiting on another controller's asynchronous work, with backoff
            delay = min(delay * 2, 1.0)


if __name__ == "__main__":
    sys.stdout.write(reader_role_yaml())
