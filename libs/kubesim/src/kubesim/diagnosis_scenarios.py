"""Diagnosis scenarios: one job driven into one category, with its pods, Events, logs, Workload and
PodGroup consistent with its status, and the :class:`DiagnosisTruth` a correct diagnosis gives.

    truth = await driver.run_diagnosis("PyTorchJob", "OOMKilled")
    truth.pod, truth.exit_code  # "pytorchjob-1-0001-worker-3", 137

The job's normalized transitions go to the driver's ``TruthLog`` like any lifecycle's.
"""

from __future__ import annotations

import copy
import random
from typing import TYPE_CHECKING, Any

from kubesim import kueue, podgroups
from kubesim.diagnosis import BLAME, CATEGORIES, DiagnosisTruth, NotApplicable, applies
from kubesim.diagnosis_jobs import Failure, JobDriver
from kubesim.events import Recorder
from kubesim.kinds import (
    BATCH_JOB,
    CLUSTER_QUEUE,
    COSCHEDULING_PODGROUP,
    LOCAL_QUEUE,
    POD,
    VOLCANO_PODGROUP,
    WORKLOAD,
    KindSpec,
)
from kubesim.objects import now
from kubesim.pods import NODES, PodSlot, PodState, fake_uid, layout, ray_cluster_name, unschedulable_message
from kubesim.runs import JobRun

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

VARIANTS = frozenset({("Preempted", "kueue"), ("Unschedulable", "after-queue")})
"""Scenarios beyond the plain one per category: Kueue's preemption of a running job, and a queued
job that, once admitted, cannot be scheduled (its diagnosis changes while it stays Pending)."""

__all__ = [
    "BAD_IMAGE",
    "CLUSTER_QUEUE_NAME",
    "LOCAL_QUEUE_NAME",
    "SECRET",
    "VARIANTS",
    "DiagnosisRun",
    "cases",
]

BAD_IMAGE = "registry.example.com/ml/trainer:v2.3.1-does-not-exist"
SECRET = "hf_kubesimFAKEa1b2c3d4e5f6g7h8i9j0k"
LOCAL_QUEUE_NAME = "user-queue"
CLUSTER_QUEUE_NAME = "team-gpu"
RESOURCE = "nvidia.com/gpu"
_QUOTA = (
    "exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=8, "
    "limited: requests.nvidia.com/gpu=8"
)
_KUEUE_PENDING = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor a100, "
    "4 more needed"
)
_TRAIN_LINES = [
    "INFO torch.distributed: rank initialised, world_size=5",
    "loading dataset shards from /mnt/data (128 shards)",
    "epoch 1/10 step 100 loss=2.3512 lr=3.0e-04",
    "epoch 1/10 step 200 loss=1.9874 lr=3.0e-04",
    "epoch 2/10 step 300 loss=1.5521 lr=3.0e-04",
]
_ERROR_LINES = [
    f"Using HF_TOKEN={SECRET} from the environment",
    "Traceback (most recent call last):",
    '  File "/opt/train/train.py", line 212, in <module>',
    "    main(args)",
    "ValueError: expected input batch_size (256) to match target batch_size (128)",
]


def cases(cluster: Cluster) -> list[tuple[KindSpec, str]]:
    """Every (job kind, category) a diagnosis scenario exists for on ``cluster``."""
    served = {k.resource for k in cluster.served}
    flags = {
        "kueue": WORKLOAD.resource in served,
        "volcano": VOLCANO_PODGROUP.resource in served,
        "coscheduling": COSCHEDULING_PODGROUP.resource in served,
    }
    return [(k, c) for k in cluster.kinds for c in CATEGORIES if applies(c, k, **flags)]


