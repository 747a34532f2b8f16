"""Kueue: Workload objects for queued jobs, and the visibility API's pending workloads.

Served when a cluster is created with ``kueue=True`` (Workload, LocalQueue and ClusterQueue
CRDs, plus the aggregated ``visibility.kueue.x-k8s.io/v1beta1`` API):

* ``GET /apis/visibility.kueue.x-k8s.io/v1beta1/clusterqueues/<cq>/pendingworkloads``
* ``GET /apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/<ns>/localqueues/<lq>/pendingworkloads``

both with ``limit`` (default 1000) and ``offset`` (default 0), answering a
``PendingWorkloadsSummary`` whose items carry ``positionInClusterQueue`` and
``positionInLocalQueue`` (0-based). A workload is pending while it has neither
``QuotaReserved=True`` nor ``Finished=True`` and is active; the order is Kueue's queue order,
priority first, then creation time (then name, to be deterministic).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kubesim import errors
from kubesim.discovery import VISIBILITY_GROUP
from kubesim.kinds import CLUSTER_QUEUE, LOCAL_QUEUE, WORKLOAD
from kubesim.objects import now

if TYPE_CHECKING:
    from kubesim.cluster import Cluster
    from kubesim.store import Store

__all__ = [
    "QUEUE_LABEL",
    "admit",
    "finish",
    "pending",
    "pending_workloads",
    "pods_ready",
    "preempt",
    "serve_visibility",
    "set_conditions",
    "workload_body",
    "workload_name",
]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


def workload_name(kind: str, job_name: str, job_uid: str) -> str:
    """``<kind lowercased>-<job name>-<5-char hash>`` (KQ jobframework/workload_names.go)."""
    digest = hashlib.sha256(f"{job_name}/{kind}/{job_uid}".encode()).hexdigest()[:5]
    prefix = f"{kind.lower()}-{job_name}"[: 253 - 6]
    return f"{prefix}-{digest}"


def workload_body(
    job: Mapping[str, Any], queue: str, pod_sets: list[dict[str, Any]], *, priority: int = 0
) -> dict[str, Any]:
    """The Workload Kueue creates for ``job`` (owned by it, labelled with its uid)."""
    meta = job["metadata"]
    return {
        "apiVersion": WORKLOAD.api_version,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(str(job["kind"]), meta["name"], meta["uid"]),
            "namespace": meta["namespace"],
            "labels": {JOB_UID_LABEL: meta["uid"]},
            "ownerReferences": [
                {
                    "apiVersion": job["apiVersion"],
                    "kind": job["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"queueName": queue, "priority": priority, "active": True, "podSets": pod_sets},
    }


def _true(obj: Mapping[str, Any], ctype: str) -> bool:
    conds = (obj.get("status") or {}).get("conditions") or ()
    return any(isinstance(c, dict) and c.get("type") == ctype and c.get("status") == "True" for c in conds)


def _cluster_queue_of(store: Store, namespace: str, local_queue: str) -> str | None:
    try:
        lq = store.get(LOCAL_QUEUE, namespace, local_queue)
    except errors.ApiError:
        return None
    return str((lq.get("spec") or {}).get("clusterQueue") or "") or None


def pending_workloads(store: Store, cluster_queue: str) -> list[dict[str, Any]]:
    """The pending workloads of ``cluster_queue`` in queue order, as visibility items."""
    rows: list[tuple[int, str, str, dict[str, Any]]] = []
    for wl in store.list_objects(WORKLOAD):
        spec, meta = wl.get("spec") or {}, wl.get("metadata") or {}
        if spec.get("active") is False or _true(wl, "QuotaReserved") or _true(wl, "Finished"):
            continue
        ns, lq = str(meta.get("namespace", "")), str(spec.get("queueName", ""))
        if _cluster_queue_of(store, ns, lq) != cluster_queue:
            continue
        priority = int(spec.get("priority") or 0)
        rows.append((-priority, str(meta.get("creationTimestamp", "")), f"{ns}/{meta.get('name')}", wl))
    rows.sort(key=lambda r: r[:3])
    items: list[dict[str, Any]] = []
    per_lq: dict[tuple[str, str], int] = {}
    for position, (_, _, _, wl) in enumerate(rows):
        meta, spec = wl["metadata"], wl.get("spec") or {}
        key = (str(meta.get("namespace", "")), str(spec.get("queueName", "")))
        in_lq = per_lq.get(key, 0)
        per_lq[key] = in_lq + 1
        item_meta = {
            k: meta[k] for k in ("name", "namespace", "creationTimestamp", "ownerReferences") if k in meta
        }
        items.append(
            {
                "metadata": item_meta,
                "priority": int(spec.get("priority") or 0),
                "localQueueName": key[1],
                "positionInClusterQueue": position,
                "positionInLocalQueue": in_lq,
            }
        )
    return items


def _page(items: list[dict[str, Any]], query: Mapping[str, str]) -> list[dict[str, Any]]:
    try:
        limit = int(query.get("limit") or 1000)
        offset = int(query.get("offset") or 0)
    except ValueError:
        raise errors.bad_request("limit and offset must be integers") from None
    return items[offset : offset + limit]


def serve_visibility(
    cluster: Cluster,
    user: str,
    version: str,
    namespace: str | None,
    rest: list[str],
    query: Mapping[str, str],
) -> dict[str, Any]:
    if version != "v1beta1" or len(rest) != 3 or rest[2] != "pendingworkloads":
        raise errors.ApiError(404, "the server could not find the requested resource", details={})
    plural, name = rest[0], rest[1]
    if (plural, namespace is None) not in (("clusterqueues", True), ("localqueues", False)):
        raise errors.ApiError(404, "the server could not find the requested resource", details={})
    if (VISIBILITY_GROUP, f"{plural}/pendingworkloads") in cluster.forbidden_resources:
        scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        raise errors.ApiError(
            403,
            f'{plural}.{VISIBILITY_GROUP} "{name}" is forbidden: User "{user}" cannot get resource '
            f'"{plural}/pendingworkloads" in API group "{VISIBILITY_GROUP}" {scope}',
            details={"name": name, "group": VISIBILITY_GROUP, "kind": plural},
        )
    store = cluster.store
    not_found = errors.ApiError(
        404,
        f'{plural}.{VISIBILITY_GROUP} "{name}" not found',
        details={"name": name, "group": VISIBILITY_GROUP, "kind": plural},
    )
    if plural == "clusterqueues":
        try:
            store.get(CLUSTER_QUEUE, "", name)
        except errors.ApiError:
            raise not_found from None
        items = pending_workloads(store, name)
    else:
        assert namespace is not None
        cq = _cluster_queue_of(store, namespace, name)
        if cq is None:
            raise not_found
        items = [
            i
            for i in pending_workloads(store, cq)
            if i["metadata"].get("namespace") == namespace and i["localQueueName"] == name
        ]
    return {
        "kind": "PendingWorkloadsSummary",
        "apiVersion": f"{VISIBILITY_GROUP}/{version}",
        "metadata": {"creationTimestamp": None},
        "items": _page(items, query),
    }


def condition(ctype: str, status: str, reason: str, message: str) -> dict[str, Any]:
    """A Workload condition (metav1.Condition)."""
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now(),
        "observedGeneration": 1,
    }


def set_conditions(
    store: Store, namespace: str, name: str, *conds: dict[str, Any], **fields: Any
) -> dict[str, Any]:
    """Replace the Workload's conditions of those types (kept in place, as meta.SetStatusCondition
    does) and set other status ``fields``; written through the status subresource."""
    wl = store.get(WORKLOAD, namespace, name)
    status = dict(wl.get("status") or {})
    current = list(status.get("conditions") or [])
    for cond in conds:
        i = next((i for i, c in enumerate(current) if c.get("type") == cond["type"]), None)
        if i is None:
            current.append(cond)
        else:
            current[i] = cond
    status["conditions"] = current
    status.update(fields)
    for key, value in list(status.items()):
        if value is None:
            del status[key]
    return store.replace_status(WORKLOAD, namespace, name, status)


def pending(store: Store, namespace: str, name: str, message: str) -> dict[str, Any]:
    """``QuotaReserved=False`` ``Pending`` with the scheduler's inadmissible message."""
    return set_conditions(store, namespace, name, condition("QuotaReserved", "False", "Pending", message))


