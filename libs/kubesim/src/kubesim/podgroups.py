"""Gang-scheduling PodGroups: Volcano's (``scheduling.volcano.sh/v1beta1``) and
scheduler-plugins' (``scheduling.x-k8s.io/v1alpha1``), as reference §4.2-4.3 describe them.

Volcano: phases ``Pending``/``Inqueue``/``Running``/``Unknown``/``Completed``; conditions
``Unschedulable`` (reason ``NotEnoughResources``, message ``<k>/<n> tasks in gang unschedulable:
<fit error>``) and ``Scheduled``. scheduler-plugins: phases ``Pending``/``Scheduling``/``Running``/
``Unknown``/``Finished``/``Failed``, no conditions.
"""

from __future__ import annotations

from typing import Any

from kubesim.kinds import COSCHEDULING_PODGROUP, VOLCANO_PODGROUP
from kubesim.objects import now

__all__ = ["coscheduling_podgroup", "gang_message", "volcano_podgroup", "volcano_podgroup_name"]


def volcano_podgroup_name(job: dict[str, Any]) -> str:
    """The PodGroup a job's pods name in ``scheduling.k8s.io/group-name``: a Volcano Job's is
    ``<job>-<uid>``, a RayJob's ``ray-<job>-pg``, the training operators' the job's name."""
    meta = job["metadata"]
    if job.get("apiVersion") == "batch.volcano.sh/v1alpha1":
        return f"{meta['name']}-{meta['uid']}"
    if job.get("kind") == "RayJob":
        return f"ray-{meta['name']}-pg"
    return str(meta["name"])


def _owner(job: dict[str, Any]) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "apiVersion": job["apiVersion"],
        "kind": job["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def gang_message(
    unschedulable: int, total: int, min_available: int, origin_pod: str, resource: str, nodes: int
) -> str:
    """``<k>/<n> tasks in gang unschedulable: <FitError>`` (VC gang.go, job_info.go ``FitError``)."""
    schedulable = total - unschedulable
    return (
        f"{unschedulable}/{total} tasks in gang unschedulable: pod group is not ready, {total} Pending, "
        f"{min_available} minAvailable; Pending: {unschedulable} Unschedulable, {schedulable} Schedulable. "
        f"Origin reason is {origin_pod}: 0/{nodes} nodes are unavailable: {nodes} Insufficient {resource}."
    )


def volcano_podgroup(
    job: dict[str, Any], min_member: int, *, queue: str = "default", gpus: int = 1
) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "apiVersion": VOLCANO_PODGROUP.api_version,
        "kind": "PodGroup",
        "metadata": {
            "name": volcano_podgroup_name(job),
            "namespace": meta["namespace"],
            "ownerReferences": [_owner(job)],
            "annotations": {"scheduling.k8s.io/group-name": volcano_podgroup_name(job)},
        },
        "spec": {
            "minMember": min_member,
            "minResources": {"nvidia.com/gpu": str(min_member * gpus), "cpu": str(4 * min_member)},
            "queue": queue,
            "priorityClassName": "",
        },
    }


def volcano_status(phase: str, *, unschedulable: str | None = None, running: int = 0) -> dict[str, Any]:
    """A Volcano PodGroup status; ``unschedulable`` adds the gang plugin's condition."""
    st: dict[str, Any] = {"phase": phase}
    if unschedulable:
        st["conditions"] = [
            {
                "type": "Unschedulable",
                "status": "True",
                "transitionID": "c6f7c1f9-0d1e-4f0c-9a55-3f7d3d2f0b10",
                "lastTransitionTime": now(),
                "reason": "NotEnoughResources",
                "message": unschedulable,
            }
        ]
    if running:
        st["running"] = running
    return st


def coscheduling_podgroup(job: dict[str, Any], min_member: int, *, timeout: int = 60) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "apiVersion": COSCHEDULING_PODGROUP.api_version,
        "kind": "PodGroup",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "ownerReferences": [_owner(job)]},
        "spec": {"minMember": min_member, "scheduleTimeoutSeconds": timeout},
    }


def coscheduling_status(phase: str, *, running: int = 0) -> dict[str, Any]:
    st: dict[str, Any] = {"phase": phase, "scheduleStartTime": now()}
    if running:
        st["running"] = running
    return st
