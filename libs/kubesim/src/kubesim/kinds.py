"""The catalog of kinds kubesim can serve.

A :class:`KindSpec` names one served resource (group, version, kind, plural). A simulated
cluster serves a set of them; objects are stored per *resource* (``plural.group``), so the
MPIJob of ``kubeflow.org/v1`` (training-operator) and of ``kubeflow.org/v2beta1``
(mpi-operator) share ``mpijobs.kubeflow.org`` and a cluster serves one or the other, as a
real cluster does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = [
    "ALL_KINDS",
    "ALL_KINDS_MPI_V1",
    "BATCH_JOB",
    "CATALOG",
    "CLUSTER_QUEUE",
    "CORE_KINDS",
    "COSCHEDULING_PODGROUP",
    "CRD",
    "EVENT",
    "EVENT_V1",
    "EVIDENCE_CATALOG",
    "JAXJOB",
    "JOBSET",
    "KUEUE_KINDS",
    "LOCAL_QUEUE",
    "MPIJOB_V1",
    "MPIJOB_V2BETA1",
    "PADDLEJOB",
    "POD",
    "PYTORCHJOB",
    "RAYJOB",
    "TFJOB",
    "TRAINJOB",
    "VOLCANO_JOB",
    "VOLCANO_PODGROUP",
    "WORKLOAD",
    "XGBOOSTJOB",
    "KindSpec",
    "resolve_kind",
]


@dataclass(frozen=True, slots=True)
class KindSpec:
    """One served resource. ``family`` selects the status model used by the scenarios."""

    group: str
    version: str
    kind: str
    plural: str
    family: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    builtin: bool = False
    replica_types: tuple[str, ...] = field(default=())
    # Evidence kinds (pods, Events, Kueue, PodGroups) are not job kinds: no lifecycle, not in
    # ``Cluster.kinds``, but served and in discovery like any other.
    job: bool = True
    # Selectable fields beyond metadata.name/metadata.namespace (built-in kinds only).
    fields: tuple[str, ...] = ()
    # Another kind's storage this one is a view of (events.k8s.io/v1 Events are core/v1 Events).
    view_of: str = ""
    subresources: tuple[str, ...] = ("status",)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        """The resource name, e.g. ``pytorchjobs.kubeflow.org`` (shared by both MPIJob versions)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def bucket(self) -> str:
        """The storage key: the resource, or the resource this kind is a view of."""
        return self.view_of or self.resource

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def group_version(self) -> str:
        return self.api_version

    def __str__(self) -> str:
        return f"{self.api_version}/{self.kind}"


# Not a job kind and not in any catalog: the CustomResourceDefinition objects of the served
# custom kinds, readable (list, watch, get) at /apis/apiextensions.k8s.io/v1/customresourcedefinitions.
CRD = KindSpec(
    "apiextensions.k8s.io",
    "v1",
    "CustomResourceDefinition",
    "customresourcedefinitions",
    "crd",
    namespaced=False,
    builtin=True,
)
BATCH_JOB = KindSpec("batch", "v1", "Job", "jobs", "batch", builtin=True, categories=("all",))
PYTORCHJOB = KindSpec(
    "kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", "kubeflow", replica_types=("Master", "Worker")
)
TFJOB = KindSpec("kubeflow.org", "v1", "TFJob", "tfjobs", "kubeflow", replica_types=("Chief", "PS", "Worker"))
MPIJOB_V1 = KindSpec(
    "kubeflow.org", "v1", "MPIJob", "mpijobs", "kubeflow", replica_types=("Launcher", "Worker")
)
XGBOOSTJOB = KindSpec(
    "kubeflow.org", "v1", "XGBoostJob", "xgboostjobs", "kubeflow", replica_types=("Master", "Worker")
)
PADDLEJOB = KindSpec(
    "kubeflow.org", "v1", "PaddleJob", "paddlejobs", "kubeflow", replica_types=("Master", "Worker")
)
JAXJOB = KindSpec("kubeflow.org", "v1", "JAXJob", "jaxjobs", "kubeflow", replica_types=("Worker",))
MPIJOB_V2BETA1 = KindSpec(
    "kubeflow.org", "v2beta1", "MPIJob", "mpijobs", "mpi-v2", replica_types=("Launcher", "Worker")
)
TRAINJOB = KindSpec("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs", "trainjob")
JOBSET = KindSpec("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", "jobset")
VOLCANO_JOB = KindSpec("batch.volcano.sh", "v1alpha1", "Job", "jobs", "volcano", short_names=("vcjob", "vj"))
RAYJOB = KindSpec("ray.io", "v1", "RayJob", "rayjobs", "ray", categories=("all",))

CATALOG: tuple[KindSpec, ...] = (
    BATCH_JOB,
    PYTORCHJOB,
    TFJOB,
    MPIJOB_V1,
    XGBOOSTJOB,
    PADDLEJOB,
    JAXJOB,
    MPIJOB_V2BETA1,
    TRAINJOB,
    JOBSET,
    VOLCANO_JOB,
    RAYJOB,
)
"""Every kind kubesim knows (note: both MPIJob versions; a cluster serves only one)."""

