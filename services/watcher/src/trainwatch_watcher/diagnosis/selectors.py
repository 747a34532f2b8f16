"""Which pods belong to a job, and which replica role a pod plays (reference diagnosis.md §1).

The selectors are exactly those of §1.2. Label values repeat across namespaces (``job-name``,
``volcano.sh/job-name``, ``jobset-name``): list or watch pods in the job's namespace only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

KUBEFLOW_OPERATORS: Mapping[str, str] = {
    "pytorchjob": "pytorchjob-controller",
    "tfjob": "tfjob-controller",
    "xgboostjob": "xgboostjob-controller",
    "paddlejob": "paddlejob-controller",
    "jaxjob": "jaxjob-controller",
    "mpijob": "mpijob-controller",  # training-operator v1; v2beta1 is "mpi-operator"
}
MPI_OPERATOR = "mpi-operator"

# Label keys (§1.1)
JOB_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
LEGACY_CONTROLLER_UID = "controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
KF_OPERATOR = "training.kubeflow.org/operator-name"
KF_JOB_NAME = "training.kubeflow.org/job-name"
KF_REPLICA_TYPE = "training.kubeflow.org/replica-type"
KF_REPLICA_INDEX = "training.kubeflow.org/replica-index"
KF_JOB_ROLE = "training.kubeflow.org/job-role"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
VOLCANO_JOB_NAME = "volcano.sh/job-name"
VOLCANO_TASK_SPEC = "volcano.sh/task-spec"
VOLCANO_TASK_INDEX = "volcano.sh/task-index"
RAY_CLUSTER = "ray.io/cluster"
RAY_NODE_TYPE = "ray.io/node-type"
RAY_GROUP = "ray.io/group"
RAY_IS_NODE = "ray.io/is-ray-node"
RAY_ORIGIN_CRD = "ray.io/originated-from-crd"

# Cluster-wide pod selectors, one watch each (§1.3 option A). The plain-Job one excludes the pods
# of Jobs that belong to a JobSet/TrainJob, an MPIJob v2beta1 launcher or a RayJob submitter.
KIND_POD_SELECTORS: Mapping[str, str] = {
    "job": f"{JOB_CONTROLLER_UID},!{JOBSET_NAME},!{KF_JOB_NAME},!{RAY_ORIGIN_CRD}",
    "kubeflow": KF_JOB_NAME,  # PyTorch/TF/XGBoost/Paddle/JAX/MPI v1 and MPI v2beta1
    "jobset": JOBSET_NAME,  # JobSet and TrainJob
    "volcanojob": VOLCANO_JOB_NAME,
    "raycluster": f"{RAY_IS_NODE}=yes",
    "raysubmitter": f"{RAY_ORIGIN_CRD}=RayJob",
}


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def pod_selector(kind: str, job: Mapping[str, Any], *, legacy_job_labels: bool = False) -> tuple[str, ...]:
    """The label selector(s) of one job's pods; more than one means "any of these" (RayJob: its
    RayCluster's pods and its submitter Job's). Empty when the job cannot be told apart yet (a
    batch Job without a uid, a RayJob before its cluster and submitter exist is still matched by
    the submitter selector). ``legacy_job_labels`` selects batch Job pods by ``controller-uid``
    (clusters older than the ``batch.kubernetes.io/`` prefix)."""
    metadata, spec, status = _map(job.get("metadata")), _map(job.get("spec")), _map(job.get("status"))
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        return ()
    if kind == "job":
        if spec.get("manualSelector") is True:
            labels = _map(_map(spec.get("selector")).get("matchLabels"))
            pairs = sorted(f"{k}={v}" for k, v in labels.items() if isinstance(v, str))
            return (",".join(pairs),) if pairs else ()
        uid = metadata.get("uid")
        if not isinstance(uid, str) or not uid:
            return ()
        return (f"{LEGACY_CONTROLLER_UID if legacy_job_labels else JOB_CONTROLLER_UID}={uid}",)
    if kind == "mpijob" and str(job.get("apiVersion", "")).endswith("/v2beta1"):
        return (f"{KF_OPERATOR}={MPI_OPERATOR},{KF_JOB_NAME}={name}",)
    if kind in KUBEFLOW_OPERATORS:
        # The operator writes the job name with "/" replaced by "-" (GenLabels).
        return (f"{KF_OPERATOR}={KUBEFLOW_OPERATORS[kind]},{KF_JOB_NAME}={name.replace('/', '-')}",)
    if kind in ("jobset", "trainjob"):  # a TrainJob's JobSet has the TrainJob's name
        return (f"{JOBSET_NAME}={name}",)
    if kind == "volcanojob":
        return (f"{VOLCANO_JOB_NAME}={name}",)
    if kind == "rayjob":
        submitter = f"{JOB_NAME}={name},{RAY_ORIGIN_CRD}=RayJob"
        cluster = status.get("rayClusterName")
        if isinstance(cluster, str) and cluster:
            return (f"{RAY_CLUSTER}={cluster}", submitter)
        return (submitter,)
    return ()


def _labels(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return _map(_map(pod.get("metadata")).get("labels"))


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return _map(_map(pod.get("metadata")).get("annotations"))


def role_of(pod: Mapping[str, Any]) -> str | None:
    """The replica role of a pod, lower case, from the labels its controller writes (§1.1):
    Kubeflow ``replica-type`` (master, worker, ps, chief, evaluator, launcher), MPI v2beta1
    ``job-role`` (launcher, worker), the JobSet replicatedJob (node, launcher, dataset-initializer...),
    the Volcano task, Ray ``head`` / the worker group, ``submitter`` for a RayJob's submitter pod.
    None for a plain Job's pods."""
    labels = _labels(pod)

    def label(key: str) -> str | None:
        value = labels.get(key)
        return value if isinstance(value, str) and value else None

    if role := label(KF_REPLICA_TYPE):
        return role.lower()
    if label(KF_JOB_NAME) and (role := label(KF_JOB_ROLE)):
        return role.lower()
    if role := label(JOBSET_REPLICATED_JOB):
        return role
    if label(VOLCANO_JOB_NAME) or label(VOLCANO_TASK_SPEC):
        task = label(VOLCANO_TASK_SPEC) or _annotations(pod).get(VOLCANO_TASK_SPEC)
        return task if isinstance(task, str) and task else None
    if node_type := label(RAY_NODE_TYPE):
        if node_type == "head":
            return "head"
        return label(RAY_GROUP) or node_type
    if label(RAY_ORIGIN_CRD) == "RayJob":
        return "submitter"
    return None


def index_of(pod: Mapping[str, Any]) -> int | None:
    """The replica index: Kubeflow ``replica-index``, JobSet ``job-index``, Volcano ``task-index``,
    an Indexed Job's completion index (label, or the annotation on older clusters)."""
    labels, annotations = _labels(pod), _annotations(pod)
    for key in (KF_REPLICA_INDEX, JOBSET_JOB_INDEX, VOLCANO_TASK_INDEX, JOB_COMPLETION_INDEX):
        value = labels.get(key, annotations.get(key))
        if isinstance(value, str) and value.isdigit():
            return int(value)
    return None
