"""Kubeconfig intake: a pure validator and sanitizer that says why it refuses.

``sanitize(text, context=..., policy=...)`` returns the kubeconfig reduced to the one context
Trainwatch will use, or raises ``KubeconfigRefused`` listing every problem found. Nothing here
touches a file, the network or a process: a kubeconfig that points at local files or needs a
command run is refused, not followed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from trainwatch_common.kubeconfig_yaml import DocumentRefused, load_mapping
from trainwatch_registry.addresses import AddressPolicy, server_url_problems

MAX_TOKEN_CHARS = 16 * 1024


@dataclass(frozen=True, slots=True)
class Refusal:
    code: str
    message: str


class KubeconfigRefused(ValueError):
    """The kubeconfig is malformed or unsafe; ``refusals`` says why, one entry per problem."""

    def __init__(self, refusals: list[Refusal]) -> None:
        super().__init__("; ".join(r.message for r in refusals))
        self.refusals = refusals


_PROCESS_FINGERPRINT_KEY: bytes = secrets.token_bytes(32)


@dataclass(frozen=True, slots=True)
class IntakePolicy:
    addresses: AddressPolicy = field(default_factory=AddressPolicy)
    allow_exec_plugins: bool = False
    # Keys the connection fingerprint (an HMAC): the fingerprint is published on the bus, and a
    # plain hash of server + CA + token would let anyone there test guessed tokens offline. The
    # registry passes a stable key from its settings; the default is random per process.
    fingerprint_key: bytes = field(default_factory=lambda: _PROCESS_FINGERPRINT_KEY, repr=False)


@dataclass(frozen=True, slots=True)
class SanitizedKubeconfig:
    """The one context Trainwatch uses, with nothing else: what is encrypted and stored."""

    context: str
    server: str
    auth_method: str
    document: dict[str, Any] = field(repr=False)
    connection_fingerprint: str
    # When the credentials stop working, when the token says so (a JWT's ``exp``), else None.
    credentials_expire_at: datetime | None = None

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.document, sort_keys=False, default_flow_style=False)

    def __repr__(self) -> str:  # never a credential in a log or traceback
        return f"SanitizedKubeconfig(context={self.context!r}, server={self.server!r})"


_CLUSTER_KEYS = {"server", "certificate-authority-data", "tls-server-name"}
_CLUSTER_DROPPED = {"extensions", "disable-compression"}
_USER_KEYS = {"token", "client-certificate-data", "client-key-data", "exec", "auth-provider"}
_USER_DROPPED = {"extensions"}
_FILE_KEYS = {
    "certificate-authority": "certificate-authority (a local file)",
    "client-certificate": "client-certificate (a local file)",
    "client-key": "client-key (a local file)",
    "tokenFile": "tokenFile (a local file)",
}


class _Checker:
    """Collects refusals while walking one kubeconfig."""

    def __init__(self, policy: IntakePolicy) -> None:
        self.policy = policy
        self.refusals: list[Refusal] = []

    def refuse(self, code: str, message: str) -> None:
        self.refusals.append(Refusal(code, message))

    def named_entries(self, doc: dict[str, Any], section: str, body: str) -> dict[str, dict[str, Any]]:
        raw = doc.get(section) or []
        if not isinstance(raw, list):
            self.refuse("malformed", f"'{section}' must be a list")
            return {}
        entries: dict[str, dict[str, Any]] = {}
        for index, item in enumerate(raw):
            name = item.get("name") if isinstance(item, dict) else None
            if not isinstance(name, str) or not name:
                self.refuse("malformed", f"{section}[{index}] has no name")
                continue
            content = item.get(body)
            if not isinstance(content, dict):
                self.refuse("malformed", f"{section[:-1]} {name!r} has no '{body}' mapping")
                continue
            if name in entries:
                self.refuse("duplicate_name", f"{section[:-1]} name {name!r} appears twice")
                continue
            entries[name] = content
        return entries

    def cluster(self, name: str, cluster: dict[str, Any]) -> dict[str, Any]:
        for key, label in _FILE_KEYS.items():
            if key in cluster:
                self.refuse("local_file", f"cluster {name!r} refers to {label}; embed it as *-data")
        if cluster.get("insecure-skip-tls-verify") not in (None, False):
            self.refuse("insecure_skip_tls_verify", f"cluster {name!r} sets insecure-skip-tls-verify")
        if "proxy-url" in cluster:
            self.refuse("proxy_url", f"cluster {name!r} sets proxy-url, which Trainwatch does not support")
        known = _CLUSTER_KEYS | _CLUSTER_DROPPED | set(_FILE_KEYS) | {"insecure-skip-tls-verify", "proxy-url"}
        for key in sorted(set(cluster) - known):
            self.refuse("unknown_field", f"cluster {name!r} has an unknown field {key!r}")
        kept: dict[str, Any] = {}
        server = cluster.get("server")
        if not isinstance(server, str) or not server.strip():
            self.refuse("no_server", f"cluster {name!r} names no server")
        else:
            for problem in server_url_problems(server, self.policy.addresses):
                self.refuse(problem.code, f"cluster {name!r}: {problem.message}")
            kept["server"] = server
        if "certificate-authority-data" in cluster:
            data = cluster["certificate-authority-data"]
            if self.pem(f"cluster {name!r} certificate-authority-data", data, kind="certificate"):
                kept["certificate-authority-data"] = data
        if "tls-server-name" in cluster:
            tls_name = cluster["tls-server-name"]
            if not isinstance(tls_name, str) or not tls_name.isprintable() or " " in tls_name:
                self.refuse("malformed", f"cluster {name!r} tls-server-name is not a host name")
            else:
                kept["tls-server-name"] = tls_name
        return kept

    def user(self, name: str, user: dict[str, Any]) -> tuple[dict[str, Any], str]:
        for key, label in _FILE_KEYS.items():
            if key in user:
                self.refuse("local_file", f"user {name!r} refers to {label}; embed it as *-data")
        if "username" in user or "password" in user:
            self.refuse("basic_auth", f"user {name!r} uses basic auth, removed from Kubernetes in 1.19")
        if any(key == "as" or key.startswith("as-") for key in user):
            self.refuse("impersonation", f"user {name!r} impersonates another user; not supported")
        plugins = [key for key in ("exec", "auth-provider") if key in user]
        for key in plugins:
            if not self.policy.allow_exec_plugins:
                self.refuse(
                    "exec_plugin" if key == "exec" else "auth_provider",
                    f"user {name!r} uses an {key} credential plugin, which runs commands on the watcher's "
                    "host (set TRAINWATCH_ALLOW_EXEC_PLUGINS=true to allow)",
                )
            elif not isinstance(user[key], dict):
                self.refuse("malformed", f"user {name!r} {key} must be a mapping")
        known = _USER_KEYS | _USER_DROPPED | set(_FILE_KEYS) | {"username", "password"}
        for key in sorted(set(user) - known):
            if not (key == "as" or key.startswith("as-")):
                self.refuse("unknown_field", f"user {name!r} has an unknown field {key!r}")
        kept: dict[str, Any] = {}
        if "token" in user and self.token(name, user["token"]):
            kept["token"] = user["token"]
        kept.update(self.client_certificate(name, user))
        kept.update({key: user[key] for key in plugins if isinstance(user[key], dict)})
        methods = [
            method
            for method, present in (
                ("token", "token" in kept),
                ("client-certificate", "client-certificate-data" in kept),
                ("exec", "exec" in kept),
                ("auth-provider", "auth-provider" in kept),
            )
            if present
        ]
        touched = set(user) & (_USER_KEYS | set(_FILE_KEYS) | {"username", "password"})
        if not methods and not touched:
            self.refuse("no_credentials", f"user {name!r} has no credentials")
        return kept, "+".join(methods) or "none"

    def token(self, name: str, token: Any) -> bool:
        if not isinstance(token, str) or not token:
            self.refuse("malformed", f"user {name!r} token must be a non-empty string")
            return False
        if any(ord(ch) < 0x20 or ord(ch) == 0x7F or ch.isspace() for ch in token):
            self.refuse(
                "token_control_chars", f"user {name!r} token contains whitespace or control characters"
            )
            return False
        if not token.isascii():
            # An HTTP header carries ASCII only: such a token can never authenticate (the watcher
            # would get 401 forever), so it is refused here rather than stored.
            self.refuse("token_not_ascii", f"user {name!r} token contains non-ASCII characters")
            return False
        if len(token) > MAX_TOKEN_CHARS:
            self.refuse("malformed", f"user {name!r} token is longer than {MAX_TOKEN_CHARS} characters")
            return False
        return True

    def client_certificate(self, name: str, user: dict[str, Any]) -> dict[str, Any]:
        cert_data, key_data = user.get("client-certificate-data"), user.get("client-key-data")
        if cert_data is None and key_data is None:
            return {}
        if key_data is None:
            self.refuse("cert_without_key", f"user {name!r} has a client certificate without its key")
            return {}
        if cert_data is None:
            self.refuse("key_without_cert", f"user {name!r} has a client key without its certificate")
            return {}
        cert = self.pem(f"user {name!r} client-certificate-data", cert_data, kind="certificate")
        key = self.pem(f"user {name!r} client-key-data", key_data, kind="key")
        if cert is None or key is None:
            return {}
        try:
            certificates = x509.load_pem_x509_certificates(cert)
            private_key = serialization.load_pem_private_key(key, password=None)
        except (ValueError, TypeError):
            # The library's text is noise (ASN.1 dumps, FAQ links): say what is wrong in our words.
            self.refuse(
                "bad_pem", f"user {name!r} client key cannot be read (not an unencrypted PEM private key)"
            )
            return {}
        public = private_key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        leaf = (
            certificates[0]
            .public_key()
            .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        if public != leaf:
            self.refuse("key_mismatch", f"user {name!r} client key does not match its certificate")
            return {}
        return {"client-certificate-data": cert_data, "client-key-data": key_data}

    def pem(self, what: str, data: Any, *, kind: str) -> bytes | None:
        """Decoded PEM bytes if ``data`` is strict base64 of PEM of the right kind, else a refusal."""
        if not isinstance(data, str) or not data.strip():
            self.refuse("bad_base64", f"{what} must be a non-empty base64 string")
            return None
        try:
            raw = base64.b64decode("".join(data.split()), validate=True)
        except (binascii.Error, ValueError):
            self.refuse("bad_base64", f"{what} is not valid base64")
            return None
        if kind == "certificate":
            try:
                x509.load_pem_x509_certificates(raw)
            except ValueError:
                why = (
                    "its certificate block cannot be parsed"
                    if b"-----BEGIN CERTIFICATE-----" in raw
                    else "no BEGIN CERTIFICATE block"
                )
                self.refuse("bad_pem", f"{what} is not a PEM certificate ({why})")
                return None
        elif b"-----BEGIN" not in raw or b"PRIVATE KEY-----" not in raw:
            self.refuse("bad_pem", f"{what} is not a PEM private key")
            return None
        return raw


def _echo(value: Any) -> str:
    """A value fit to repeat in a reason: a short plain word (``'Pod'``), else only its type."""
    if isinstance(value, str) and len(value) <= 63 and value.replace("/", "").replace(".", "").isalnum():
        return repr(value)
    return f"a {type(value).__name__}"


def _choose_context(
    checker: _Checker, doc: dict[str, Any], contexts: dict[str, Any], wanted: str | None
) -> str | None:
    current = doc.get("current-context")
    if current is not None and not isinstance(current, str):
        checker.refuse("malformed", "current-context must be a string")
        current = None
    name = wanted or current or None
    if name is None:
        if len(contexts) == 1:
            return next(iter(contexts))
        checker.refuse(
            "no_context",
            f"no current-context and {len(contexts)} contexts; choose one with 'context' "
            f"(available: {', '.join(sorted(contexts)) or 'none'})",
        )
        return None
    if name not in contexts:
        checker.refuse(
            "unknown_context",
            f"context {name!r} is not defined (available: {', '.join(sorted(contexts)) or 'none'})",
        )
        return None
    return name


def sanitize(
    text: str, *, context: str | None = None, policy: IntakePolicy | None = None
) -> SanitizedKubeconfig:
    """Validate ``text`` and reduce it to one context, or raise ``KubeconfigRefused``."""
    checker = _Checker(policy or IntakePolicy())
    try:
        doc = load_mapping(text)
    except DocumentRefused as exc:
        raise KubeconfigRefused([Refusal(exc.code, exc.message)]) from None
    if doc.get("kind", "Config") != "Config":
        raise KubeconfigRefused(
            [Refusal("not_kubeconfig", f"kind is {_echo(doc.get('kind'))}, not 'Config'")]
        )
    if doc.get("apiVersion", "v1") != "v1":
        raise KubeconfigRefused(
            [Refusal("not_kubeconfig", f"apiVersion is {_echo(doc.get('apiVersion'))}, not 'v1'")]
        )
    clusters = checker.named_entries(doc, "clusters", "cluster")
    users = checker.named_entries(doc, "users", "user")
    contexts = checker.named_entries(doc, "contexts", "context")
    if not contexts and not checker.refusals:
        checker.refuse("no_context", "the kubeconfig defines no contexts")
    chosen = _choose_context(checker, doc, contexts, context) if contexts else None
    if chosen is None:
        raise KubeconfigRefused(checker.refusals)
    ctx = contexts[chosen]
    cluster_name, user_name = ctx.get("cluster"), ctx.get("user")
    if not isinstance(cluster_name, str) or cluster_name not in clusters:
        checker.refuse(
            "missing_cluster", f"context {chosen!r} names cluster {cluster_name!r}, which is not defined"
        )
    if not isinstance(user_name, str) or user_name not in users:
        checker.refuse("missing_user", f"context {chosen!r} names user {user_name!r}, which is not defined")
    if checker.refusals:
        raise KubeconfigRefused(checker.refusals)
    assert isinstance(cluster_name, str)
    assert isinstance(user_name, str)
    cluster = checker.cluster(cluster_name, clusters[cluster_name])
    user, auth_method = checker.user(user_name, users[user_name])
    if checker.refusals:
        raise KubeconfigRefused(checker.refusals)
    reduced_context: dict[str, Any] = {"cluster": cluster_name, "user": user_name}
    namespace = ctx.get("namespace")
    if isinstance(namespace, str) and namespace:
        reduced_context["namespace"] = namespace
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": cluster}],
        "users": [{"name": user_name, "user": user}],
        "contexts": [{"name": chosen, "context": reduced_context}],
        "current-context": chosen,
    }
    # The fingerprint covers what decides the connection (server, CA, credentials), not names.
    canonical = orjson.dumps({"cluster": cluster, "user": user}, option=orjson.OPT_SORT_KEYS)
    keyed = hmac.new(checker.policy.fingerprint_key, canonical, hashlib.sha256).hexdigest()[:32]
    return SanitizedKubeconfig(
        context=chosen,
        server=cluster["server"],
        auth_method=auth_method,
        document=document,
        connection_fingerprint=f"hmac-sha256:{keyed}",
        credentials_expire_at=token_expiry(user.get("token")),
    )


def token_expiry(token: Any) -> datetime | None:
    """The ``exp`` claim of a bearer token that is a JWT (a ServiceAccount's TokenRequest token,
    an OIDC id token), read without verifying the signature: it only says when to warn. None for
    anything else. The token itself is never logged or kept."""
    if not isinstance(token, str) or token.count(".") != 2:
        return None
    payload = token.split(".")[1]
    try:
        claims = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, ValueError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if not isinstance(exp, int | float) or isinstance(exp, bool):
        return None
    try:
        return datetime.fromtimestamp(exp, UTC)
    except (OverflowError, OSError, ValueError):
        return None
