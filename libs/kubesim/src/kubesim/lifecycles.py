"""Scripted lifecycles per status family, writing status the way each controller does.

Each step states the normalized state it intends (§3.3 of job-status-and-feishu.md); the
``JobRun`` records it in the ground truth when it differs from the previous one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kubesim import manifests
from kubesim.kinds import BATCH_JOB
from kubesim.objects import now
from kubesim.runs import JobRun, Options, remove_condition, set_condition
from kubesim.truth import NormState

__all__ = ["LIFECYCLES", "finish"]

CREATED = NormState("Pending", "Created")
PENDING = NormState("Pending")
SCHEDULING = NormState("Pending", "Scheduling")
INITIALIZING = NormState("Pending", "Initializing")
QUEUED = NormState("Pending", "Queued")
RUNNING = NormState("Running")
RESTARTING = NormState("Restarting")
SUSPENDED = NormState("Suspended")
ABORTING = NormState("Suspended", "Aborting")
SUCCEEDED = NormState("Succeeded", terminal=True)
FAILED = NormState("Failed", terminal=True)
SUCCEEDING = NormState("Succeeded", "Finishing")
FAILING = NormState("Failed", "Finishing")


async def finish(run: JobRun, opts: Options) -> None:
    if opts.delete:
        await run.delete()


# ------------------------------------------------------------ Kubeflow v1
async def kubeflow(run: JobRun, opts: Options) -> None:
    spec, k = run.spec, run.spec.kind
    exit_code = k in ("MPIJob", "XGBoostJob") and opts.restarts > 0
    body = manifests.manifest(
        spec, run.name, run.namespace, restart_policy="ExitCode" if exit_code else "OnFailure"
    )
    await run.create(body, CREATED)
    replicas = {rt: int(v["replicas"]) for rt, v in body["spec"][_replica_key(body)].items()}
    conds: list[dict[str, Any]] = []
    st = run.status = {"conditions": conds, "replicaStatuses": {rt: {} for rt in replicas}}
    msg = f"{k} {run.namespace}/{run.name}"
    set_condition(conds, "Created", "True", f"{k}Created", f"{msg} is created.")
    await run.write_status(CREATED)

    async def running() -> None:
        remove_condition(conds, "Restarting")
        set_condition(conds, "Running", "True", f"{k}Running", f"{msg} is running.")
        for rt, n in replicas.items():
            st["replicaStatuses"][rt] = {**st["replicaStatuses"][rt], "active": n}
        await run.write_status(RUNNING)

    st["startTime"] = now()
    await running()
    if opts.delete_while_running:
        return await run.delete()
    worker = "Worker" if "Worker" in replicas else next(iter(replicas))
    for _ in range(opts.restarts):
        remove_condition(conds, "Running")
        set_condition(
            conds,
            "Restarting",
            "True",
            f"{k}Restarting",
            f"{k} {run.name} is restarting because 1 {worker} replica(s) failed.",
        )
        rs = st["replicaStatuses"][worker]
        rs["failed"] = rs.get("failed", 0) + 1
        rs["active"] = replicas[worker] - 1
        await run.write_status(RESTARTING)
        await running()
    if opts.suspend:
        await run.patch_spec({"runPolicy": {"suspend": True}})
        set_condition(conds, "Running", "False", f"{k}Suspended", f"{k} {run.name} is suspended.")
        set_condition(conds, "Suspended", "True", f"{k}Suspended", f"{k} {run.name} is suspended.")
        for rt in replicas:
            st["replicaStatuses"][rt].pop("active", None)
        await run.write_status(SUSPENDED)
        await run.patch_spec({"runPolicy": {"suspend": False}})
        set_condition(conds, "Suspended", "False", f"{k}Resumed", f"{k} {run.name} is resumed.")
        st["startTime"] = now()
        await run.write_status(CREATED)
        await running()
    set_condition(conds, "Running", "False", f"{k}Running", f"{msg} is running.")
    lead = next(iter(replicas))
    for rt in replicas:
        st["replicaStatuses"][rt].pop("active", None)
    st["completionTime"] = now()
    if opts.outcome == "succeeded":
        st["replicaStatuses"][lead]["succeeded"] = replicas[lead]
        set_condition(conds, "Succeeded", "True", f"{k}Succeeded", f"{msg} successfully completed.")
        await run.write_status(SUCCEEDED)
    else:
        rs = st["replicaStatuses"][lead]
        rs["failed"] = rs.get("failed", 0) + 1
        set_condition(
            conds,
            "Failed",
            "True",
            f"{k}Failed",
            f"Job {run.name} has failed because it has reached the specified backoff limit",
        )
        await run.write_status(FAILED)
    await finish(run, opts)


def _replica_key(body: dict[str, Any]) -> str:
    return str(next(key for key in body["spec"] if key.endswith("ReplicaSpecs")))


# ----------------------------------------------------------- MPIJob v2beta1
async def mpi_v2(run: JobRun, opts: Options) -> None:
    body = manifests.manifest(run.spec, run.name, run.namespace)
    await run.create(body, CREATED)
    workers = int(body["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"])
    conds: list[dict[str, Any]] = []
    launcher: dict[str, Any] = {}
    st = run.status = {"conditions": conds, "replicaStatuses": {"Launcher": launcher, "Worker": {}}}
    msg = f"MPIJob {run.namespace}/{run.name}"
    set_condition(conds, "Created", "True", "MPIJobCreated", f"{msg} is created.")
    await run.write_status(CREATED)
    lname = f"{run.name}-launcher"
    lbody = manifests.manifest(BATCH_JOB, lname, run.namespace)
    lbody["metadata"]["ownerReferences"] = [manifests.owner_reference(run.obj)]
    run.child(BATCH_JOB, lname, lbody)
    lstatus: dict[str, Any] = {"startTime": now(), "active": 1, "ready": 1}

    async def running(state: Any = RUNNING) -> None:
        set_condition(conds, "Running", "True", "MPIJobRunning", f"{msg} is running.")
        launcher["active"] = 1
        st["replicaStatuses"]["Worker"] = {"active": workers}
        run.child_status(BATCH_JOB, lname, lstatus)
        await run.write_status(state)

    st["startTime"] = now()
    await running()
    if opts.delete_while_running:
        return await run.delete()
    for _ in range(opts.restarts):
        launcher["failed"] = launcher.get("failed", 0) + 1
        launcher.pop("active", None)
        lstatus.update(failed=launcher["failed"], ready=0)
        run.child_status(BATCH_JOB, lname, lstatus)
        await run.write_status(RESTARTING)
        lstatus["ready"] = 1
        await running()
    if opts.suspend:
        await run.patch_spec({"runPolicy": {"suspend": True}})
        set_condition(conds, "Running", "False", "MPIJobSuspended", f"{msg} is suspended.")
        set_condition(conds, "Suspended", "True", "MPIJobSuspended", f"{msg} is suspended.")
        launcher.pop("active", None)
        st["replicaStatuses"]["Worker"] = {}
        await run.write_status(SUSPENDED)
        await run.patch_spec({"runPolicy": {"suspend": False}})
        set_condition(conds, "Suspended", "False", "MPIJobResumed", f"{msg} is resumed.")
        st["startTime"] = now()
        await run.write_status(CREATED)
        await running()
    set_condition(conds, "Running", "False", "MPIJobRunning", f"{msg} is running.")
    launcher.pop("active", None)
    st["replicaStatuses"]["Worker"] = {}
    st["completionTime"] = lstatus["completionTime"] = now()
    lstatus.update(active=0, ready=0)
    if opts.outcome == "succeeded":
        launcher["succeeded"] = 1
        set_condition(conds, "Succeeded", "True", "MPIJobSucceeded", f"{msg} successfully completed.")
        lstatus["succeeded"] = 1
        lstatus["conditions"] = [
            {
                "type": "Complete",
                "status": "True",
                "reason": "CompletionsReached",
                "lastTransitionTime": now(),
                "lastProbeTime": now(),
            }
        ]
        run.child_status(BATCH_JOB, lname, lstatus)
        await run.write_status(SUCCEEDED)
    else:
        launcher["failed"] = launcher.get("failed", 0) + 1
        del lstatus["completionTime"]
        lstatus["conditions"] = [
            {
                "type": "Failed",
                "status": "True",
                "reason": "BackoffLimitExceeded",
                "lastTransitionTime": now(),
                "lastProbeTime": now(),
            }
        ]
        run.child_status(BATCH_JOB, lname, lstatus)
        set_condition(
            conds,
            "Failed",
            "True",
            "BackoffLimitExceeded/Error",
            "Job has reached the specified backoff limit: launcher pod failed with exit code 1",
        )
        await run.write_status(FAILED)
    await finish(run, opts)


# ---------------------------------------------------------------- batch/v1
async def batch_job(run: JobRun, opts: Options) -> None:
    await run.create(manifests.manifest(run.spec, run.name, run.namespace), CREATED)
    st = run.status = {"startTime": now(), "active": 1, "ready": 0, "uncountedTerminatedPods": {}}
    conds: list[dict[str, Any]] = []
    await run.write_status(SCHEDULING)
    st["ready"] = 1
    await run.write_status(RUNNING)
    if opts.delete_while_running:
        return await run.delete()
    for _ in range(opts.restarts):
        st["failed"] = st.get("failed", 0) + 1
        st["ready"] = 0
        await run.write_status(RESTARTING)
        st["ready"] = 1
        await run.write_status(RUNNING)
    if opts.suspend:
        await run.patch_spec({"suspend": True})
        set_condition(conds, "Suspended", "True", "JobSuspended", "Job suspended", metav1=True)
        st.update(conditions=conds, active=0, ready=0)
        await run.write_status(SUSPENDED)
        await run.patch_spec({"suspend": False})
        set_condition(conds, "Suspended", "False", "JobResumed", "Job resumed", metav1=True)
        st.update(startTime=now(), active=1, ready=0)
        await run.write_status(SCHEDULING)
        st["ready"] = 1
        await run.write_status(RUNNING)
    st["conditions"] = conds
    st.update(active=0, ready=0)
    if opts.outcome == "succeeded":
        st["succeeded"] = 1
        set_condition(
            conds,
            "SuccessCriteriaMet",
            "True",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            metav1=True,
        )
        await run.write_status(SUCCEEDING)
        set_condition(
            conds,
            "Complete",
            "True",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            metav1=True,
        )
        st["completionTime"] = now()
        await run.write_status(SUCCEEDED)
    else:
        st["failed"] = st.get("failed", 0) + 1
        set_condition(
            conds,
            "FailureTarget",
            "True",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
            metav1=True,
        )
        await run.write_status(FAILING)
        set_condition(
            conds,
            "Failed",
            "True",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
            metav1=True,
        )
        await run.write_status(FAILED)
    await finish(run, opts)


LIFECYCLES: dict[str, Callable[[JobRun, Options], Awaitable[None]]] = {
    "kubeflow": kubeflow,
    "mpi-v2": mpi_v2,
    "batch": batch_job,
}
