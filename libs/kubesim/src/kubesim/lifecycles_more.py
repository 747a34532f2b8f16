"""Lifecycles of TrainJob, JobSet, Volcano Job and RayJob (see ``lifecycles.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kubesim import manifests
from kubesim.kinds import JOBSET
from kubesim.lifecycles import (
    ABORTING,
    CREATED,
    FAILED,
    FAILING,
    INITIALIZING,
    PENDING,
    QUEUED,
    RESTARTING,
    RUNNING,
    SCHEDULING,
    SUCCEEDED,
    SUCCEEDING,
    SUSPENDED,
    finish,
)
from kubesim.objects import now
from kubesim.runs import JobRun, Options, set_condition

__all__ = ["LIFECYCLES"]


def _rjob(name: str, **counts: int) -> dict[str, Any]:
    base = {"name": name, "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
    base.update(counts)
    return base


# ----------------------------------------------------------------- TrainJob
async def trainjob(run: JobRun, opts: Options) -> None:
    await run.create(manifests.manifest(run.spec, run.name, run.namespace), CREATED)
    # The trainer controller builds a JobSet of the same name, owned by the TrainJob.
    jbody = manifests.manifest(JOBSET, run.name, run.namespace)
    jbody["metadata"]["ownerReferences"] = [manifests.owner_reference(run.obj)]
    run.child(JOBSET, run.name, jbody)
    has_jobset = run.has_child(JOBSET)
    jconds: list[dict[str, Any]] = []
    jst: dict[str, Any] = {"conditions": jconds, "restarts": 0, "replicatedJobsStatus": []}
    conds: list[dict[str, Any]] = []
    init, node = _rjob("dataset-initializer", active=1), _rjob("node")
    st = run.status = {"conditions": conds, "jobsStatus": [init, node]}

    def sync_jobset() -> None:
        jst["replicatedJobsStatus"] = [dict(init), dict(node)]
        run.child_status(JOBSET, run.name, jst)

    sync_jobset()
    await run.write_status(INITIALIZING)
    init.update(active=0, succeeded=1)
    node.update(active=1, ready=0)
    sync_jobset()
    await run.write_status(SCHEDULING)
    node.update(ready=1)
    sync_jobset()
    await run.write_status(RUNNING)
    if opts.delete_while_running:
        return await run.delete()
    for _ in range(opts.restarts if has_jobset else 0):
        jst["restarts"] += 1
        set_condition(
            jconds, "RestartingJobSet", "True", "DefaultFailurePolicy", "jobset is restarting", metav1=True
        )
        node.update(active=0, ready=0)
        sync_jobset()
        await run.write_status(RESTARTING)
        set_condition(
            jconds, "RestartingJobSet", "False", "JobsReady", "jobset restart completed", metav1=True
        )
        node.update(active=1, ready=1)
        sync_jobset()
        await run.write_status(RUNNING)
    if opts.suspend:
        await run.patch_spec({"suspend": True})
        set_condition(conds, "Suspended", "True", "Suspended", "TrainJob is suspended", metav1=True)
        node.update(active=0, ready=0, suspended=1)
        sync_jobset()
        await run.write_status(SUSPENDED)
        await run.patch_spec({"suspend": False})
        set_condition(conds, "Suspended", "False", "Resumed", "TrainJob is resumed", metav1=True)
        node.update(active=1, ready=0, suspended=0)
        sync_jobset()
        await run.write_status(SCHEDULING)
        node.update(ready=1)
        sync_jobset()
        await run.write_status(RUNNING)
    node.update(active=0, ready=0)
    if opts.outcome == "succeeded":
        node.update(succeeded=1)
        set_condition(
            jconds, "Completed", "True", "AllJobsCompleted", "jobset completed successfully", metav1=True
        )
        jst["terminalState"] = "Completed"
        sync_jobset()
        set_condition(
            conds, "Complete", "True", "AllJobsCompleted", "jobset completed successfully", metav1=True
        )
        await run.write_status(SUCCEEDED)
    else:
        node.update(failed=1)
        set_condition(
            jconds,
            "Failed",
            "True",
            "FailedJobs",
            "jobset failed due to one or more job failures",
            metav1=True,
        )
        jst["terminalState"] = "Failed"
        sync_jobset()
        set_condition(
            conds,
            "Failed",
            "True",
            "FailedJobs",
            "jobset failed due to one or more job failures",
            metav1=True,
        )
        await run.write_status(FAILED)
    _ = st
    await finish(run, opts)


# ------------------------------------------------------------------ JobSet
async def jobset(run: JobRun, opts: Options) -> None:
    await run.create(manifests.manifest(run.spec, run.name, run.namespace), PENDING)
    conds: list[dict[str, Any]] = []
    workers = _rjob("workers", active=2)
    st = run.status = {
        "conditions": conds,
        "restarts": 0,
        "restartsCountTowardsMax": 0,
        "replicatedJobsStatus": [workers],
    }
    await run.write_status(SCHEDULING)
    workers.update(ready=2)
    await run.write_status(RUNNING)
    if opts.delete_while_running:
        return await run.delete()
    for _ in range(opts.restarts):
        st["restarts"] += 1
        st["restartsCountTowardsMax"] += 1
        set_condition(
            conds, "RestartingJobSet", "True", "DefaultFailurePolicy", "jobset is restarting", metav1=True
        )
        workers.update(active=0, ready=0, failed=workers["failed"] + 1)
        await run.write_status(RESTARTING)
        set_condition(
            conds, "RestartingJobSet", "False", "JobsReady", "jobset restart completed", metav1=True
        )
        workers.update(active=2, ready=2)
        await run.write_status(RUNNING)
    if opts.suspend:
        await run.patch_spec({"suspend": True})
        set_condition(conds, "Suspended", "True", "SuspendedJobs", "jobset is suspended", metav1=True)
        workers.update(active=0, ready=0, suspended=2)
        await run.write_status(SUSPENDED)
        await run.patch_spec({"suspend": False})
        set_condition(conds, "Suspended", "False", "ResumeJobs", "jobset is resumed", metav1=True)
        workers.update(active=2, ready=0, suspended=0)
        await run.write_status(SCHEDULING)
        workers.update(ready=2)
        await run.write_status(RUNNING)
    workers.update(active=0, ready=0)
    if opts.outcome == "succeeded":
        workers.update(succeeded=2)
        set_condition(
            conds, "Completed", "True", "AllJobsCompleted", "jobset completed successfully", metav1=True
        )
        st["terminalState"] = "Completed"
        await run.write_status(SUCCEEDED)
    else:
        workers.update(failed=workers["failed"] + 1)
        set_condition(
            conds,
            "Failed",
            "True",
            "FailedJobs",
            "jobset failed due to one or more job failures",
            metav1=True,
        )
        st["terminalState"] = "Failed"
        await run.write_status(FAILED)
    await finish(run, opts)


# ----------------------------------------------------------------- Volcano
async def volcano(run: JobRun, opts: Options) -> None:
    await run.create(manifests.manifest(run.spec, run.name, run.namespace), CREATED)
    conds: list[dict[str, Any]] = []
    st = run.status = {"state": {}, "minAvailable": 3, "retryCount": 0, "version": 0, "conditions": conds}

    async def phase(name: str, state: Any, **counts: int) -> None:
        ts = now()
        st["state"] = {"phase": name, "lastTransitionTime": ts}
        for key in ("pending", "running", "succeeded", "failed", "terminating"):
            st.pop(key, None)
        st.update({k: v for k, v in counts.items() if v})
        conds[:] = [c for c in conds if c.get("status") != name]
        conds.append({"status": name, "lastTransitionTime": ts})
        st["version"] += 1
        await run.write_status(state)

    async def queued_then_scheduling() -> None:
        # The controller creates pods only once the PodGroup leaves Pending (Inqueue): first no
        # pods (Queued), then pending pods (Scheduling), as reference §2.5 describes.
        await phase("Pending", QUEUED)
        await phase("Pending", SCHEDULING, pending=3)

    await queued_then_scheduling()
    await phase("Running", RUNNING, running=3)
    if opts.delete_while_running:
        return await run.delete()
    for _ in range(opts.restarts):
        st["retryCount"] += 1
        await phase("Restarting", RESTARTING, terminating=3)
        await queued_then_scheduling()
        await phase("Running", RUNNING, running=3)
    if opts.suspend:
        await phase("Aborting", ABORTING, terminating=3)
        await phase("Aborted", SUSPENDED)
        await phase("Restarting", RESTARTING)
        await queued_then_scheduling()
        await phase("Running", RUNNING, running=3)
    if opts.outcome == "succeeded":
        await phase("Completing", SUCCEEDING, succeeded=3, terminating=0)
        await phase("Completed", SUCCEEDED, succeeded=3)
    else:
        await phase("Terminating", FAILING, failed=1, terminating=2)
        await phase("Terminated", FAILED, failed=1)
    await finish(run, opts)


# ------------------------------------------------------------------ RayJob
async def ray(run: JobRun, opts: Options) -> None:
    await run.create(manifests.manifest(run.spec, run.name, run.namespace), CREATED)
    st: dict[str, Any] = {}
    run.status = st

    async def write(deploy: str, job: str, state: Any, **extra: Any) -> None:
        st.update(jobDeploymentStatus=deploy, jobStatus=job, **extra)
        if not job:
            st.pop("jobStatus")
        await run.write_status(state)

    async def start(*, pending: bool = True) -> None:
        cluster_name = f"{run.name}-raycluster-{len(st.get('jobId', '')) % 97:02d}x"
        await write(
            "Initializing",
            "",
            INITIALIZING,
            startTime=now(),
            rayClusterName=cluster_name,
            jobId=f"{run.name}-{st.get('failed', 0)}",
            observedGeneration=run.obj["metadata"]["generation"],
        )
        if pending:
            await write(
                "Running",
                "PENDING",
                SCHEDULING,
                dashboardURL=f"{cluster_name}-head-svc:8265",
                rayClusterStatus={"state": "ready", "desiredWorkerReplicas": 1, "readyWorkerReplicas": 1},
            )
        await write("Running", "RUNNING", RUNNING, rayJobInfo={"startTime": now()})

    await start()
    if opts.delete_while_running:
        return await run.delete()
    for _ in range(opts.restarts):
        await write("Retrying", "FAILED", RESTARTING, failed=st.get("failed", 0) + 1)
        for key in ("rayJobInfo", "dashboardURL", "rayClusterStatus"):
            st.pop(key, None)
        await write("", "", CREATED)
        await start()
    if opts.suspend:
        await run.patch_spec({"suspend": True})
        await write("Suspending", "RUNNING", SUSPENDED)
        await write("Suspended", "", SUSPENDED)
        await run.patch_spec({"suspend": False})
        await write("", "", CREATED)
        await start(pending=False)
    if opts.outcome == "succeeded":
        await write("Running", "SUCCEEDED", SUCCEEDING)
        await write("Complete", "SUCCEEDED", SUCCEEDED, endTime=now(), succeeded=1)
    else:
        await write("Running", "FAILED", FAILING)
        await write(
            "Failed",
            "FAILED",
            FAILED,
            endTime=now(),
            failed=st.get("failed", 0) + 1,
            reason="AppFailed",
            message="Ray job failed: application exited with code 1",
        )
    await finish(run, opts)


LIFECYCLES: dict[str, Callable[[JobRun, Options], Awaitable[None]]] = {
    "trainjob": trainjob,
    "jobset": jobset,
    "volcano": volcano,
    "ray": ray,
}
