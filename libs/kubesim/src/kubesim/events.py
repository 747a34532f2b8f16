"""Writing Events the way the two client-go recorders do (reference §5.1 of ``diagnosis.md``).

``style="record"`` is ``tools/record`` (kubelet, job controller, training-operator, mpi-operator,
Volcano): ``source``, ``firstTimestamp``/``lastTimestamp`` and ``count``, a repeat bumps ``count``.
``style="events"`` is ``tools/events`` (kube-scheduler, Kueue >= 0.18, JobSet, KubeRay, Trainer):
``eventTime``, ``reportingComponent``/``reportingInstance``, ``action``, and a repeat grows
``series``. Both are stored as core/v1 Events; events.k8s.io/v1 shows the same objects.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from kubesim.kinds import EVENT
from kubesim.objects import now

if TYPE_CHECKING:
    from kubesim.store import Store

__all__ = ["Recorder", "micro_time"]

Style = Literal["record", "events"]


def micro_time() -> str:
    dt = datetime.now(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond:06d}Z"


def object_reference(obj: dict[str, Any], field_path: str | None = None) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    ref: dict[str, Any] = {"kind": obj.get("kind", ""), "apiVersion": obj.get("apiVersion", "")}
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    ref["name"] = meta.get("name", "")
    if meta.get("uid"):
        ref["uid"] = meta["uid"]
    if meta.get("resourceVersion"):
        ref["resourceVersion"] = meta["resourceVersion"]
    if field_path:
        ref["fieldPath"] = field_path
    return ref


class Recorder:
    """Records Events for one cluster's store, aggregating repeats as the recorders do."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._seen: dict[tuple[str, ...], tuple[str, str]] = {}  # key -> (namespace, name)

    def record(
        self,
        regarding: dict[str, Any],
        type_: str,
        reason: str,
        message: str,
        *,
        component: str,
        host: str | None = None,
        field_path: str | None = None,
        style: Style = "record",
        action: str | None = None,
        related: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Write (or repeat) an Event about ``regarding`` (a stored object or a reference-like
        dict with ``kind``/``apiVersion``/``metadata``). Returns the stored core/v1 Event."""
        ref = object_reference(regarding, field_path)
        namespace = ref.get("namespace") or "default"
        key = (style, ref.get("uid", ref["name"]), ref["kind"], type_, reason, message, component)
        if key in self._seen:
            ns, name = self._seen[key]
            try:
                return self._repeat(ns, name, style)
            except Exception:  # the event was deleted (TTL, a test): write a new one
                del self._seen[key]
        name = f"{ref['name']}.{time.time_ns():x}"
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "type": type_,
        }
        if style == "record":
            ts = now()
            body["source"] = {"component": component, **({"host": host} if host else {})}
            body.update(firstTimestamp=ts, lastTimestamp=ts, count=1, eventTime=None)
            body.update(reportingComponent=component, reportingInstance=host or "")
        else:
            body["source"] = {}
            body.update(firstTimestamp=None, lastTimestamp=None, eventTime=micro_time())
            body.update(reportingComponent=component, reportingInstance=f"{component}-{host or 'kubesim'}")
            body["action"] = action or reason
        if related is not None:
            body["related"] = object_reference(related)
        stored = self.store.create(EVENT, body)
        self._seen[key] = (namespace, name)
        return stored

    def _repeat(self, namespace: str, name: str, style: Style) -> dict[str, Any]:
        ev = self.store.get(EVENT, namespace, name)
        if style == "record":
            ev["count"] = int(ev.get("count") or 1) + 1
            ev["lastTimestamp"] = now()
        else:
            series = ev.get("series") or {"count": 1}
            ev["series"] = {"count": int(series.get("count", 1)) + 1, "lastObservedTime": micro_time()}
        return self.store.update(EVENT, ev, namespace=namespace, name=name)
