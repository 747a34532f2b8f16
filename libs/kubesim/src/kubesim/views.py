"""One storage, two APIs: events.k8s.io/v1 Events are core/v1 Events seen differently.

The apiserver keeps one Event object (``/registry/events``) and converts it per API group
(k/k ``pkg/apis/events/v1/conversion.go``): ``involvedObject`` is ``regarding``, ``message`` is
``note``, ``source``/``firstTimestamp``/``lastTimestamp``/``count`` are the ``deprecated*`` fields
and ``reportingComponent`` is ``reportingController``. kubesim stores the core/v1 form and converts
on the way out (and in, for a create through events.k8s.io).
"""

from __future__ import annotations

from typing import Any

import orjson

from kubesim.kinds import KindSpec

__all__ = ["inward", "outward", "outward_bytes"]

# core/v1 field -> events.k8s.io/v1 field
_RENAMES = {
    "involvedObject": "regarding",
    "message": "note",
    "source": "deprecatedSource",
    "firstTimestamp": "deprecatedFirstTimestamp",
    "lastTimestamp": "deprecatedLastTimestamp",
    "count": "deprecatedCount",
    "reportingComponent": "reportingController",
}
_BACK = {v: k for k, v in _RENAMES.items()}


def _empty(value: Any) -> bool:
    return value is None or value in ("", 0, {}, [])


def outward(spec: KindSpec, body: dict[str, Any]) -> dict[str, Any]:
    """The stored (core/v1) object as ``spec`` shows it."""
    if not spec.view_of:
        return body
    out: dict[str, Any] = {"kind": spec.kind, "apiVersion": spec.api_version}
    for key, value in body.items():
        if key in ("kind", "apiVersion"):
            continue
        new = _RENAMES.get(key, key)
        if new != "eventTime" and _empty(value):
            continue  # the deprecated fields are omitempty in events.k8s.io/v1
        out[new] = value
    out.setdefault("eventTime", None)
    return out


def outward_bytes(spec: KindSpec, data: bytes) -> bytes:
    if not spec.view_of:
        return data
    return orjson.dumps(outward(spec, orjson.loads(data)))


def inward(spec: KindSpec, body: Any) -> Any:
    """An object posted to ``spec`` in the stored (core/v1) form."""
    if not spec.view_of or not isinstance(body, dict):
        return body
    out: dict[str, Any] = {"kind": "Event", "apiVersion": "v1"}
    for key, value in body.items():
        if key not in ("kind", "apiVersion"):
            out[_BACK.get(str(key), str(key))] = value
    return out
