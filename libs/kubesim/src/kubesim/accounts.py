"""ServiceAccounts, their tokens, and RBAC by ClusterRoles: what ``trainwatch clusters join`` needs.

A real kube-apiserver serves ``core/v1`` namespaces, serviceaccounts and secrets and
``rbac.authorization.k8s.io/v1`` clusterroles and clusterrolebindings; it mints bound tokens
through the ``serviceaccounts/<name>/token`` subresource (a ``TokenRequest``) and the token
controller fills ``kubernetes.io/service-account-token`` Secrets. A request bearing such a token
is authenticated as ``system:serviceaccount:<namespace>:<name>`` and authorized by the
ClusterRoles bound to that subject. This module holds those rules; ``server.py`` calls it.

What is simplified: no Roles/RoleBindings (cluster-wide bindings only), no aggregation, no
``nonResourceURLs`` (discovery is open to every authenticated user, as ``system:discovery``
grants), no escalation check on writing a ClusterRole, no namespace admission (objects may be
created in a namespace that does not exist), and a namespace is deleted with its contents at
once rather than after a ``Terminating`` phase handled by the namespace controller.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from kubesim import errors
from kubesim.kinds import KindSpec

if TYPE_CHECKING:
    from kubesim.store import Store

__all__ = [
    "ACCOUNT_KINDS",
    "CLUSTER_ROLE",
    "CLUSTER_ROLE_BINDING",
    "NAMESPACE",
    "SECRET",
    "SERVICE_ACCOUNT",
    "SERVICE_ACCOUNT_TOKEN_TYPE",
    "Accounts",
]

RBAC_GROUP = "rbac.authorization.k8s.io"
SERVICE_ACCOUNT_TOKEN_TYPE = "kubernetes.io/service-account-token"
_SA_NAME = "kubernetes.io/service-account.name"
_SA_UID = "kubernetes.io/service-account.uid"
# The apiserver's defaults and limits for TokenRequest (pkg/apis/authentication/validation).
DEFAULT_EXPIRATION_SECONDS = 3600
MIN_EXPIRATION_SECONDS = 600
MAX_EXPIRATION_SECONDS = 1 << 32
_AUDIENCE = "https://kubernetes.default.svc.cluster.local"

NAMESPACE = KindSpec(
    "", "v1", "Namespace", "namespaces", "namespace", namespaced=False, short_names=("ns",),
    builtin=True, job=False, subresources=("status", "finalize"),
)  # fmt: skip
SERVICE_ACCOUNT = KindSpec(
    "", "v1", "ServiceAccount", "serviceaccounts", "serviceaccount", short_names=("sa",),
    builtin=True, job=False, subresources=("token",),
)  # fmt: skip
SECRET = KindSpec("", "v1", "Secret", "secrets", "secret", builtin=True, job=False, subresources=())
CLUSTER_ROLE = KindSpec(
    RBAC_GROUP, "v1", "ClusterRole", "clusterroles", "clusterrole", namespaced=False,
    builtin=True, job=False, subresources=(),
)  # fmt: skip
CLUSTER_ROLE_BINDING = KindSpec(
    RBAC_GROUP, "v1", "ClusterRoleBinding", "clusterrolebindings", "clusterrolebinding", namespaced=False,
    builtin=True, job=False, subresources=(),
)  # fmt: skip
ACCOUNT_KINDS: tuple[KindSpec, ...] = (NAMESPACE, SERVICE_ACCOUNT, SECRET, CLUSTER_ROLE, CLUSTER_ROLE_BINDING)
"""Served by every cluster with ``core=True``."""


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Grant:
    __slots__ = ("expires", "namespace", "secret", "service_account", "uid")

    def __init__(
        self, namespace: str, service_account: str, uid: str, expires: float | None, secret: str | None
    ):
        self.namespace = namespace
        self.service_account = service_account
        self.uid = uid
        self.expires = expires
        self.secret = secret


class Accounts:
    """The service-account tokens of one cluster and the RBAC decisions about them."""

    def __init__(self, store: Store, *, issuer: str, ca_pem: Callable[[], bytes | None]) -> None:
        self._store = store
        self._issuer = issuer
        self._ca_pem = ca_pem
        self._key = secrets.token_bytes(32)
        self._grants: dict[str, _Grant] = {}
        self._skew = 0.0
        # The apiserver's --service-account-max-token-expiration (None: not set).
        self.max_expiration_seconds: int | None = None

    # ---------------------------------------------------------------- clock
    def now(self) -> float:
        return time.time() + self._skew

    def advance(self, seconds: float) -> None:
        """Move this cluster's clock forward (tokens expire without waiting)."""
        self._skew += seconds

    # --------------------------------------------------------------- tokens
    def _jwt(self, claims: dict[str, Any]) -> str:
        header = _b64url(orjson.dumps({"alg": "HS256", "kid": _b64url(self._key[:8]), "typ": "JWT"}))
        payload = _b64url(orjson.dumps(claims))
        signature = hmac.new(self._key, f"{header}.{payload}".encode(), hashlib.sha256).digest()
        return f"{header}.{payload}.{_b64url(signature)}"

    def token_request(self, namespace: str, name: str, body: Any) -> dict[str, Any]:
        """``POST .../serviceaccounts/<name>/token``: the ``TokenRequest`` with its token."""
        sa = self._store.get(SERVICE_ACCOUNT, namespace, name)  # 404 as the real server
        spec = body.get("spec") if isinstance(body, dict) else None
        spec = dict(spec) if isinstance(spec, dict) else {}
        seconds = spec.get("expirationSeconds", DEFAULT_EXPIRATION_SECONDS)
        if seconds is None:
            seconds = DEFAULT_EXPIRATION_SECONDS
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            raise errors.bad_request("json: cannot unmarshal expirationSeconds into Go value of type int64")
        why = None
        if seconds < MIN_EXPIRATION_SECONDS:
            why = "may not specify a duration less than 10 minutes"
        elif seconds > MAX_EXPIRATION_SECONDS:
            why = "may not specify a duration larger than 2^32 seconds"
        if why is not None:
            cause = {
                "reason": "FieldValueInvalid",
                "message": f"Invalid value: {seconds}: {why}",
                "field": "spec.expirationSeconds",
            }
            raise errors.ApiError(
                422,
                f'TokenRequest.authentication.k8s.io "{name}" is invalid: spec.expirationSeconds: '
                f"Invalid value: {seconds}: {why}",
                reason="Invalid",
                details={
                    "name": name,
                    "group": "authentication.k8s.io",
                    "kind": "TokenRequest",
                    "causes": [cause],
                },
            )
        if self.max_expiration_seconds is not None:
            seconds = min(seconds, self.max_expiration_seconds)
        audiences = spec.get("audiences") or [_AUDIENCE]
        issued = int(self.now())
        expires = issued + seconds
        uid = sa["metadata"]["uid"]
        token = self._jwt(
            {
                "aud": audiences,
                "exp": expires,
                "iat": issued,
                "iss": self._issuer,
                "jti": secrets.token_hex(16),
                "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
                "nbf": issued,
                "sub": f"system:serviceaccount:{namespace}:{name}",
            }
        )
        self._grants[token] = _Grant(namespace, name, uid, float(expires), None)
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": {
                "audiences": audiences,
                "expirationSeconds": seconds,
                "boundObjectRef": spec.get("boundObjectRef"),
            },
            "status": {"token": token, "expirationTimestamp": _rfc3339(expires)},
        }

    def after_create(self, spec: KindSpec, obj: dict[str, Any]) -> None:
        """The token controller: a ``kubernetes.io/service-account-token`` Secret whose
        ServiceAccount exists gets ``token``, ``ca.crt`` and ``namespace`` (the create response
        does not have them yet; a GET right after does)."""
        if spec is not SECRET or obj.get("type") != SERVICE_ACCOUNT_TOKEN_TYPE:
            return
        meta = obj["metadata"]
        namespace, annotations = meta["namespace"], meta.get("annotations") or {}
        sa_name = annotations.get(_SA_NAME)
        try:
            sa = self._store.get(SERVICE_ACCOUNT, namespace, str(sa_name))
        except errors.ApiError:
            return
        uid = sa["metadata"]["uid"]
        token = self._jwt(
            {
                "iss": "kubernetes/serviceaccount",
                "kubernetes.io/serviceaccount/namespace": namespace,
                "kubernetes.io/serviceaccount/secret.name": meta["name"],
                "kubernetes.io/serviceaccount/service-account.name": sa_name,
                "kubernetes.io/serviceaccount/service-account.uid": uid,
                "sub": f"system:serviceaccount:{namespace}:{sa_name}",
            }
        )
        self._grants[token] = _Grant(namespace, str(sa_name), uid, None, meta["name"])
        data = {"token": token.encode(), "namespace": namespace.encode(), "ca.crt": self._ca_pem() or b""}
        self._store.patch(
            SECRET,
            namespace,
            meta["name"],
            {
                "metadata": {"annotations": {_SA_UID: uid}},
                "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
            },
        )

    def authenticate(self, token: str) -> tuple[str, bool]:
        """The user of a service-account token, as ``(user, False)`` (not a superuser: RBAC
        decides); 401 for an unknown or expired token, or one whose ServiceAccount (or Secret)
        is gone or was re-created."""
        grant = self._grants.get(token)
        if grant is None:
            raise errors.unauthorized()
        if grant.expires is not None and self.now() >= grant.expires:
            raise errors.unauthorized()
        try:
            sa = self._store.get(SERVICE_ACCOUNT, grant.namespace, grant.service_account)
            if grant.secret is not None:
                self._store.get(SECRET, grant.namespace, grant.secret)
        except errors.ApiError:
            raise errors.unauthorized() from None
        if sa["metadata"]["uid"] != grant.uid:
            raise errors.unauthorized()
        return f"system:serviceaccount:{grant.namespace}:{grant.service_account}", False

    # ----------------------------------------------------------------- RBAC
    def authorize(self, user: str, verb: str, group: str, resource: str, name: str | None = None) -> bool:
        """Whether a ClusterRole bound to ``user`` (a ServiceAccount) allows ``verb`` on
        ``resource`` (``plural`` or ``plural/subresource``) of ``group``."""
        prefix = "system:serviceaccount:"
        if not user.startswith(prefix):
            return False
        namespace, _, sa_name = user[len(prefix) :].partition(":")
        for binding in self._store.list_objects(CLUSTER_ROLE_BINDING):
            if not _binds(binding, namespace, sa_name):
                continue
            ref = binding.get("roleRef") or {}
            if ref.get("kind") != "ClusterRole":
                continue
            try:
                role = self._store.get(CLUSTER_ROLE, "", str(ref.get("name")))
            except errors.ApiError:
                continue
            if any(_allows(rule, verb, group, resource, name) for rule in role.get("rules") or ()):
                return True
        return False

    def delete_namespace(self, namespace: str) -> None:
        """The namespace controller, at once: every namespaced object in it is deleted."""
        for spec in self._store.kinds:
            if not spec.namespaced or spec.view_of:
                continue
            for obj in self._store.list_objects(spec, namespace=namespace):
                self._store.delete(spec, namespace, obj["metadata"]["name"])


def _binds(binding: dict[str, Any], namespace: str, name: str) -> bool:
    for subject in binding.get("subjects") or ():
        if not isinstance(subject, dict):
            continue
        if (subject.get("kind"), subject.get("name"), subject.get("namespace")) == (
            "ServiceAccount",
            name,
            namespace,
        ):
            return True
        if subject.get("kind") == "Group" and subject.get("name") in (
            "system:serviceaccounts",
            f"system:serviceaccounts:{namespace}",
            "system:authenticated",
        ):
            return True
    return False


def _allows(rule: Any, verb: str, group: str, resource: str, name: str | None) -> bool:
    """RBAC's ``RuleAllows`` for resource rules."""
    if not isinstance(rule, dict):
        return False
    verbs, groups, resources = (
        rule.get("verbs") or [],
        rule.get("apiGroups") or [],
        rule.get("resources") or [],
    )
    if "*" not in verbs and verb not in verbs:
        return False
    if "*" not in groups and group not in groups:
        return False
    sub = resource.partition("/")[2]
    if not any(r == "*" or r == resource or (sub and r == f"*/{sub}") for r in resources):
        return False
    names = rule.get("resourceNames") or []
    return not names or (name is not None and name in names)
