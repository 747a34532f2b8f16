"""``Status`` errors exactly as a kube-apiserver writes them.

``ApiError`` is raised by the store and by request handling; the server turns it into an
HTTP response whose body is a ``v1 Status`` (or into a watch ``ERROR`` event).
"""

from __future__ import annotations

from typing import Any

from kubesim.kinds import KindSpec

__all__ = [
    "ApiError",
    "already_exists",
    "bad_request",
    "conflict",
    "expired",
    "forbidden",
    "gone",
    "invalid",
    "not_found",
    "status_body",
    "unauthorized",
]

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """An error a real API server reports as a ``Status`` object."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason if reason is not None else _REASONS.get(code, "")
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        return status_body(self.code, self.message, reason=self.reason, details=self.details)


def status_body(
    code: int, message: str, *, reason: str = "", details: dict[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
    }
    if reason:
        body["reason"] = reason
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def _details(spec: KindSpec, name: str | None) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if name:
        d["name"] = name
    d["group"] = spec.group
    d["kind"] = spec.plural
    return d


def _qualified(spec: KindSpec) -> str:
    return spec.resource if spec.group else spec.plural


def not_found(spec: KindSpec, name: str) -> ApiError:
    return ApiError(404, f'{_qualified(spec)} "{name}" not found', details=_details(spec, name))


def already_exists(spec: KindSpec, name: str) -> ApiError:
    return ApiError(
        409,
        f'{_qualified(spec)} "{name}" already exists',
        reason="AlreadyExists",
        details=_details(spec, name),
    )


def conflict(spec: KindSpec, name: str, why: str | None = None) -> ApiError:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {_qualified(spec)} "{name}": {why}',
        reason="Conflict",
        details=_details(spec, name),
    )


def invalid(spec: KindSpec, name: str, field: str, value: Any, why: str) -> ApiError:
    cause = {"reason": "FieldValueInvalid", "message": f"Invalid value: {value!r}: {why}", "field": field}
    kind = f"{spec.kind}.{spec.group}" if spec.group else spec.kind
    details = {**_details(spec, name), "kind": spec.kind, "causes": [cause]}
    return ApiError(422, f'{kind} "{name}" is invalid: {field}: {cause["message"]}', details=details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def gone(message: str) -> ApiError:
    return ApiError(410, message, reason="Expired")


def expired(requested: int, oldest: int) -> ApiError:
    """The watch-cache form, sent as an ``ERROR`` event on a started watch."""
    return ApiError(410, f"too old resource version: {requested} ({oldest})", reason="Expired")


def storage_initializing(retry_after: int = 1) -> ApiError:
    """What a real apiserver answers while a kind's watch cache is (re)initializing: on the first
    request for a CRD kind and, after a restart, for each kind."""
    return ApiError(
        429,
        "storage is (re)initializing",
        reason="TooManyRequests",
        details={"retryAfterSeconds": retry_after},
        headers={"Retry-After": str(retry_after)},
    )


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized")


def forbidden(
    user: str,
    verb: str,
    spec: KindSpec | None,
    namespace: str | None,
    path: str,
    *,
    name: str | None = None,
    subresource: str | None = None,
) -> ApiError:
    """RBAC's answer, e.g. ``pods is forbidden: User "system:serviceaccount:x:y" cannot list
    resource "pods" in API group "" at the cluster scope``; for one object
    ``pods "p" is forbidden: ... cannot get resource "pods/log" ... in the namespace "ns"``."""
    if spec is None:
        return ApiError(403, f'forbidden: User "{user}" cannot {verb} path "{path}"', details={})
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    resource = f"{spec.plural}/{subresource}" if subresource else spec.plural
    subject = f'{_qualified(spec)} "{name}"' if name else _qualified(spec)
    msg = (
        f'{subject} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
        f'in API group "{spec.group}" {scope}'
    )
    details: dict[str, Any] = {"name": name} if name else {}
    details.update(group=spec.group, kind=spec.plural)
    return ApiError(403, msg, details=details)
