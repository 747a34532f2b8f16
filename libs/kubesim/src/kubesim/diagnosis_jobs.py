"""Job status per family for the diagnosis scenarios: what each controller writes while its pods
wait, run and fail, and the reason and message it gives a failure (reference §3 of
``diagnosis.md``). Each write records the normalized state it means (§3.3 of
``job-status-and-feishu.md``), so the ``TruthLog`` stays right for jobs with pods.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Literal

from kubesim import manifests
from kubesim.kinds import BATCH_JOB, JOBSET
from kubesim.lifecycles import (
    CREATED,
    FAILED,
    FAILING,
    INITIALIZING,
    PENDING,
    QUEUED,
    RESTARTING,
    RUNNING,
    SCHEDULING,
)
from kubesim.objects import now
from kubesim.pods import ray_cluster_name
from kubesim.runs import JobRun, remove_condition, set_condition
from kubesim.truth import NormState

if TYPE_CHECKING:
    from kubesim.pods import PodSlot

__all__ = ["Failure", "JobDriver"]

Failure = Literal["replica", "backoff", "deadline", "policy", "unknown", "evicted"]


class JobDriver:
    """Writes one job's status (and its child objects') as its controller would."""

    def __init__(self, run: JobRun) -> None:
        self.run = run
        self.spec = run.spec
        self.family = run.spec.family
        self.kind = run.spec.kind
        self.conds: list[dict[str, Any]] = []
        self.failed_count = 0
        self.restarts = 0
        self.children: dict[str, str] = {}  # child name -> uid (for the pods' owner references)
        self.jconds: list[dict[str, Any]] = []  # a TrainJob's JobSet's conditions

    # ------------------------------------------------------------------ writes
    async def write(self, state: NormState) -> None:
        """Write ``run.status``; record ``state``. A write that changes nothing (the state moved
        because of the pods) is recorded at the store's current resourceVersion."""
        run = self.run
        await run.pause()
        before = run.obj.get("metadata", {}).get("resourceVersion")
        run.obj = run._guard(
            run.cluster.store.replace_status,
            self.spec,
            run.namespace,
            run.name,
            copy.deepcopy(run.status),
        )
        self.note(state, changed=run.obj["metadata"].get("resourceVersion") != before)

    def note(self, state: NormState, *, changed: bool = False) -> None:
        """Record ``state`` as caused by the newest write (a pod's, when the job did not change)."""
        obj = self.run.obj
        if not changed:
            obj = {
                **obj,
                "metadata": {
                    **obj["metadata"],
                    "resourceVersion": str(self.run.cluster.store.resource_version),
                },
            }
        self.run.truth.observe(self.run.cluster.name, obj, state)

    # ---------------------------------------------------------------- creation
    def manifest(
        self, *, restart_policy: str, queue: str | None, deadline: int | None, retries: int
    ) -> dict[str, Any]:
        run, family = self.run, self.family
        labels = {"kueue.x-k8s.io/queue-name": queue} if queue else None
        body = manifests.manifest(
            self.spec, run.name, run.namespace, labels=labels, restart_policy=restart_policy
        )
        specd = body["spec"]
        if family in ("kubeflow", "mpi-v2"):
            replicas = specd["mpiReplicaSpecs" if self.kind == "MPIJob" else _replica_key(specd)]
            if "Worker" in replicas:
                replicas["Worker"]["replicas"] = 4
            specd["runPolicy"]["backoffLimit"] = retries
            if deadline:
                specd["runPolicy"]["activeDeadlineSeconds"] = deadline
            if queue:
                specd["runPolicy"]["suspend"] = True
        elif family == "batch":
            specd["backoffLimit"] = retries
            specd["template"]["spec"]["restartPolicy"] = (
                "OnFailure" if restart_policy == "OnFailure" else "Never"
            )
            if deadline:
                specd["activeDeadlineSeconds"] = deadline
            if queue:
                specd["suspend"] = True
        elif family == "jobset":
            if retries:
                specd["failurePolicy"] = {"maxRestarts": retries}
            else:
                specd.pop("failurePolicy", None)
            if queue:
                specd["suspend"] = True
        elif family == "trainjob":
            if queue:
                specd["suspend"] = True
        elif family == "volcano":
            specd["maxRetry"] = max(retries, 1)
            specd["policies"] = [
                {"event": "PodEvicted", "action": "RestartJob"},
                {"event": "PodFailed", "action": "RestartJob"},
            ]
            specd["tasks"][0]["template"]["spec"]["restartPolicy"] = restart_policy
        elif family == "ray":
            specd["backoffLimit"] = retries
            specd["submitterPodTemplate"] = manifests.pod_template(
                "ray-job-submitter", "rayproject/ray:2.41.0"
            )
            if deadline:
                specd["activeDeadlineSeconds"] = deadline
            if queue:
                specd["suspend"] = True
        return body

    async def create(self, body: dict[str, Any], *, queued: bool) -> None:
        run = self.run
        # Kueue's webhook suspends the job at creation: with its queue-name label it is Queued from
        # the start (§2.7 of job-status-and-feishu.md), before any controller writes a status.
        first = PENDING if self.family == "jobset" else CREATED
        await run.create(body, QUEUED if queued else first)
        self._children()
        if queued:
            await self.queued()
        elif self.family in ("kubeflow", "mpi-v2"):
            set_condition(self.conds, "Created", "True", f"{self.kind}Created", f"{self._ref()} is created.")
            run.status = {"conditions": self.conds, "replicaStatuses": {rt: {} for rt in self._replicas()}}
            await self.write(CREATED)
        else:
            run.status = {}

    def _ref(self) -> str:
        return f"{self.kind} {self.run.namespace}/{self.run.name}"

    def _replicas(self) -> dict[str, int]:
        specd = self.run.obj.get("spec") or {}
        key = (
            "mpiReplicaSpecs"
            if self.kind == "MPIJob"
            else next((k for k in specd if k.endswith("ReplicaSpecs")), "")
        )
        return {rt: int(v.get("replicas", 1)) for rt, v in (specd.get(key) or {}).items()}

    def _child_job(
        self, name: str, labels: dict[str, str] | None = None, owner: dict[str, Any] | None = None
    ) -> None:
        run = self.run
        body = manifests.manifest(BATCH_JOB, name, run.namespace)
        body["metadata"]["ownerReferences"] = [manifests.owner_reference(owner or run.obj)]
        if labels:
            body["metadata"]["labels"].update(labels)
        run.child(BATCH_JOB, name, body)
        if (BATCH_JOB, name) in run.children:
            self.children[name] = str(
                run.cluster.store.get(BATCH_JOB, run.namespace, name)["metadata"]["uid"]
            )

    def _children(self) -> None:
        """The child objects the controller creates: MPI v2's launcher Job, TrainJob's JobSet, the
        JobSets' child Jobs, RayJob's submitter Job."""
        run = self.run
        if self.family == "mpi-v2":
            self._child_job(f"{run.name}-launcher", {"app": run.name})
        elif self.family == "trainjob":
            body = manifests.manifest(JOBSET, run.name, run.namespace)
            body["metadata"]["ownerReferences"] = [manifests.owner_reference(run.obj)]
            run.child(JOBSET, run.name, body)
            if (JOBSET, run.name) in run.children:
                self.children[f"jobset:{run.name}"] = str(
                    run.cluster.store.get(JOBSET, run.namespace, run.name)["metadata"]["uid"]
                )
        if self.family in ("jobset", "trainjob"):
            rjob = "node" if self.family == "trainjob" else "workers"
            owner = run.obj
            if self.family == "trainjob" and (JOBSET, run.name) in run.children:
                owner = run.cluster.store.get(JOBSET, run.namespace, run.name)  # the JobSet owns them
            for i in range(2):
                self._child_job(f"{run.name}-{rjob}-{i}", {"jobset.sigs.k8s.io/jobset-name": run.name}, owner)
        if self.family == "ray":
            self._child_job(
                run.name, {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": run.name}
            )

    def child_failed(self, name: str, reason: str, message: str) -> None:
        """A child batch Job's terminal failure (FailureTarget, then Failed)."""
        st = {
            "failed": 1,
            "startTime": now(),
            "conditions": [
                {
                    "type": "FailureTarget",
                    "status": "True",
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": now(),
                    "lastProbeTime": now(),
                },
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": now(),
                    "lastProbeTime": now(),
                },
            ],
        }
        self.run.child_status(BATCH_JOB, name, st)

    # ------------------------------------------------------------------ states
    async def queued(self) -> None:
        """Suspended by Kueue until admission: Pending/Queued (§2.7 of job-status-and-feishu.md)."""
        run, k = self.run, self.kind
        if self.family in ("kubeflow", "mpi-v2"):
            set_condition(self.conds, "Created", "True", f"{k}Created", f"{self._ref()} is created.")
            set_condition(self.conds, "Suspended", "True", f"{k}Suspended", f"{k} {run.name} is suspended.")
            run.status = {"conditions": self.conds, "replicaStatuses": {rt: {} for rt in self._replicas()}}
        elif self.family == "batch":
            set_condition(self.conds, "Suspended", "True", "JobSuspended", "Job suspended", metav1=True)
            run.status = {"conditions": self.conds, "active": 0, "ready": 0, "uncountedTerminatedPods": {}}
        elif self.family == "jobset":
            set_condition(
                self.conds, "Suspended", "True", "SuspendedJobs", "jobset is suspended", metav1=True
            )
            run.status = {
                "conditions": self.conds,
                "restarts": 0,
                "replicatedJobsStatus": [_rjob("workers", suspended=2)],
            }
        elif self.family == "trainjob":
            set_condition(self.conds, "Suspended", "True", "Suspended", "TrainJob is suspended", metav1=True)
            run.status = {"conditions": self.conds, "jobsStatus": [_rjob("node", suspended=2)]}
        elif self.family == "ray":
            run.status = {"jobDeploymentStatus": "Suspended"}
        await self.write(QUEUED)

    def _suspend_patch(self, value: bool) -> dict[str, Any]:
        return (
            {"runPolicy": {"suspend": value}} if self.family in ("kubeflow", "mpi-v2") else {"suspend": value}
        )

    async def resume(self) -> None:
        """Kueue admitted the workload and unsuspended the job; its controller says so."""
        run, k = self.run, self.kind
        await run.patch_spec(self._suspend_patch(False))
        if self.family in ("kubeflow", "mpi-v2"):
            set_condition(self.conds, "Suspended", "False", f"{k}Resumed", f"{k} {run.name} is resumed.")
            state = CREATED
        elif self.family == "batch":
            set_condition(self.conds, "Suspended", "False", "JobResumed", "Job resumed", metav1=True)
            run.status.update(startTime=now())
            state = CREATED
        elif self.family == "jobset":
            set_condition(self.conds, "Suspended", "False", "ResumeJobs", "jobset is resumed", metav1=True)
            run.status["replicatedJobsStatus"] = [_rjob("workers")]
            state = PENDING
        elif self.family == "trainjob":
            set_condition(self.conds, "Suspended", "False", "Resumed", "TrainJob is resumed", metav1=True)
            run.status["jobsStatus"] = [_rjob("node")]
            state = CREATED
        else:  # ray
            run.status = {"jobDeploymentStatus": ""}
            state = CREATED
        await self.write(state)

    async def suspend(self) -> None:
        """Kueue evicted the workload and suspended the job again: back in the queue (Queued)."""
        run, st, k = self.run, self.run.status, self.kind
        await run.patch_spec(self._suspend_patch(True))
        if self.family in ("kubeflow", "mpi-v2"):
            set_condition(self.conds, "Running", "False", f"{k}Suspended", f"{k} {run.name} is suspended.")
            set_condition(self.conds, "Suspended", "True", f"{k}Suspended", f"{k} {run.name} is suspended.")
            for rt in st.get("replicaStatuses", {}):
                st["replicaStatuses"][rt].pop("active", None)
        elif self.family == "batch":
            set_condition(self.conds, "Suspended", "True", "JobSuspended", "Job suspended", metav1=True)
            st.update(conditions=self.conds, active=0, ready=0)
        elif self.family == "jobset":
            set_condition(
                self.conds, "Suspended", "True", "SuspendedJobs", "jobset is suspended", metav1=True
            )
            st.update(conditions=self.conds, replicatedJobsStatus=[_rjob("workers", suspended=2)])
        elif self.family == "trainjob":
            set_condition(self.conds, "Suspended", "True", "Suspended", "TrainJob is suspended", metav1=True)
            st.update(conditions=self.conds, jobsStatus=[_rjob("node", suspended=2)])
        else:  # ray
            st.update(jobDeploymentStatus="Suspending")
            await self.write(QUEUED)
            for key in ("jobStatus", "dashboardURL", "rayClusterStatus", "jobId"):
                st.pop(key, None)
            st["jobDeploymentStatus"] = "Suspended"
        await self.write(QUEUED)

    async def progress(self, *, ready: int, running: int, pending: int, total: int) -> None:
        """The pods exist: ``running`` are running (``ready`` of them ready), ``pending`` are not."""
        run, st, k = self.run, self.run.status, self.kind
        family = self.family
        if family == "batch":
            st.update(active=running + pending, ready=ready, uncountedTerminatedPods={})
            st.setdefault("startTime", now())
            await self.write(RUNNING if ready > 0 else SCHEDULING)
        elif family in ("kubeflow", "mpi-v2"):
            replicas = self._replicas()
            all_up = pending == 0 and running >= total
            share = dict.fromkeys(replicas, 0)
            left = running
            for rt, n in replicas.items():
                share[rt] = min(n, left)
                left -= share[rt]
            for rt, n in share.items():
                st["replicaStatuses"][rt] = {"active": n} if n else {}
            st.setdefault("startTime", now())
            if all_up:
                remove_condition(self.conds, "Restarting")
                set_condition(self.conds, "Running", "True", f"{k}Running", f"{self._ref()} is running.")
            await self.write(RUNNING if all_up else SCHEDULING)
        elif family == "jobset":
            st.update(conditions=self.conds, restarts=self.restarts)
            st["replicatedJobsStatus"] = [
                _rjob("workers", active=running + pending, ready=ready, failed=self.failed_count)
            ]
            await self.write(RUNNING if ready > 0 else SCHEDULING)
        elif family == "trainjob":
            st["conditions"] = self.conds
            node = _rjob("node", active=running + pending, ready=ready, failed=self.failed_count)
            st["jobsStatus"] = [node]
            self._sync_jobset(node)
            await self.write(RUNNING if ready >= 2 else SCHEDULING)
        elif family == "volcano":
            phase = "Running" if running >= total else "Pending"
            self._volcano(phase, running=running, pending=pending)
            await self.write(RUNNING if phase == "Running" else SCHEDULING)
        elif family == "ray":
            cluster = _ray_cluster(run.obj)
            if running >= total:
                st.update(
                    jobDeploymentStatus="Running",
                    jobStatus="RUNNING",
                    rayClusterName=cluster,
                    jobId=f"{run.name}-{self.restarts}",
                    dashboardURL=f"{cluster}-head-svc.{run.namespace}.svc.cluster.local:8265",
                    rayClusterStatus={"state": "ready", "desiredWorkerReplicas": 1, "readyWorkerReplicas": 1},
                )
                st.setdefault("startTime", now())
                await self.write(RUNNING)
            else:
                st.update(jobDeploymentStatus="Initializing", rayClusterName=cluster, startTime=now())
                st.update(
                    rayClusterStatus={"state": "", "desiredWorkerReplicas": 1, "readyWorkerReplicas": 0}
                )
                await self.write(INITIALIZING)

    def _sync_jobset(self, node: dict[str, Any]) -> None:
        jst: dict[str, Any] = {"restarts": self.restarts, "replicatedJobsStatus": [dict(node)]}
        if self.jconds:
            jst["conditions"] = self.jconds
        self.run.child_status(JOBSET, self.run.name, jst)

    def _volcano(self, phase: str, **counts: int) -> None:
        st = self.run.status
        ts = now()
        st.setdefault("conditions", [])
        st.setdefault("retryCount", 0)
        st.setdefault("version", 0)
        st["minAvailable"] = 3
        st["state"] = {"phase": phase, "lastTransitionTime": ts}
        for key in ("pending", "running", "succeeded", "failed", "terminating"):
            st.pop(key, None)
        st.update({k: v for k, v in counts.items() if v})
        st["conditions"] = [c for c in st["conditions"] if c.get("status") != phase] + [
            {"status": phase, "lastTransitionTime": ts}
        ]
        st["version"] += 1

    async def restarting(self, role: str | None) -> None:
        """A failed attempt is being retried (the BackoffLimitExceeded path)."""
        run, st, k = self.run, self.run.status, self.kind
        self.failed_count += 1
        self.restarts += 1
        family = self.family
        if family == "batch":
            st.update(failed=self.failed_count, ready=0, active=0)
            await self.write(RESTARTING)
        elif family == "kubeflow":
            remove_condition(self.conds, "Running")
            set_condition(
                self.conds,
                "Restarting",
                "True",
                f"{k}Restarting",
                f"{k} {run.name} is restarting because 1 {role} replica(s) failed.",
            )
            await self.write(RESTARTING)
        elif family == "mpi-v2":
            launcher = st["replicaStatuses"].setdefault("Launcher", {})
            launcher["failed"] = launcher.get("failed", 0) + 1
            launcher.pop("active", None)
            await self.write(RESTARTING)
        elif family in ("jobset", "trainjob"):
            jconds = self.conds if family == "jobset" else self.jconds
            set_condition(
                jconds,
                "RestartingJobSet",
                "True",
                "DefaultFailurePolicy",
                "jobset is restarting",
                metav1=True,
            )
            if family == "jobset":
                st.update(restarts=self.restarts, restartsCountTowardsMax=self.restarts)
                st["replicatedJobsStatus"] = [_rjob("workers", failed=self.failed_count)]
                await self.write(RESTARTING)
            else:
                node = _rjob("node", failed=self.failed_count)
                st["jobsStatus"] = [node]
                self._sync_jobset(node)
                await self.write(RESTARTING)
            set_condition(
                jconds, "RestartingJobSet", "False", "JobsReady", "jobset restart completed", metav1=True
            )
        elif family == "volcano":
            st["retryCount"] = st.get("retryCount", 0) + 1
            self._volcano("Restarting", terminating=3)
            await self.write(RESTARTING)
        elif family == "ray":
            st.update(jobDeploymentStatus="Retrying", jobStatus="FAILED", failed=self.failed_count)
            await self.write(RESTARTING)
            for key in ("jobStatus", "dashboardURL", "rayClusterStatus"):
                st.pop(key, None)
            st["jobDeploymentStatus"] = ""
            await self.write(CREATED)

    async def fail(
        self, failure: Failure, slot: PodSlot | None, *, child: str | None = None
    ) -> tuple[str, str]:
        """The job's terminal failure as its controller reports it. Returns (reason, message)."""
        run, st, k, family = self.run, self.run.status, self.kind, self.family
        role = slot.role if slot else None
        reason, message = self.failure_text(failure, slot, child)
        if family == "batch":
            st.update(
                active=0, ready=0, failed=self.failed_count + (0 if failure in ("deadline", "unknown") else 1)
            )
            set_condition(self.conds, "FailureTarget", "True", reason, message, metav1=True)
            st["conditions"] = self.conds
            await self.write(FAILING)
            set_condition(self.conds, "Failed", "True", reason, message, metav1=True)
            await self.write(FAILED)
        elif family in ("kubeflow", "mpi-v2"):
            for rt in st.get("replicaStatuses", {}):
                st["replicaStatuses"][rt].pop("active", None)
            if role and failure not in ("deadline", "unknown"):
                rs = st["replicaStatuses"].setdefault("Launcher" if family == "mpi-v2" else role, {})
                rs["failed"] = rs.get("failed", 0) + 1
            remove_condition(self.conds, "Restarting")
            if any(c.get("type") == "Running" for c in self.conds):
                set_condition(self.conds, "Running", "False", f"{k}Running", f"{self._ref()} is running.")
            set_condition(self.conds, "Failed", "True", reason, message)
            st["conditions"] = self.conds
            st["completionTime"] = now()
            if family == "mpi-v2" and failure != "evicted":
                self.child_failed(f"{run.name}-launcher", *self._launcher_failure(failure))
            await self.write(FAILED)
        elif family in ("jobset", "trainjob"):
            if child:
                self.child_failed(child, *self._child_failure(failure, slot))
            rjob = "node" if family == "trainjob" else "workers"
            status = _rjob(rjob, failed=self.failed_count + 1)
            if family == "jobset":
                set_condition(self.conds, "Failed", "True", reason, message, metav1=True)
                st.update(conditions=self.conds, terminalState="Failed", replicatedJobsStatus=[status])
            else:
                set_condition(self.jconds, "Failed", "True", reason, message, metav1=True)
                jst = {"conditions": self.jconds, "terminalState": "Failed", "replicatedJobsStatus": [status]}
                self.run.child_status(JOBSET, run.name, jst)
                set_condition(self.conds, "Failed", "True", reason, message, metav1=True)
                st.update(conditions=self.conds, jobsStatus=[status])
            await self.write(FAILED)
        elif family == "volcano":
            if failure == "policy":
                self._volcano("Terminating", failed=1, terminating=2)
                await self.write(FAILING)
                self._volcano("Terminated", failed=1)
            else:
                st["retryCount"] = st.get("retryCount", 0) + (0 if failure == "unknown" else 1)
                if failure != "unknown":
                    self._volcano("Restarting", terminating=3)
                    await self.write(RESTARTING)
                self._volcano("Failed", failed=1)
            await self.write(FAILED)
        elif family == "ray":
            if failure in ("replica", "evicted"):
                st.update(jobDeploymentStatus="Running", jobStatus="FAILED")
                await self.write(FAILING)
            st.update(jobDeploymentStatus="Failed", endTime=now(), failed=self.failed_count + 1)
            if failure in ("replica", "evicted"):
                st["jobStatus"] = "FAILED"
            if reason:
                st.update(reason=reason, message=message)
            await self.write(FAILED)
        return reason, message

    def failure_text(self, failure: Failure, slot: PodSlot | None, child: str | None) -> tuple[str, str]:
        run, k, family = self.run, self.kind, self.family
        name, ns = run.name, run.namespace
        if failure == "unknown":
            return "", ""
        if family == "batch":
            if failure == "deadline":
                return "DeadlineExceeded", "Job was active longer than specified deadline"
            if failure == "policy" and slot:
                return (
                    "PodFailurePolicy",
                    f"Container {slot.container} for pod {ns}/{slot.name} failed with exit code 42 "
                    "matching FailJob rule at index 0",
                )
            return "BackoffLimitExceeded", "Job has reached the specified backoff limit"
        if family == "kubeflow":
            if failure == "deadline":
                return (
                    f"{k}Failed",
                    f"Job {name} has failed because it was active longer than specified deadline",
                )
            if failure == "backoff":
                return (
                    f"{k}Failed",
                    f"Job {name} has failed because it has reached the specified backoff limit",
                )
            if k == "MPIJob" and failure == "evicted":
                return "MPIJobEvicted", f"1/{self._replicas().get('Worker', 1)} workers are evicted"
            role = slot.role if slot else "Worker"
            return f"{k}Failed", f"{k} {name} is failed because 1 {role} replica(s) failed."
        if family == "mpi-v2":
            if failure == "deadline":
                return "DeadlineExceeded", "Job was active longer than specified deadline"
            if failure == "evicted":
                workers = self._replicas().get("Worker", 1)
                return "MPIJobEvicted", f"1/{workers} workers are evicted"
            return "BackoffLimitExceeded/", "Job has reached the specified backoff limit: "
        if family in ("jobset", "trainjob"):
            if family == "trainjob" and failure == "deadline":
                return "DeadlineExceeded", "TrainJob exceeded its active deadline"
            if failure == "backoff":
                return (
                    "ReachedMaxRestarts",
                    f"jobset failed due to reaching max number of restarts (first failed job: {child})",
                )
            if failure == "policy":
                return (
                    "FailJobSetFailurePolicyAction",
                    f"applying FailJobSet failure policy action (first failed job: {child})",
                )
            return "FailedJobs", f"jobset failed due to one or more job failures (first failed job: {child})"
        if family == "volcano":
            return "", ""  # Volcano's state.reason is never set (reference §3.6)
        # ray
        if failure == "deadline":
            started = run.status.get("startTime", now())
            return (
                "DeadlineExceeded",
                f"The RayJob has passed the activeDeadlineSeconds. StartTime: {started}. "
                "ActiveDeadlineSeconds: 600",
            )
        if failure == "backoff":
            return (
                "SubmissionFailed",
                "Job submission has failed. Reason: BackoffLimitExceeded. "
                "Message: Job has reached the specified backoff limit",
            )
        return "AppFailed", "Job entrypoint command failed with exit code 1"

    def _launcher_failure(self, failure: Failure) -> tuple[str, str]:
        if failure == "deadline":
            return "DeadlineExceeded", "Job was active longer than specified deadline"
        return "BackoffLimitExceeded", "Job has reached the specified backoff limit"

    def _child_failure(self, failure: Failure, slot: PodSlot | None) -> tuple[str, str]:
        if failure == "deadline":
            return "DeadlineExceeded", "Job was active longer than specified deadline"
        if failure == "policy" and slot:
            return (
                "PodFailurePolicy",
                f"Container {slot.container} for pod {self.run.namespace}/{slot.name} "
                "failed with exit code 42 "
                "matching FailJob rule at index 0",
            )
        return "BackoffLimitExceeded", "Job has reached the specified backoff limit"


def _rjob(name: str, **counts: int) -> dict[str, Any]:
    base = {"name": name, "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
    base.update(counts)
    return base


def _replica_key(specd: dict[str, Any]) -> str:
    return str(next(k for k in specd if k.endswith("ReplicaSpecs")))


def _ray_cluster(job: dict[str, Any]) -> str:
    return ray_cluster_name(job)