# ------------------------------------------------------------------ evidence kinds
# What diagnosis reads besides the jobs. Pods and Events are built in (every cluster serves them);
# Kueue and the two PodGroup kinds are CRDs a cluster has only when that scheduler is installed.
POD_FIELDS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
_EVENT_OBJECT_FIELDS = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
EVENT_FIELDS = (
    *(f"involvedObject.{f}" for f in _EVENT_OBJECT_FIELDS),
    "reason",
    "reportingComponent",
    "source",
    "type",
)
EVENT_V1_FIELDS = (
    *(f"regarding.{f}" for f in _EVENT_OBJECT_FIELDS),
    "reason",
    "reportingController",
    "source",
    "type",
)
POD = KindSpec(
    "",
    "v1",
    "Pod",
    "pods",
    "pod",
    builtin=True,
    short_names=("po",),
    categories=("all",),
    job=False,
    fields=POD_FIELDS,
    subresources=("status", "log"),
)
EVENT = KindSpec(
    "",
    "v1",
    "Event",
    "events",
    "event",
    builtin=True,
    short_names=("ev",),
    job=False,
    fields=EVENT_FIELDS,
    subresources=(),
)
EVENT_V1 = KindSpec(
    "events.k8s.io",
    "v1",
    "Event",
    "events",
    "event",
    builtin=True,
    short_names=("ev",),
    job=False,
    fields=EVENT_V1_FIELDS,
    view_of="events",
    subresources=(),
)
WORKLOAD = KindSpec(
    "kueue.x-k8s.io", "v1beta1", "Workload", "workloads", "kueue", short_names=("wl",), job=False
)
LOCAL_QUEUE = KindSpec(
    "kueue.x-k8s.io",
    "v1beta1",
    "LocalQueue",
    "localqueues",
    "kueue",
    short_names=("queue", "queues", "lq"),
    job=False,
)
CLUSTER_QUEUE = KindSpec(
    "kueue.x-k8s.io",
    "v1beta1",
    "ClusterQueue",
    "clusterqueues",
    "kueue",
    namespaced=False,
    short_names=("cq",),
    job=False,
)
VOLCANO_PODGROUP = KindSpec(
    "scheduling.volcano.sh",
    "v1beta1",
    "PodGroup",
    "podgroups",
    "volcano-podgroup",
    short_names=("pg", "podgroup-v1beta1"),
    job=False,
)
COSCHEDULING_PODGROUP = KindSpec(
    "scheduling.x-k8s.io",
    "v1alpha1",
    "PodGroup",
    "podgroups",
    "coscheduling-podgroup",
    short_names=("pg", "pgs"),
    job=False,
)

CORE_KINDS: tuple[KindSpec, ...] = (POD, EVENT, EVENT_V1)
"""Served by every simulated cluster (``add_cluster(core=False)`` leaves them out)."""
KUEUE_KINDS: tuple[KindSpec, ...] = (WORKLOAD, LOCAL_QUEUE, CLUSTER_QUEUE)
"""Kueue's CRDs (``add_cluster(kueue=True)``); the visibility API comes with them."""
EVIDENCE_CATALOG: tuple[KindSpec, ...] = (*CORE_KINDS, *KUEUE_KINDS, VOLCANO_PODGROUP, COSCHEDULING_PODGROUP)

ALL_KINDS: tuple[KindSpec, ...] = tuple(k for k in CATALOG if k is not MPIJOB_V1)
"""Every kind, with MPIJob served as ``kubeflow.org/v2beta1`` (mpi-operator)."""

ALL_KINDS_MPI_V1: tuple[KindSpec, ...] = tuple(k for k in CATALOG if k is not MPIJOB_V2BETA1)
"""Every kind, with MPIJob served as ``kubeflow.org/v1`` (training-operator)."""


def resolve_kind(
    name: str | KindSpec, served: Iterable[KindSpec] = (*CATALOG, *EVIDENCE_CATALOG)
) -> KindSpec:
    """Find a kind by spec, ``"PyTorchJob"``, ``"kubeflow.org/v1/PyTorchJob"``,
    ``"pytorchjobs"``, ``"pytorchjobs.kubeflow.org"`` or a short name, among ``served``.

    Ambiguous bare names (``"Job"``, ``"MPIJob"``) resolve to the first match in ``served``
    (the batch/v1 Job comes before the Volcano Job in the catalog).
    """
    if isinstance(name, KindSpec):
        return name
    lowered = name.lower()
    for spec in served:
        candidates = {
            str(spec).lower(),
            spec.kind.lower(),
            spec.plural,
            spec.resource,
            spec.singular,
            f"{spec.kind.lower()}.{spec.group}",
            f"{spec.kind.lower()}.{spec.version}.{spec.group}",
            *spec.short_names,
        }
        if lowered in candidates:
            return spec
    raise KeyError(f"unknown kind {name!r}")
