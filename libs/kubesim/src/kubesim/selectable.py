"""Selectable fields of the built-in kinds that have more than ``metadata.name/namespace``.

The values are computed once per stored version (``StoredObject.fields``), as the apiserver's
``ToSelectableFields`` does, so a field-selected watch compares strings only. Events are stored in
their core/v1 form; the events.k8s.io/v1 names map onto it (``regarding.*`` is
``involvedObject.*``, ``reportingController`` is ``reportingComponent``).
"""

from __future__ import annotations

from typing import Any

from kubesim.kinds import KindSpec

__all__ = ["V1_EVENT_ALIASES", "extract"]

V1_EVENT_ALIASES: dict[str, str] = {
    **{f"regarding.{f}": f"involvedObject.{f}" for f in ("kind", "namespace", "name", "uid", "apiVersion")},
    "regarding.resourceVersion": "involvedObject.resourceVersion",
    "regarding.fieldPath": "involvedObject.fieldPath",
    "reportingController": "reportingComponent",
}


def _str(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _pod(body: dict[str, Any]) -> dict[str, str]:
    spec, status = _dict(body.get("spec")), _dict(body.get("status"))
    return {
        "spec.nodeName": _str(spec.get("nodeName")),
        "spec.restartPolicy": _str(spec.get("restartPolicy")),
        "spec.schedulerName": _str(spec.get("schedulerName")),
        "spec.serviceAccountName": _str(spec.get("serviceAccountName")),
        "spec.hostNetwork": _str(bool(spec.get("hostNetwork"))),
        "status.phase": _str(status.get("phase")),
        "status.podIP": _str(status.get("podIP")),
        "status.nominatedNodeName": _str(status.get("nominatedNodeName")),
    }


def _event(body: dict[str, Any]) -> dict[str, str]:
    involved = _dict(body.get("involvedObject"))
    out = {
        f"involvedObject.{k}": _str(involved.get(k))
        for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    }
    reporting = _str(body.get("reportingComponent"))
    out["reason"] = _str(body.get("reason"))
    out["reportingComponent"] = reporting
    out["source"] = _str(_dict(body.get("source")).get("component")) or reporting
    out["type"] = _str(body.get("type"))
    return out


def extract(spec: KindSpec, body: dict[str, Any]) -> dict[str, str] | None:
    """The selectable fields of ``body`` (``None`` for kinds with only the metadata ones)."""
    if not spec.fields:
        return None
    if spec.kind == "Pod":
        return _pod(body)
    if spec.kind == "Event":
        return _event(body)
    return None