def admit(
    store: Store, namespace: str, name: str, cluster_queue: str, flavor: str = "a100"
) -> dict[str, Any]:
    """Quota reserved and admitted (no admission checks), pods not ready yet."""
    wl = store.get(WORKLOAD, namespace, name)
    assignments = [
        {"name": ps.get("name", "main"), "count": ps.get("count", 1), "flavors": {"nvidia.com/gpu": flavor}}
        for ps in (wl.get("spec") or {}).get("podSets") or ()
    ]
    return set_conditions(
        store,
        namespace,
        name,
        condition(
            "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cluster_queue}"
        ),
        condition("Admitted", "True", "Admitted", "The workload is admitted"),
        condition("PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded"),
        admission={"clusterQueue": cluster_queue, "podSetAssignments": assignments},
    )


def pods_ready(store: Store, namespace: str, name: str) -> dict[str, Any]:
    return set_conditions(
        store, namespace, name, condition("PodsReady", "True", "Started", "All pods reached readiness")
    )


def preemption_message(preemptor_uid: str, preemptor_job_uid: str, cluster_queue: str) -> str:
    """KQ pkg/scheduler/preemption/preemption.go: the Preempted/Evicted message."""
    return (
        f"Preempted to accommodate a workload (UID: {preemptor_uid}, JobUID: {preemptor_job_uid}) due to "
        f"prioritization in the ClusterQueue; preemptor path: /{cluster_queue}; "
        f"preemptee path: /{cluster_queue}"
    )


def preempt(store: Store, namespace: str, name: str, message: str) -> dict[str, Any]:
    """Evicted by a higher-priority workload: ``Evicted`` (reason ``Preempted``), ``Preempted``
    (``InClusterQueue``), quota released, not admitted; requeued."""
    return set_conditions(
        store,
        namespace,
        name,
        condition("Evicted", "True", "Preempted", message),
        condition("Preempted", "True", "InClusterQueue", message),
        condition("QuotaReserved", "False", "Pending", "Preempted to accommodate a higher priority workload"),
        condition("Admitted", "False", "NoReservation", "The workload has no reservation"),
        condition(
            "PodsReady", "False", "WaitForRecovery", "At least one pod has failed, waiting for recovery"
        ),
        condition("Requeued", "True", "Preempted", message),
        admission=None,
        requeueState={"count": 1},
    )


def finish(store: Store, namespace: str, name: str, *, succeeded: bool, message: str) -> dict[str, Any]:
    """``Finished=True`` (``Succeeded``/``Failed``) with the job's condition message."""
    reason = "Succeeded" if succeeded else "Failed"
    return set_conditions(store, namespace, name, condition("Finished", "True", reason, message))