class DiagnosisRun:
    """One diagnosis scenario. Use ``ScenarioDriver.run_diagnosis``."""

    def __init__(
        self, run: JobRun, category: str, rand: random.Random, recorder: Recorder, variant: str | None = None
    ) -> None:
        if category not in CATEGORIES:
            raise KeyError(f"unknown category {category!r}")
        if variant is not None and (category, variant) not in VARIANTS:
            raise KeyError(f"unknown variant {variant!r} of {category}")
        self.variant = variant
        self.earlier: list[DiagnosisTruth] = []  # diagnoses the job had before (a variant's first step)
        self.run = run
        self.cluster = run.cluster
        self.store = run.cluster.store
        self.spec = run.spec
        self.family = run.spec.family
        self.category = category
        self.rand = rand
        self.recorder = recorder
        self.job = JobDriver(run)
        self.pods: list[PodState] = []
        self.warnings: list[str] = []
        self.gang = self._gang()
        self._slots: list[PodSlot] | None = None
        served = {k.resource for k in self.cluster.served}
        ok = applies(
            category,
            self.spec,
            kueue=WORKLOAD.resource in served,
            volcano=VOLCANO_PODGROUP.resource in served,
            coscheduling=COSCHEDULING_PODGROUP.resource in served,
        )
        if ok and variant is not None:
            ok = WORKLOAD.resource in served and applies("QueueWaiting", self.spec)
        if not ok:
            raise NotApplicable(f"{category} does not apply to {self.spec} on cluster {self.cluster.name}")

    def _gang(self) -> str | None:
        if self.category != "GangWaiting":
            return None
        served = {k.resource for k in self.cluster.served}
        if self.family not in ("volcano", "ray") and COSCHEDULING_PODGROUP.resource in served:
            return "coscheduling"
        return "volcano" if VOLCANO_PODGROUP.resource in served else None

    # --------------------------------------------------------------- helpers
    def event(self, regarding: dict[str, Any], type_: str, reason: str, message: str, **kw: Any) -> None:
        self.recorder.record(regarding, type_, reason, message, **kw)
        if type_ == "Warning" and reason not in self.warnings:
            self.warnings.append(reason)

    def _kubelet(self, pod: PodState, type_: str, reason: str, message: str) -> None:
        self.event(
            pod.obj,
            type_,
            reason,
            message,
            component="kubelet",
            host=pod.node,
            field_path=f"spec.containers{{{pod.slot.container}}}",
        )

    def _abnormal(self, pod: PodState, reason: str, message: str) -> None:
        """training-operator's ``RecordAbnormalPods``: a Warning on the job for each active pod that
        waits or has no container yet (reference §3.2), from ``<kind>-controller``."""
        if self.family != "kubeflow":
            return
        self.event(
            run_obj(self), "Warning", reason, message, component=f"{self.spec.kind.lower()}-controller"
        )

    @staticmethod
    def _waiting_text(pod: PodState, message: str) -> str:
        return f"Error pod {pod.name} container {pod.slot.container} waiting message: {message}"

    def slots(self) -> list[PodSlot]:
        """The job's pods (computed once: names with random suffixes stay put)."""
        if self._slots is None:
            self._slots = layout(
                self.spec, self.run.obj, self.rand, gang=self.gang, child_uids=self.job.children
            )
        return self._slots

    def respawn(self, old: PodState) -> PodState:
        """The controller replaces a failed pod: same name for pods named by index (Kubeflow,
        Volcano: the old one is deleted first), a new generated name for a Job's pods."""
        slot = copy.copy(old.slot)
        if self.family in ("kubeflow", "volcano") or (self.family == "mpi-v2" and slot.role == "Worker"):
            self.store.delete(POD, old.namespace, old.name, ignore_finalizers=True)
            self.pods.remove(old)
        else:
            base = slot.name.rsplit("-", 1)[0]
            slot.name = f"{base}-{''.join(self.rand.choice('bcdfghjklmnpqrstvwxz2456789') for _ in range(5))}"
        return self.run_pod(slot)

    def cluster_slots(self) -> list[PodSlot]:
        """The pods that must run before the job runs (not a RayJob's submitter)."""
        return [s for s in self.slots() if s.role != "submitter"]

    def target(self, slots: list[PodSlot]) -> PodSlot:
        if self.family == "ray":
            role = "submitter" if self.category in ("ExitCode", "BackoffLimitExceeded") else "small-group"
            return next(s for s in self.slots() if s.role == role)
        if self.family == "mpi-v2" and self.category == "BackoffLimitExceeded":
            return next(s for s in slots if s.role == "Launcher")
        workers = [s for s in slots if s.role == "Worker"]
        return (workers or slots)[-1]

    def start(self, slot: PodSlot) -> PodState:
        pod = PodState(self.store, slot, self.run.namespace, self.rand)
        self.pods.append(pod)
        return pod

    def bind(self, pod: PodState) -> None:
        node = NODES[len(self.pods) % len(NODES)]
        pod.bind(node)
        self.event(
            pod.obj,
            "Normal",
            "Scheduled",
            f"Successfully assigned {self.run.namespace}/{pod.name} to {node}",
            component=pod.slot.scheduler,
            style="events",
            action="Binding",
        )

    def run_pod(self, slot: PodSlot, lines: list[str] | None = None) -> PodState:
        pod = self.start(slot)
        self.bind(pod)
        pod.running()
        self.cluster.logs.write(pod.container_id, lines or _TRAIN_LINES[:3])
        return pod

    async def progress(self, total: int) -> None:
        running = [p for p in self.pods if p.obj.get("status", {}).get("phase") == "Running"]
        ready = [
            p for p in running if all(c.get("ready") for c in p.obj["status"].get("containerStatuses", []))
        ]
        pending = [p for p in self.pods if p.obj.get("status", {}).get("phase") in (None, "Pending")]
        await self.job.progress(ready=len(ready), running=len(running), pending=len(pending), total=total)

    async def all_running(self) -> list[PodSlot]:
        slots = self.cluster_slots()
        for slot in slots:
            self.run_pod(slot)
            await self.run.pause()
        await self.progress(len(slots))
        if self.family == "ray" and self.category in ("ExitCode", "BackoffLimitExceeded"):
            sub = next(s for s in self.slots() if s.role == "submitter")
            self.run_pod(sub, ["Job submission server address: http://localhost:8265"])
        return slots

    def child_of(self, slot: PodSlot) -> str | None:
        owner = slot.owner
        return str(owner["name"]) if owner.get("kind") == "Job" else None

    # ----------------------------------------------------------------- main
    async def execute(self) -> DiagnosisTruth:
        c = self.category
        retries = {"BackoffLimitExceeded": 2 if self.family != "kubeflow" else 3}.get(c, 0)
        if self.family in ("jobset", "trainjob", "mpi-v2") and c == "BackoffLimitExceeded":
            retries = 1
        # Kubeflow retries in place (OnFailure); the other controllers replace failed pods (Never).
        in_place = c == "CrashLoop" or (c == "BackoffLimitExceeded" and self.family == "kubeflow")
        restart = "OnFailure" if in_place else "Never"
        queue = LOCAL_QUEUE_NAME if c == "QueueWaiting" or self.variant else None
        body = self.job.manifest(
            restart_policy=restart,
            queue=queue,
            deadline=600 if c == "DeadlineExceeded" else None,
            retries=retries,
        )
        self._policy(body)
        await self.job.create(body, queued=queue is not None)
        handler = getattr(self, f"_{c[0].lower()}{c[1:]}")
        if self.variant:
            handler = getattr(self, f"_{c.lower()}_{self.variant.replace('-', '_')}")
        facts: dict[str, Any] = await handler()
        return self._truth(facts)

    def _policy(self, body: dict[str, Any]) -> None:
        if self.category != "PodFailurePolicy":
            return
        specd = body["spec"]
        rule: dict[str, Any] = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}
        if self.family == "batch":
            specd["podFailurePolicy"] = {
                "rules": [{**rule, "onExitCodes": {"containerName": "train", **rule["onExitCodes"]}}]
            }
        elif self.family in ("jobset", "trainjob"):
            if self.family == "jobset":
                specd["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"] = {"rules": [rule]}
            specd["failurePolicy"] = {
                "maxRestarts": 3,
                "rules": [
                    {
                        "name": "fail-on-exit-42",
                        "action": "FailJobSet",
                        "onJobFailureReasons": ["PodFailurePolicy"],
                    }
                ],
            }
        elif self.family == "volcano":
            specd["policies"] = [{"exitCode": 42, "action": "TerminateJob"}, *specd.get("policies", [])]

    def _truth(self, facts: dict[str, Any], category: str | None = None) -> DiagnosisTruth:
        category = category or self.category
        if self.variant and category == self.category:
            facts.setdefault("extra", {})["variant"] = self.variant
        run = self.run
        state = run.truth.last_state(run.uid)
        assert state is not None
        pod: PodState | None = facts.pop("pod_state", None)
        exit_code = facts.get("exit_code")
        if pod is not None:
            facts.setdefault("pod", pod.name)
            facts.setdefault("role", pod.slot.role)
            facts.setdefault("container", pod.slot.container)
            facts.setdefault("node", pod.node)
        return DiagnosisTruth(
            cluster=self.cluster.name,
            api_version=self.spec.api_version,
            kind=self.spec.kind,
            namespace=run.namespace,
            name=run.name,
            uid=run.uid,
            category=category,
            blame=BLAME[category],
            phase=state.phase,
            sub_phase=state.sub_phase,
            terminal=state.terminal,
            signal=exit_code - 128 if isinstance(exit_code, int) and exit_code > 128 else None,
            warnings=tuple(self.warnings),
            **facts,
        )

    def _log_tail(self, container_id: str, n: int = 5) -> tuple[str, ...]:
        return tuple(line for _, line in self.cluster.logs.lines(container_id)[-n:])

    # ------------------------------------------------------ pod failures
    async def _pod_failure(self, how: str) -> dict[str, Any]:
        slots = await self.all_running()
        slot = self.target(slots)
        pod = next(p for p in self.pods if p.slot is slot or p.slot.name == slot.name)
        facts: dict[str, Any] = {"pod_state": pod}
        since = now()
        failure: Failure = "replica"
        if how == "OOMKilled":
            self.cluster.logs.write(pod.container_id, ["allocating activation checkpoint buffers (24.0 GiB)"])
            pod.terminated("OOMKilled", 137)
            facts.update(exit_code=137, reason="OOMKilled", message="")
        elif how == "ExitCode":
            self.cluster.logs.write(pod.container_id, _ERROR_LINES)
            pod.terminated("Error", 1)
            facts.update(exit_code=1, reason="Error", log_secret=SECRET)
            if self.family == "kubeflow":
                self.event(
                    run_obj(self),
                    "Normal",
                    "ExitedWithCode",
                    f"Pod: {self.run.namespace}.{pod.name} exited with code 1",
                    component=f"{self.spec.kind.lower()}-controller",
                )
        elif how == "Preempted":
            msg = f"{pod.slot.scheduler}: preempting to accommodate a higher priority pod"
            pod.terminated("Error", 137, disruption=("PreemptionByScheduler", msg))
            self.event(
                pod.obj,
                "Normal",
                "Preempted",
                f"Preempted by pod {fake_uid('preemptor', pod.name)} on node {pod.node}",
                component="default-scheduler",
                style="events",
                action="Preempting",
            )
            self._kubelet(pod, "Normal", "Killing", f"Stopping container {pod.slot.container}")
            facts.update(exit_code=137, reason="PreemptionByScheduler", message=msg)
        elif how == "Evicted":
            msg = (
                "The node was low on resource: memory. Threshold quantity: 100Mi, available: 52Mi. "
                f"Container {pod.slot.container} was using 31Gi, request is 16Gi, "
                "has larger consumption of memory. "
            )
            pod.terminated(
                "Error", 137, pod_reason="Evicted", pod_message=msg, disruption=("TerminationByKubelet", msg)
            )
            self._kubelet(pod, "Warning", "Evicted", msg)
            self._kubelet(pod, "Normal", "Killing", f"Stopping container {pod.slot.container}")
            facts.update(exit_code=137, reason="Evicted", message=msg)
            failure = "evicted"
        elif how == "NodeFailure":
            node = {
                "kind": "Node",
                "apiVersion": "v1",
                "metadata": {"name": pod.node, "uid": fake_uid("node", str(pod.node))},
            }
            self.event(
                node,
                "Normal",
                "NodeNotReady",
                f"Node {pod.node} status is now: NodeNotReady",
                component="node-controller",
            )
            self.event(pod.obj, "Warning", "NodeNotReady", "Node is not ready", component="node-controller")
            pod.terminated(
                "ContainerStatusUnknown",
                137,
                message="The container could not be located when the pod was terminated",
                disruption=("DeletionByPodGC", "PodGC: node no longer exists"),
            )
            facts.update(exit_code=137, reason="DeletionByPodGC", message="PodGC: node no longer exists")
        facts["since"] = since
        facts["log_tail"] = self._log_tail(pod.container_id)
        reason, message = await self.job.fail(failure, pod.slot, child=self.child_of(pod.slot))
        facts.setdefault("extra", {})["job_reason"] = reason
        facts["extra"]["job_message"] = message
        return facts

    async def _oOMKilled(self) -> dict[str, Any]:
        return await self._pod_failure("OOMKilled")

    async def _exitCode(self) -> dict[str, Any]:
        return await self._pod_failure("ExitCode")

    async def _preempted(self) -> dict[str, Any]:
        return await self._pod_failure("Preempted")

    async def _evicted(self) -> dict[str, Any]:
        return await self._pod_failure("Evicted")

    async def _nodeFailure(self) -> dict[str, Any]:
        return await self._pod_failure("NodeFailure")

    # ------------------------------------------------------ waiting pods
    async def _waiting(self, how: str) -> dict[str, Any]:
        slots = self.cluster_slots()
        target = self.target(slots)
        since = now()
        facts: dict[str, Any] = {}
        for slot in slots:
            if slot is not target:
                self.run_pod(slot)
                continue
            if how == "ImagePullFailed":
                slot.image = BAD_IMAGE
            pod = self.start(slot)
            facts["pod_state"] = pod
            if how == "Unschedulable":
                msg = unschedulable_message(RESOURCE)
                pod.unschedulable(msg)
                self.event(
                    pod.obj,
                    "Warning",
                    "FailedScheduling",
                    msg,
                    component="default-scheduler",
                    style="events",
                    action="Scheduling",
                )
                facts.update(reason="Unschedulable", message=msg, resource=RESOURCE)
                self._abnormal(pod, "Unschedulable", f"Error pod {pod.name} condition message: {msg}")
                continue
            self.bind(pod)
            if how == "ImagePullFailed":
                self._kubelet(pod, "Normal", "Pulling", f'Pulling image "{BAD_IMAGE}"')
                err = (
                    f'Failed to pull image "{BAD_IMAGE}": rpc error: code = NotFound desc = '
                    "failed to pull and unpack "
                    f'image "{BAD_IMAGE}": failed to resolve reference "{BAD_IMAGE}": {BAD_IMAGE}: not found'
                )
                self._kubelet(pod, "Warning", "Failed", err)
                self._kubelet(pod, "Warning", "Failed", "Error: ErrImagePull")
                msg = f'Back-off pulling image "{BAD_IMAGE}"'
                self._kubelet(pod, "Normal", "BackOff", msg)
                self._kubelet(pod, "Warning", "Failed", "Error: ImagePullBackOff")
                pod.waiting("ImagePullBackOff", msg)
                facts.update(reason="ImagePullBackOff", message=msg, extra={"image": BAD_IMAGE})
                self._abnormal(pod, "ImagePullBackOff", self._waiting_text(pod, msg))
            else:
                msg = 'secret "wandb-api-key" not found'
                pod.waiting("CreateContainerConfigError", msg)
                self._kubelet(pod, "Warning", "Failed", f"Error: {msg}")
                self._abnormal(pod, "CreateContainerConfigError", self._waiting_text(pod, msg))
                facts.update(reason="CreateContainerConfigError", message=msg)
        facts["since"] = since
        await self.progress(len(slots))
        return facts

    async def _imagePullFailed(self) -> dict[str, Any]:
        return await self._waiting("ImagePullFailed")

    async def _configError(self) -> dict[str, Any]:
        return await self._waiting("ConfigError")

    async def _unschedulable(self) -> dict[str, Any]:
        facts = await self._waiting("Unschedulable")
        facts["node"] = None
        return facts

    # ------------------------------------------------------------ crash loop
    async def _crashLoop(self) -> dict[str, Any]:
        slots = self.cluster_slots()
        target = self.target(slots)
        target.restart_policy = "Always" if self.family == "ray" else "OnFailure"
        await self.all_running()
        pod = next(p for p in self.pods if p.slot is target)
        since = now()
        restarts = 5
        for i in range(restarts):
            self.cluster.logs.write(pod.container_id, _ERROR_LINES[1:])
            last = i == restarts - 1
            pod.restarted_after("Error", 1, crashloop=last)
            if not last:
                self.cluster.logs.write(pod.container_id, _TRAIN_LINES[:1])
            self._kubelet(
                pod,
                "Warning",
                "BackOff",
                f"Back-off restarting failed container {pod.slot.container} in pod "
                f"{pod.name}_{pod.namespace}({pod.uid})",
            )
        previous = pod.obj["status"]["containerStatuses"][0]["lastState"]["terminated"]["containerID"]
        waiting_msg = pod.obj["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
        self._abnormal(pod, "CrashLoopBackOff", self._waiting_text(pod, waiting_msg))
        await self.progress(len(slots))
        waiting = pod.obj["status"]["containerStatuses"][0]["state"]["waiting"]
        return {
            "pod_state": pod,
            "since": since,
            "exit_code": 1,
            "reason": "CrashLoopBackOff",
            "message": waiting["message"],
            "previous_log": True,
            "log_tail": self._log_tail(previous),
            "extra": {"restart_count": restarts},
        }

    # ------------------------------------------------------- retries used up
    async def _backoffLimitExceeded(self) -> dict[str, Any]:
        slots = await self.all_running()
        target = self.target(self.slots() if self.family == "ray" else slots)
        pod = next(p for p in self.pods if p.slot.name == target.name or p.slot is target)
        since = now()
        family = self.family
        if family == "kubeflow":
            attempts = 4  # backoffLimit 3: the 4th restart fails the job
            for i in range(attempts):
                self.cluster.logs.write(pod.container_id, _ERROR_LINES[1:])
                pod.restarted_after("Error", 1, crashloop=i == attempts - 1)
            log_id = pod.obj["status"]["containerStatuses"][0]["lastState"]["terminated"]["containerID"]
            facts: dict[str, Any] = {"previous_log": True}
        else:
            attempts = {"batch": 3, "ray": 3, "volcano": 2}.get(family, 2)
            for i in range(attempts):
                self.cluster.logs.write(pod.container_id, _ERROR_LINES[1:])
                pod.terminated("Error", 1)
                log_id = pod.container_id
                if i == attempts - 1:
                    break
                if family != "ray":
                    await self.job.restarting(pod.slot.role)
                if family == "volcano":  # RestartJob: every pod is replaced
                    for other in list(self.pods):
                        if other is not pod:
                            self.respawn(other)
                pod = self.respawn(pod)
                if family != "ray":
                    await self.progress(len(slots))
            facts = {}
        child = self.child_of(pod.slot)
        reason, message = await self.job.fail("backoff", pod.slot, child=child)
        if family == "batch":
            self.event(run_obj(self), "Warning", "BackoffLimitExceeded", message, component="job-controller")
        facts.update(
            pod_state=pod,
            since=since,
            exit_code=1,
            reason=reason,
            message=message,
            cause="ExitCode",
            log_tail=self._log_tail(log_id),
            extra={"attempts": attempts},
        )
        return facts

    # ----------------------------------------------------------- job policies
    async def _deadlineExceeded(self) -> dict[str, Any]:
        slots = await self.all_running()
        since = now()
        for pod in self.pods:
            self._kubelet(pod, "Normal", "Killing", f"Stopping container {pod.slot.container}")
            self.store.delete(POD, pod.namespace, pod.name, ignore_finalizers=True)
        child = self.child_of(slots[0])
        reason, message = await self.job.fail("deadline", None, child=child)
        if self.family == "batch":
            self.event(run_obj(self), "Warning", "DeadlineExceeded", message, component="job-controller")
        elif self.family in ("jobset", "trainjob") and child:
            # The job controller's Warning on the child Job that hit its activeDeadlineSeconds
            # (as on any Job it fails, with its Failed condition's reason and message); the JobSet
            # itself only says "FailedJobs ... (first failed job: <child>)" (reference §3.4).
            child_job = self.store.get(BATCH_JOB, self.run.namespace, child)
            self.event(
                child_job,
                "Warning",
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
                component="job-controller",
            )
        return {
            "since": since,
            "reason": reason,
            "message": message,
            "extra": {"active_deadline_seconds": 600},
        }

    async def _podFailurePolicy(self) -> dict[str, Any]:
        slots = await self.all_running()
        target = self.target(slots)
        pod = next(p for p in self.pods if p.slot is target)
        since = now()
        self.cluster.logs.write(
            pod.container_id, ["config check failed: unknown optimizer 'adamw8bit'", "exit 42"]
        )
        pod.terminated("Error", 42)
        reason, message = await self.job.fail("policy", pod.slot, child=self.child_of(pod.slot))
        if self.family == "batch":
            self.event(run_obj(self), "Warning", "PodFailurePolicy", message, component="job-controller")
        return {
            "pod_state": pod,
            "since": since,
            "exit_code": 42,
            "reason": reason or "TerminateJob",
            "message": message,
            "log_tail": self._log_tail(pod.container_id),
        }

    async def _unknown(self) -> dict[str, Any]:
        since = now()
        await self.job.fail("unknown", None)
        return {"since": since}

    # --------------------------------------------------------------- waiting
    async def _quotaExceeded(self) -> dict[str, Any]:
        since = now()
        run, family = self.run, self.family
        slot = self.target(self.cluster_slots())
        forbidden = f'pods "{slot.name}" is forbidden: {_QUOTA}'
        if family in ("kubeflow",):
            reason, component, obj = "FailedCreatePod", f"{self.spec.kind.lower()}-controller", run_obj(self)
            msg = f"Error creating: {forbidden}"
        elif family == "ray":
            cluster = ray_cluster_name(run.obj)
            obj = {
                "kind": "RayCluster",
                "apiVersion": "ray.io/v1",
                "metadata": {
                    "name": cluster,
                    "namespace": run.namespace,
                    "uid": fake_uid(run.namespace, "raycluster", cluster),
                },
            }
            head = f"{cluster}-head-x7k2p"
            reason, component = "FailedToCreateHeadPod", "raycluster-controller"
            msg = f'Failed to create head Pod {run.namespace}/{head}, pods "{head}" is forbidden: {_QUOTA}'
        elif family == "volcano":
            reason, component, obj = "FailedCreate", "vc-controller-manager", run_obj(self)
            msg = f"Error creating pods: [{forbidden}]"
        else:  # batch Jobs, and the child Jobs of MPI v2, JobSet and TrainJob: the job controller
            if family == "mpi-v2":
                slot = next(s for s in self.cluster_slots() if s.role == "Launcher")
            child = self.child_of(slot) or run.name
            obj = run_obj(self) if family == "batch" else self.store.get(BATCH_JOB, run.namespace, child)
            reason, component = "FailedCreate", "job-controller"
            forbidden = f'pods "{child}-{slot.name.rsplit("-", 1)[-1]}" is forbidden: {_QUOTA}'
            msg = f"Error creating: {forbidden}"
        self.event(obj, "Warning", reason, msg, component=component)
        if family == "volcano":
            self.job._volcano("Pending")
            from kubesim.lifecycles import QUEUED

            await self.job.write(QUEUED)
        elif family == "ray":
            from kubesim.lifecycles import INITIALIZING

            run.status.update(
                jobDeploymentStatus="Initializing", rayClusterName=ray_cluster_name(run.obj), startTime=now()
            )
            await self.job.write(INITIALIZING)
        return {
            "since": since,
            "reason": reason,
            "message": msg,
            "resource": RESOURCE,
            "extra": {"quota": "gpu-quota"},
        }

    async def _admit(self, wl_name: str) -> None:
        """Kueue reserves quota and admits the Workload, then unsuspends the job."""
        run, store = self.run, self.store
        kueue.admit(store, run.namespace, wl_name, CLUSTER_QUEUE_NAME)
        wl = store.get(WORKLOAD, run.namespace, wl_name)
        for reason, message in (
            (
                "QuotaReserved",
                f"Quota reserved in ClusterQueue {CLUSTER_QUEUE_NAME}, wait time since queued was 0s",
            ),
            (
                "Admitted",
                f"Admitted by ClusterQueue {CLUSTER_QUEUE_NAME}, wait time since reservation was 0s",
            ),
        ):
            self.event(
                wl, "Normal", reason, message, component="kueue-admission", style="events", action=reason
            )
        self.event(
            run_obj(self),
            "Normal",
            "Started",
            f"Admitted by clusterQueue {CLUSTER_QUEUE_NAME}",
            component="kueue",
            style="events",
            action="Started",
        )
        await self.job.resume()

    async def _preempted_kueue(self) -> dict[str, Any]:
        """Kueue admits the job, it runs, then a higher-priority workload preempts it: the Workload is
        ``Evicted`` (``Preempted``) and ``Preempted`` (``InClusterQueue``), the job is suspended again
        and its pods go; it waits in the queue again."""
        run, store = self.run, self.store
        first = await self._queueWaiting()
        wl_name = first["extra"]["workload"]
        await self._admit(wl_name)
        await self.all_running()
        kueue.pods_ready(store, run.namespace, wl_name)
        since = now()
        message = kueue.preemption_message(
            fake_uid("preemptor", run.uid), fake_uid("preemptor-job", run.uid), CLUSTER_QUEUE_NAME
        )
        wl = kueue.preempt(store, run.namespace, wl_name, message)
        self.event(
            wl, "Normal", "Preempted", message, component="kueue-admission", style="events", action="Preempt"
        )
        self.event(
            run_obj(self), "Normal", "Stopped", message, component="kueue", style="events", action="Stop"
        )
        for pod in list(self.pods):
            self._kubelet(pod, "Normal", "Killing", f"Stopping container {pod.slot.container}")
            store.delete(POD, pod.namespace, pod.name, ignore_finalizers=True)
        self.pods.clear()
        await self.job.suspend()
        mine = next(
            i for i in kueue.pending_workloads(store, CLUSTER_QUEUE_NAME) if i["metadata"]["name"] == wl_name
        )
        return {
            "since": since,
            "reason": "Preempted",
            "message": message,
            "queue": LOCAL_QUEUE_NAME,
            "cluster_queue": CLUSTER_QUEUE_NAME,
            "position": mine["positionInClusterQueue"],
            "local_position": mine["positionInLocalQueue"],
            "extra": {"workload": wl_name, "preempted_by": "Kueue"},
        }

    async def _unschedulable_after_queue(self) -> dict[str, Any]:
        """The job waits for quota (a ``QueueWaiting`` diagnosis, kept in ``earlier``), is admitted,
        then one pod cannot be scheduled: the diagnosis changes while the job stays Pending."""
        first = await self._queueWaiting()
        self.earlier.append(self._truth(dict(first), "QueueWaiting"))
        await self._admit(first["extra"]["workload"])
        facts = await self._unschedulable()
        facts.setdefault("extra", {}).update(workload=first["extra"]["workload"], earlier="QueueWaiting")
        return facts

    async def _queueWaiting(self) -> dict[str, Any]:
        run, store = self.run, self.store
        _ensure_queues(self.cluster, run.namespace)
        since = now()
        pod_sets = [
            {"name": "main", "count": len(self.cluster_slots()), "template": {"spec": {"containers": []}}}
        ]
        wl = store.create(WORKLOAD, kueue.workload_body(run.obj, LOCAL_QUEUE_NAME, pod_sets))
        wl_name = wl["metadata"]["name"]
        cond = {
            "type": "QuotaReserved",
            "status": "False",
            "reason": "Pending",
            "message": _KUEUE_PENDING,
            "lastTransitionTime": now(),
            "observedGeneration": 1,
        }
        store.replace_status(
            WORKLOAD,
            run.namespace,
            wl_name,
            {"conditions": [cond], "resourceRequests": [{"name": "main", "resources": {RESOURCE: "4"}}]},
        )
        self.event(
            run_obj(self),
            "Normal",
            "CreatedWorkload",
            f"Created Workload: {run.namespace}/{wl_name}",
            component="kueue",
            style="events",
            action="Create",
        )
        self.event(
            store.get(WORKLOAD, run.namespace, wl_name),
            "Warning",
            "Pending",
            _KUEUE_PENDING,
            component="kueue-admission",
            style="events",
            action="Pending",
        )
        items = kueue.pending_workloads(store, CLUSTER_QUEUE_NAME)
        mine = next(i for i in items if i["metadata"]["name"] == wl_name)
        return {
            "since": since,
            "reason": "Pending",
            "message": _KUEUE_PENDING,
            "resource": RESOURCE,
            "queue": LOCAL_QUEUE_NAME,
            "cluster_queue": CLUSTER_QUEUE_NAME,
            "position": mine["positionInClusterQueue"],
            "local_position": mine["positionInLocalQueue"],
            "extra": {"workload": wl_name},
        }

    async def _gangWaiting(self) -> dict[str, Any]:
        run, store = self.run, self.store
        slots = self.cluster_slots()
        since = now()
        total = len(slots)
        first = slots[-1].name
        if self.gang == "volcano":
            pg_body = podgroups.volcano_podgroup(run.obj, total)
            pg = store.create(VOLCANO_PODGROUP, pg_body)
            msg = podgroups.gang_message(1, total, total, first, RESOURCE, len(NODES))
            pg = store.replace_status(
                VOLCANO_PODGROUP,
                run.namespace,
                pg["metadata"]["name"],
                podgroups.volcano_status("Inqueue", unschedulable=msg),
            )
            self.event(pg, "Warning", "Unschedulable", msg, component="volcano")
            reason = "NotEnoughResources"
        else:
            pg = store.create(COSCHEDULING_PODGROUP, podgroups.coscheduling_podgroup(run.obj, total))
            pg = store.replace_status(
                COSCHEDULING_PODGROUP, run.namespace, run.name, podgroups.coscheduling_status("Scheduling")
            )
            msg = unschedulable_message(RESOURCE)
            reason = "Unschedulable"
        pg_name = pg["metadata"]["name"]
        for slot in slots:
            pod = self.start(slot)
            if self.gang == "volcano" or slot.name == first:
                pod_msg = msg
            else:
                pod_msg = (
                    f"0/{len(NODES)} nodes are available: podGroup {run.namespace}/{pg_name} failed recently."
                )
            pod.unschedulable(pod_msg)
            self.event(
                pod.obj,
                "Warning",
                "FailedScheduling",
                pod_msg,
                component=slot.scheduler,
                style="record" if self.gang == "volcano" else "events",
                action="Scheduling",
            )
        if self.family == "volcano":
            self.event(
                run_obj(self),
                "Warning",
                "PodGroupPending",
                f"PodGroup {run.namespace}:{run.name} unschedulable, reason: {msg}",
                component="vc-controller-manager",
            )
        await self.progress(total)
        return {
            "since": since,
            "reason": reason,
            "message": msg,
            "resource": RESOURCE,
            "extra": {"podgroup": pg_name, "gang": self.gang, "min_member": total},
        }


def run_obj(d: DiagnosisRun) -> dict[str, Any]:
    return d.run.obj


def _ensure_queues(cluster: Cluster, namespace: str) -> None:
    """A ClusterQueue ``team-gpu`` with a LocalQueue ``user-queue`` in ``namespace``, and two
    higher-priority workloads of another team ahead in the ClusterQueue."""
    store = cluster.store
    try:
        store.get(CLUSTER_QUEUE, "", CLUSTER_QUEUE_NAME)
    except Exception:
        store.create(
            CLUSTER_QUEUE,
            {
                "metadata": {"name": CLUSTER_QUEUE_NAME},
                "spec": {
                    "namespaceSelector": {},
                    "queueingStrategy": "BestEffortFIFO",
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory", RESOURCE],
                            "flavors": [
                                {"name": "a100", "resources": [{"name": RESOURCE, "nominalQuota": "8"}]}
                            ],
                        }
                    ],
                },
            },
        )
        store.create(
            LOCAL_QUEUE,
            {
                "metadata": {"name": "other-queue", "namespace": "other-team"},
                "spec": {"clusterQueue": CLUSTER_QUEUE_NAME},
            },
        )
        for i in range(2):
            job = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": f"other-team-train-{i}",
                    "namespace": "other-team",
                    "uid": fake_uid("other-team", str(i)),
                },
            }
            store.create(
                WORKLOAD,
                kueue.workload_body(job, "other-queue", [{"name": "main", "count": 1}], priority=100),
            )
    try:
        store.get(LOCAL_QUEUE, namespace, LOCAL_QUEUE_NAME)
    except Exception:
        store.create(
            LOCAL_QUEUE,
            {
                "metadata": {"name": LOCAL_QUEUE_NAME, "namespace": namespace},
                "spec": {"clusterQueue": CLUSTER_QUEUE_NAME},
            },
        )
