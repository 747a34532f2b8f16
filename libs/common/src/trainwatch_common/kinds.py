"""The catalog of job kinds Trainwatch knows, shared by every service.

A *kind key* is the stable lower-case name used in subjects, watch options and the API
("pytorchjob", "volcanojob", ...). It is needed because two kinds share the Kubernetes kind
name ``Job`` (batch/v1 and Volcano) and MPIJob is served as v1 or v2beta1 under one CRD.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class JobKind:
    key: str
    group: str
    version: str
    kind: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_path(self) -> str:
        """The path prefix of this kind's API group version: /apis/<group>/<version> or /api/v1."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"


BATCH_JOB = JobKind("job", "batch", "v1", "Job", "jobs")
PYTORCH_JOB = JobKind("pytorchjob", "kubeflow.org", "v1", "PyTorchJob", "pytorchjobs")
TF_JOB = JobKind("tfjob", "kubeflow.org", "v1", "TFJob", "tfjobs")
MPI_JOB_V1 = JobKind("mpijob", "kubeflow.org", "v1", "MPIJob", "mpijobs")
MPI_JOB_V2BETA1 = JobKind("mpijob", "kubeflow.org", "v2beta1", "MPIJob", "mpijobs")
XGBOOST_JOB = JobKind("xgboostjob", "kubeflow.org", "v1", "XGBoostJob", "xgboostjobs")
PADDLE_JOB = JobKind("paddlejob", "kubeflow.org", "v1", "PaddleJob", "paddlejobs")
JAX_JOB = JobKind("jaxjob", "kubeflow.org", "v1", "JAXJob", "jaxjobs")
TRAIN_JOB = JobKind("trainjob", "trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs")
JOBSET = JobKind("jobset", "jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets")
VOLCANO_JOB = JobKind("volcanojob", "batch.volcano.sh", "v1alpha1", "Job", "jobs")
RAY_JOB = JobKind("rayjob", "ray.io", "v1", "RayJob", "rayjobs")

# Every (group, version) Trainwatch can watch. MPIJob appears twice: a cluster serves one of the two.
ALL_JOB_KINDS: tuple[JobKind, ...] = (
    BATCH_JOB,
    PYTORCH_JOB,
    TF_JOB,
    MPI_JOB_V1,
    MPI_JOB_V2BETA1,
    XGBOOST_JOB,
    PADDLE_JOB,
    JAX_JOB,
    TRAIN_JOB,
    JOBSET,
    VOLCANO_JOB,
    RAY_JOB,
)

KIND_KEYS: frozenset[str] = frozenset(k.key for k in ALL_JOB_KINDS)


def kinds_for_key(key: str) -> tuple[JobKind, ...]:
    """All versions that answer to a kind key (two for "mpijob")."""
    return tuple(k for k in ALL_JOB_KINDS if k.key == key)


def kind_for(api_version: str, kind: str) -> JobKind | None:
    """The catalog entry for an object's apiVersion and kind, or None if Trainwatch does not watch it."""
    for entry in ALL_JOB_KINDS:
        if entry.api_version == api_version and entry.kind == kind:
            return entry
    return None
