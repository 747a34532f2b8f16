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
    "CRD",
    "JAXJOB",
    "JOBSET",
    "MPIJOB_V1",
    "MPIJOB_V2BETA1",
    "PADDLEJOB",
    "PYTORCHJOB",
    "RAYJOB",
    "TFJOB",
    "TRAINJOB",
    "VOLCANO_JOB",
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

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        """The storage key, e.g. ``pytorchjobs.kubeflow.org`` (shared by both MPIJob versions)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

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

ALL_KINDS: tuple[KindSpec, ...] = tuple(k for k in CATALOG if k is not MPIJOB_V1)
"""Every kind, with MPIJob served as ``kubeflow.org/v2beta1`` (mpi-operator)."""

ALL_KINDS_MPI_V1: tuple[KindSpec, ...] = tuple(k for k in CATALOG if k is not MPIJOB_V2BETA1)
"""Every kind, with MPIJob served as ``kubeflow.org/v1`` (training-operator)."""


def resolve_kind(name: str | KindSpec, served: Iterable[KindSpec] = CATALOG) -> KindSpec:
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
