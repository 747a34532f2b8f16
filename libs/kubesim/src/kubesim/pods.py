"""The pods of a job, labelled and owned the way each controller makes them, and their statuses.

``layout(spec, job, ...)`` lists the pods a controller creates for a job (names, the labels and
annotations of reference §1.1 of ``diagnosis.md``, ownerReferences, containers with GPU requests
and a GPU node selector). :class:`PodState` writes one pod's status through the store the way the
scheduler and kubelet do: unschedulable, waiting (image pull, config error), running, terminated
(``OOMKilled``/``Error``/``ContainerStatusUnknown``), crash-looping, evicted, preempted.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kubesim import manifests
from kubesim.kinds import POD, KindSpec
from kubesim.objects import now

if TYPE_CHECKING:
    from kubesim.store import Store

__all__ = ["GPU_PRODUCT", "NODES", "PodSlot", "PodState", "layout", "unschedulable_message"]

NODES = tuple(f"gpu-node-{i:02d}" for i in range(1, 9))
"""The simulated nodes pods land on (what scheduler messages count: ``0/8 nodes``)."""
GPU_PRODUCT = "NVIDIA-A100-SXM4-80GB"
GPU_SELECTOR = {"nvidia.com/gpu.product": GPU_PRODUCT}

_KUBEFLOW_OPERATOR = {
    "PyTorchJob": "pytorchjob-controller",
    "TFJob": "tfjob-controller",
    "XGBoostJob": "xgboostjob-controller",
    "PaddleJob": "paddlejob-controller",
    "JAXJob": "jaxjob-controller",
    "MPIJob": "mpijob-controller",
}
_CONTAINER = {
    "PyTorchJob": ("pytorch", "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727"),
    "TFJob": ("tensorflow", "kubeflow/tf-mnist-with-summaries:latest"),
    "MPIJob": ("mpi", "mpioperator/tensorflow-benchmarks:latest"),
    "XGBoostJob": ("xgboost", "docker.io/kubeflow/xgboost-dist-iris:latest"),
    "PaddleJob": ("paddle", "registry.baidubce.com/paddlepaddle/paddle:2.4.0rc0-gpu"),
    "JAXJob": ("jax", "docker.io/kubeflow/jaxjob-simple:latest"),
}


@dataclass
class PodSlot:
    """One pod a controller creates for a job: ``role`` is the replica type, task, replicated job
    or Ray group as the operator names it (``None`` for a plain batch Job)."""

    name: str
    role: str | None
    index: int
    container: str
    image: str
    labels: dict[str, str]
    annotations: dict[str, str] = field(default_factory=dict)
    owner: dict[str, Any] = field(default_factory=dict)
    restart_policy: str = "Never"
    scheduler: str = "default-scheduler"
    gpus: int = 1


def _suffix(rand: random.Random) -> str:
    return "".join(rand.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))


def _owner(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def fake_uid(*parts: str) -> str:
    """A stable uid for an object kubesim does not store (a RayCluster, a child Job not served)."""
    h = hashlib.sha256("/".join(parts).encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"


def batch_labels(job_name: str, job_uid: str) -> dict[str, str]:
    return {
        "batch.kubernetes.io/controller-uid": job_uid,
        "batch.kubernetes.io/job-name": job_name,
        "controller-uid": job_uid,
        "job-name": job_name,
    }


def jobset_labels(
    jobset: str, jobset_uid: str, rjob: str, replicas: int, index: int, namespace: str
) -> dict[str, str]:
    child = f"{jobset}-{rjob}-{index}"
    return {
        "jobset.sigs.k8s.io/jobset-name": jobset,
        "jobset.sigs.k8s.io/jobset-uid": jobset_uid,
        "jobset.sigs.k8s.io/replicatedjob-name": rjob,
        "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicas),
        "jobset.sigs.k8s.io/global-replicas": str(replicas),
        "jobset.sigs.k8s.io/job-index": str(index),
        "jobset.sigs.k8s.io/job-global-index": str(index),
        "jobset.sigs.k8s.io/job-key": hashlib.sha256(f"{namespace}/{child}".encode()).hexdigest(),
        "jobset.sigs.k8s.io/restart-attempt": "0",
    }


def _replicas(job: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """replica type -> (replicas, the pods' restartPolicy: the operators map ``ExitCode`` to Never)."""
    specd = job.get("spec") or {}
    key = next((k for k in specd if k.endswith("ReplicaSpecs")), None)
    if key is None:
        return {}
    out: dict[str, tuple[int, str]] = {}
    for rt, v in specd[key].items():
        policy = str(v.get("restartPolicy") or "Never")
        out[rt] = (int(v.get("replicas", 1)), "Never" if policy == "ExitCode" else policy)
    return out


def _template_policy(template: Any, default: str = "Never") -> str:
    spec = template.get("spec") if isinstance(template, dict) else None
    return str((spec or {}).get("restartPolicy") or default)


def layout(
    spec: KindSpec,
    job: dict[str, Any],
    rand: random.Random,
    *,
    gang: str | None = None,
    child_uids: dict[str, str] | None = None,
) -> list[PodSlot]:
    """The pods the controller of ``spec`` creates for ``job``. ``gang`` is ``"volcano"`` or
    ``"coscheduling"`` when the job is gang-scheduled. ``child_uids`` names the uids of child
    Jobs (JobSet, MPI v2 launcher, Ray submitter) that exist in the store."""
    meta = job["metadata"]
    name, uid, ns = meta["name"], meta["uid"], meta["namespace"]
    children = child_uids or {}
    me = _owner(job["apiVersion"], job["kind"], name, uid)
    family = spec.family
    slots: list[PodSlot] = []
    if family == "batch":
        slots.append(
            PodSlot(
                f"{name}-{_suffix(rand)}",
                None,
                0,
                "train",
                "python:3.11-slim",
                batch_labels(name, uid),
                owner=me,
                restart_policy=_template_policy((job.get("spec") or {}).get("template")),
            )
        )
    elif family in ("kubeflow", "mpi-v2"):
        container, image = _CONTAINER[spec.kind]
        replicas = _replicas(job)
        has_master = any(rt in replicas for rt in ("Master", "Chief"))
        for rtype, (count, policy) in replicas.items():
            for i in range(count):
                labels = {"training.kubeflow.org/job-name": name.replace("/", "-")}
                annotations: dict[str, str] = {}
                owner = me
                pod_name = f"{name}-{rtype.lower()}-{i}"
                if family == "mpi-v2":
                    labels["training.kubeflow.org/operator-name"] = "mpi-operator"
                    labels["training.kubeflow.org/job-role"] = rtype.lower()
                    if rtype == "Worker":
                        labels["training.kubeflow.org/replica-index"] = str(i)
                    else:  # the launcher is a batch/v1 Job's pod
                        lname = f"{name}-launcher"
                        luid = children.get(lname, fake_uid(ns, lname))
                        labels.update(batch_labels(lname, luid))
                        owner = _owner("batch/v1", "Job", lname, luid)
                        pod_name = f"{lname}-{_suffix(rand)}"
                else:
                    labels["training.kubeflow.org/operator-name"] = _KUBEFLOW_OPERATOR[spec.kind]
                    labels["training.kubeflow.org/replica-type"] = rtype.lower()
                    labels["training.kubeflow.org/replica-index"] = str(i)
                    master = rtype in ("Master", "Chief", "Launcher") or (
                        not has_master and rtype == "Worker" and i == 0 and spec.kind != "MPIJob"
                    )
                    if master:
                        labels["training.kubeflow.org/job-role"] = "master"
                    if rtype == "Launcher":
                        pod_name = f"{name}-launcher"
                        del labels["training.kubeflow.org/replica-index"]
                if gang == "coscheduling":
                    labels["scheduling.x-k8s.io/pod-group"] = name
                elif gang == "volcano":
                    annotations = {
                        "scheduling.k8s.io/group-name": name,
                        "volcano.sh/task-spec": rtype.lower(),
                    }
                slots.append(
                    PodSlot(
                        pod_name,
                        rtype,
                        i,
                        container,
                        image,
                        labels,
                        annotations,
                        owner,
                        restart_policy=policy,
                        scheduler="volcano" if gang == "volcano" else "default-scheduler",
                        gpus=0 if rtype == "Launcher" else 1,
                    )
                )
    elif family in ("jobset", "trainjob"):
        rjob = "node" if family == "trainjob" else "workers"
        container = "node" if family == "trainjob" else "train"
        jobset_uid = children.get(f"jobset:{name}", uid)
        count = 2
        for i in range(count):
            child = f"{name}-{rjob}-{i}"
            cuid = children.get(child, fake_uid(ns, child))
            labels = {
                **jobset_labels(name, jobset_uid, rjob, count, i, ns),
                **batch_labels(child, cuid),
                "batch.kubernetes.io/job-completion-index": "0",
            }
            annotations = {k: v for k, v in labels.items() if k.startswith("jobset.sigs.k8s.io/")}
            annotations["batch.kubernetes.io/job-completion-index"] = "0"
            if gang == "coscheduling":
                labels["scheduling.x-k8s.io/pod-group"] = name
            elif gang == "volcano":
                annotations["scheduling.k8s.io/group-name"] = name
            slots.append(
                PodSlot(
                    f"{child}-0-{_suffix(rand)}",
                    rjob,
                    i,
                    container,
                    "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
                    labels,
                    annotations,
                    _owner("batch/v1", "Job", child, cuid),
                    scheduler="volcano" if gang == "volcano" else "default-scheduler",
                )
            )
    elif family == "volcano":
        for task in (job.get("spec") or {}).get("tasks") or ():
            tname = str(task.get("name", "default"))
            for i in range(int(task.get("replicas", 1))):
                labels = {
                    "volcano.sh/job-name": name,
                    "volcano.sh/job-namespace": ns,
                    "volcano.sh/queue-name": str(job["spec"].get("queue", "default")),
                    "volcano.sh/task-spec": tname,
                    "volcano.sh/task-index": str(i),
                }
                annotations = {
                    "scheduling.k8s.io/group-name": f"{name}-{uid}",
                    "volcano.sh/task-spec": tname,
                    "volcano.sh/task-index": str(i),
                    "volcano.sh/job-name": name,
                    "volcano.sh/queue-name": labels["volcano.sh/queue-name"],
                    "volcano.sh/job-version": "0",
                    "volcano.sh/template-uid": f"{name}-{tname}",
                    "volcano.sh/job-retry-count": "0",
                }
                slots.append(
                    PodSlot(
                        f"{name}-{tname}-{i}",
                        tname,
                        i,
                        "worker",
                        "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
                        labels,
                        annotations,
                        me,
                        restart_policy=_template_policy(task.get("template"), "OnFailure"),
                        scheduler="volcano",
                    )
                )
    elif family == "ray":
        cluster = ray_cluster_name(job)
        cuid = fake_uid(ns, "raycluster", cluster)
        rc_owner = _owner("ray.io/v1", "RayCluster", cluster, cuid)
        common = {
            "ray.io/cluster": cluster,
            "ray.io/is-ray-node": "yes",
            "app.kubernetes.io/name": "kuberay",
            "app.kubernetes.io/created-by": "kuberay-operator",
        }
        image = "rayproject/ray:2.41.0"
        head = {
            **common,
            "ray.io/node-type": "head",
            "ray.io/group": "headgroup",
            "ray.io/identifier": f"{cluster}-head",
        }
        worker = {
            **common,
            "ray.io/node-type": "worker",
            "ray.io/group": "small-group",
            "ray.io/identifier": f"{cluster}-worker",
        }
        annotations = {"ray.io/ft-enabled": "false"}
        if gang == "volcano":
            annotations["scheduling.k8s.io/group-name"] = f"ray-{name}-pg"
        sched = "volcano" if gang == "volcano" else "default-scheduler"
        slots.append(
            PodSlot(
                f"{cluster}-head-{_suffix(rand)}",
                "head",
                0,
                "ray-head",
                image,
                head,
                dict(annotations),
                rc_owner,
                "Never",  # KubeRay recreates failed Ray pods itself
                sched,
                gpus=0,
            )
        )
        slots.append(
            PodSlot(
                f"{cluster}-small-group-worker-{_suffix(rand)}",
                "small-group",
                0,
                "ray-worker",
                image,
                worker,
                dict(annotations),
                rc_owner,
                "Never",  # KubeRay recreates failed Ray pods itself
                sched,
            )
        )
        sub_uid = children.get(name, fake_uid(ns, "submitter", name))
        sub_labels = {
            "ray.io/originated-from-cr-name": name,
            "ray.io/originated-from-crd": "RayJob",
            "app.kubernetes.io/created-by": "kuberay-operator",
            **batch_labels(name, sub_uid),
        }
        slots.append(
            PodSlot(
                f"{name}-{_suffix(rand)}",
                "submitter",
                0,
                "ray-job-submitter",
                image,
                sub_labels,
                owner=_owner("batch/v1", "Job", name, sub_uid),
                gpus=0,
            )
        )
    return slots


def ray_cluster_name(job: dict[str, Any]) -> str:
    """``status.rayClusterName`` (``<rayjob>-<5 random>``, stable per job uid here)."""
    meta = job["metadata"]
    return f"{meta['name']}-{hashlib.sha256(meta['uid'].encode()).hexdigest()[:5]}"


def pod_body(slot: PodSlot, namespace: str) -> dict[str, Any]:
    resources: dict[str, Any] = {
        "requests": {"cpu": "4", "memory": "16Gi"},
        "limits": {"cpu": "8", "memory": "32Gi"},
    }
    if slot.gpus:
        resources["requests"]["nvidia.com/gpu"] = str(slot.gpus)
        resources["limits"]["nvidia.com/gpu"] = str(slot.gpus)
    tmpl = manifests.pod_template(slot.container, slot.image, gpus=0, restart_policy=slot.restart_policy)
    pod_spec = tmpl["spec"]
    pod_spec["containers"][0]["resources"] = resources
    pod_spec["containers"][0]["terminationMessagePath"] = "/dev/termination-log"
    pod_spec["containers"][0]["terminationMessagePolicy"] = "File"
    pod_spec.update(
        schedulerName=slot.scheduler,
        serviceAccountName="default",
        priority=0,
        enableServiceLinks=True,
        preemptionPolicy="PreemptLowerPriority",
        terminationGracePeriodSeconds=30,
        dnsPolicy="ClusterFirst",
    )
    if slot.gpus:
        pod_spec["nodeSelector"] = dict(GPU_SELECTOR)
    meta: dict[str, Any] = {
        "name": slot.name,
        "namespace": namespace,
        "labels": dict(slot.labels),
        "ownerReferences": [dict(slot.owner)] if slot.owner else [],
    }
    annotations = {**tmpl["metadata"].get("annotations", {}), **slot.annotations}
    if annotations:
        meta["annotations"] = annotations
    if slot.owner.get("kind") == "Job" and slot.owner.get("apiVersion") == "batch/v1":
        meta["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    status = {"phase": "Pending", "qosClass": "Burstable"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec, "status": status}


def unschedulable_message(resource: str = "nvidia.com/gpu", nodes: int = len(NODES)) -> str:
    """The scheduler's FitError text (k/k framework/types.go ``FitError.Error``)."""
    return (
        f"0/{nodes} nodes are available: {nodes} Insufficient {resource}. preemption: 0/{nodes} nodes are "
        f"available: {nodes} No preemption victims found for incoming pod."
    )


def _cond(ctype: str, status: str, reason: str | None = None, message: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": now()}
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


class PodState:
    """One pod in the store, moved through the states the scheduler and kubelet write."""

    def __init__(self, store: Store, slot: PodSlot, namespace: str, rand: random.Random) -> None:
        self.store = store
        self.slot = slot
        self.namespace = namespace
        self.rand = rand
        self.node: str | None = None
        self.obj = store.create(POD, pod_body(slot, namespace))
        self.container_id = ""
        self.restarts = 0
        self.ip = f"10.244.{rand.randint(1, 250)}.{rand.randint(2, 250)}"

    @property
    def name(self) -> str:
        return self.slot.name

    @property
    def uid(self) -> str:
        return str(self.obj["metadata"]["uid"])

    def new_container_id(self) -> str:
        self.container_id = "containerd://" + "".join(self.rand.choice("0123456789abcdef") for _ in range(64))
        return self.container_id

    def _write(self, status: dict[str, Any], spec_patch: dict[str, Any] | None = None) -> None:
        if spec_patch:
            self.obj = self.store.patch(POD, self.namespace, self.name, {"spec": spec_patch})
        self.obj = self.store.replace_status(POD, self.namespace, self.name, status)

    def _base(self, phase: str) -> dict[str, Any]:
        st: dict[str, Any] = {"phase": phase, "qosClass": "Burstable"}
        if self.node:
            st.update(hostIP="192.168.10." + self.node[-2:].lstrip("0"), podIP=self.ip, startTime=now())
            st["podIPs"] = [{"ip": self.ip}]
        return st

    def _cstatus(
        self, state: dict[str, Any], *, ready: bool, last: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        cs: dict[str, Any] = {
            "name": self.slot.container,
            "state": state,
            "lastState": last or {},
            "ready": ready,
            "restartCount": self.restarts,
            "image": self.slot.image,
            "imageID": ""
            if "waiting" in state and not self.container_id
            else f"{self.slot.image}@sha256:{'0' * 64}",
            "started": "running" in state,
        }
        if self.container_id:
            cs["containerID"] = self.container_id
        return cs

    def unschedulable(self, message: str) -> None:
        """Pending: ``PodScheduled=False`` ``Unschedulable`` with the scheduler's message."""
        st = self._base("Pending")
        st["conditions"] = [_cond("PodScheduled", "False", "Unschedulable", message)]
        self._write(st)

    def bind(self, node: str) -> None:
        self.node = node
        self.obj = self.store.patch(POD, self.namespace, self.name, {"spec": {"nodeName": node}})

    def waiting(self, reason: str, message: str) -> None:
        """Scheduled, but its container waits (``ImagePullBackOff``, ``CreateContainerConfigError``)."""
        st = self._base("Pending")
        st["conditions"] = self._not_ready()
        st["containerStatuses"] = [
            self._cstatus({"waiting": {"reason": reason, "message": message}}, ready=False)
        ]
        self._write(st)

    def _conditions(self, *, ready: bool, reason: str | None = None, c: str = "") -> list[dict[str, Any]]:
        status = "True" if ready else "False"
        msg = None if ready else f"containers with unready status: [{c}]"
        return [
            _cond("PodReadyToStartContainers", "True"),
            _cond("Initialized", "True"),
            _cond("Ready", status, reason, msg),
            _cond("ContainersReady", status, reason, msg),
            _cond("PodScheduled", "True"),
        ]

    def _not_ready(self) -> list[dict[str, Any]]:
        return self._conditions(ready=False, reason="ContainersNotReady", c=self.slot.container)

    def running(self) -> None:
        if not self.container_id:
            self.new_container_id()
        st = self._base("Running")
        st["conditions"] = self._conditions(ready=True)
        st["containerStatuses"] = [self._cstatus({"running": {"startedAt": now()}}, ready=True)]
        self._write(st)

    def _terminated(self, reason: str, exit_code: int, message: str | None = None) -> dict[str, Any]:
        t: dict[str, Any] = {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": now(),
            "finishedAt": now(),
        }
        if message:
            t["message"] = message
        if self.container_id:
            t["containerID"] = self.container_id
        return t

    def terminated(
        self,
        reason: str,
        exit_code: int,
        *,
        message: str | None = None,
        pod_reason: str | None = None,
        pod_message: str | None = None,
        disruption: tuple[str, str] | None = None,
    ) -> None:
        """The container ended and the pod will not restart it (phase Failed, or Succeeded on 0).
        ``disruption`` adds ``DisruptionTarget=True`` with (reason, message)."""
        st = self._base("Succeeded" if exit_code == 0 and not pod_reason else "Failed")
        conds = self._conditions(ready=False, reason="PodFailed", c=self.slot.container)
        for c in conds:
            if c["type"] in ("Ready", "ContainersReady"):
                c.pop("message", None)
        if disruption:
            conds.insert(0, _cond("DisruptionTarget", "True", disruption[0], disruption[1]))
        st["conditions"] = conds
        if pod_reason:
            st["reason"] = pod_reason
        if pod_message:
            st["message"] = pod_message
        st["containerStatuses"] = [
            self._cstatus({"terminated": self._terminated(reason, exit_code, message)}, ready=False)
        ]
        self._write(st)

    def restarted_after(self, reason: str, exit_code: int, *, crashloop: bool) -> str:
        """The container exited and kubelet restarts it in place: ``lastState.terminated`` keeps the
        exit, ``restartCount`` grows, and the state is ``CrashLoopBackOff`` (``crashloop``) or running
        again. Returns the containerID of the instance that exited (the ``previous`` log)."""
        last_id = self.container_id
        last = {"terminated": self._terminated(reason, exit_code)}
        self.restarts += 1
        st = self._base("Running")
        if crashloop:
            back_off = "5m0s" if self.restarts >= 5 else f"{10 * 2 ** (self.restarts - 1)}s"
            msg = (
                f"back-off {back_off} restarting failed container={self.slot.container} "
                f"pod={self.name}_{self.namespace}({self.uid})"
            )
            state: dict[str, Any] = {"waiting": {"reason": "CrashLoopBackOff", "message": msg}}
            st["conditions"] = self._conditions(
                ready=False, reason="ContainersNotReady", c=self.slot.container
            )
        else:
            self.new_container_id()
            state = {"running": {"startedAt": now()}}
            st["conditions"] = self._conditions(ready=True)
        st["containerStatuses"] = [self._cstatus(state, ready=not crashloop, last=last)]
        self._write(st)
        return last_id
