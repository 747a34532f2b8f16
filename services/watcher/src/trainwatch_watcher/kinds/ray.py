"""KubeRay ``ray.io/v1`` RayJob (reference §2.6; mapping §3.3 "RayJob").

There are no conditions: the phase comes from ``jobDeploymentStatus`` (KubeRay's lifecycle), read
together with ``jobStatus`` (Ray's own). ``Complete`` does not mean success: ``Complete`` +
``STOPPED`` (a user stopped the Ray job) is reported as Failed with reason ``Stopped`` — there is no
Cancelled phase in the contract — and ``Complete`` + ``FAILED`` is how KubeRay 1.0 reported a
failure. A retried attempt shows ``Retrying`` (Restarting), never ``Failed``.

``restart_count`` is the number of retries: ``status.failed`` counts failed attempts, including a
final one that was not retried, so a terminally failed job reports one less.

KubeRay 1.0's ``FailedTo*``/``FailedJobDeploy`` states are Failed but *not terminal*: that
controller requeued and retried from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainwatch_common.events.jobs import Phase, SubPhase
from trainwatch_watcher.kinds.common_rules import make_status, queue_name
from trainwatch_watcher.kinds.fields import count, enum_text, flag, parse_time, text
from trainwatch_watcher.kinds.model import NormalizedStatus
from trainwatch_watcher.kinds.objects import kueue_waiting, read_object

# (phase, sub_phase, terminal, reason used when status.reason is empty)
_Row = tuple[Phase, SubPhase | None, bool, str | None]

_DEPLOYMENT_ONLY: dict[str, _Row] = {
    "": (Phase.PENDING, SubPhase.CREATED, False, None),
    "Initializing": (Phase.PENDING, SubPhase.INITIALIZING, False, None),
    # InteractiveMode: waiting for the user to submit (spec.jobId).
    "Waiting": (Phase.PENDING, SubPhase.WAITING, False, None),
    "Failed": (Phase.FAILED, None, True, None),
    "ValidationFailed": (Phase.FAILED, None, True, "ValidationFailed"),
    "Retrying": (Phase.RESTARTING, None, False, None),
    "Suspending": (Phase.SUSPENDED, None, False, None),
    "Suspended": (Phase.SUSPENDED, None, False, None),
    # KubeRay 1.0 names.
    "FailedToGetOrCreateRayCluster": (Phase.FAILED, None, False, "FailedToGetOrCreateRayCluster"),
    "FailedJobDeploy": (Phase.FAILED, None, False, "FailedJobDeploy"),
    "FailedToGetJobStatus": (Phase.FAILED, None, False, "FailedToGetJobStatus"),
    "WaitForDashboard": (Phase.PENDING, SubPhase.INITIALIZING, False, None),
    "WaitForDashboardReady": (Phase.PENDING, SubPhase.INITIALIZING, False, None),
}

# jobDeploymentStatus Running: the Ray job's status decides; a terminal one is still finishing.
_WHILE_RUNNING: dict[str, _Row] = {
    "": (Phase.PENDING, SubPhase.SCHEDULING, False, None),
    "PENDING": (Phase.PENDING, SubPhase.SCHEDULING, False, None),
    "RUNNING": (Phase.RUNNING, None, False, None),
    "SUCCEEDED": (Phase.SUCCEEDED, SubPhase.FINISHING, False, None),
    "FAILED": (Phase.FAILED, SubPhase.FINISHING, False, "AppFailed"),
    "STOPPED": (Phase.FAILED, SubPhase.FINISHING, False, "Stopped"),
}

# jobDeploymentStatus Complete: finished, but the outcome is in jobStatus.
_WHEN_COMPLETE: dict[str, _Row] = {
    "SUCCEEDED": (Phase.SUCCEEDED, None, True, None),
    "STOPPED": (Phase.FAILED, None, True, "Stopped"),
    "FAILED": (Phase.FAILED, None, True, "AppFailed"),
}

_UNKNOWN: _Row = (Phase.UNKNOWN, None, False, None)


def normalize(
    obj: Mapping[str, Any],
    previous: NormalizedStatus | None,
    related: Mapping[str, Any] | None = None,
) -> NormalizedStatus:
    """Normalize a RayJob. ``related`` is unused (the RayCluster adds nothing the status lacks)."""
    job = read_object(obj)
    status = job.status
    deployment = enum_text(status, "jobDeploymentStatus")
    ray_status = enum_text(status, "jobStatus")

    source = f"jobDeploymentStatus:{deployment}"
    if deployment == "Running":
        row = _WHILE_RUNNING.get(ray_status, _UNKNOWN) if ray_status is not None else _UNKNOWN
        source += f",jobStatus:{ray_status}"
    elif deployment == "Complete":
        row = _WHEN_COMPLETE.get(ray_status, _UNKNOWN) if ray_status is not None else _UNKNOWN
        source += f",jobStatus:{ray_status}"
    elif deployment is None:
        row = _UNKNOWN
    else:
        row = _DEPLOYMENT_ONLY.get(deployment, _UNKNOWN)
    phase, sub_phase, terminal, default_reason = row

    # A user stop is the reason even when KubeRay left another one behind.
    reason = default_reason if default_reason == "Stopped" else text(status, "reason") or default_reason
    suspended = deployment in ("Suspending", "Suspended") or (deployment == "" and flag(job.spec, "suspend"))
    if kueue_waiting(job, suspended):
        phase, sub_phase, terminal = Phase.PENDING, SubPhase.QUEUED, False

    failed_attempts = count(status, "failed")
    final_failure = phase is Phase.FAILED and terminal
    return make_status(
        job,
        phase,
        sub_phase=sub_phase,
        terminal=terminal,
        reason=reason,
        message=text(status, "message"),
        source=("spec.suspend" if suspended else None) if deployment == "" else source,
        started_at=parse_time(status.get("startTime")),
        finished_at=parse_time(status.get("endTime")) if terminal else None,
        restart_count=failed_attempts - 1 if final_failure else failed_attempts,
        queue=queue_name(job),
    )
