"""Which normalizer reads which kind: the one entry point the watcher calls."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Protocol

from trainwatch_common import kinds as catalog
from trainwatch_common.kinds import JobKind
from trainwatch_watcher.kinds import batch, jobset, kubeflow_v1, mpi_v2beta1, ray, trainjob, volcano
from trainwatch_watcher.kinds.model import NormalizedStatus


class Normalizer(Protocol):
    """``normalize(obj, previous, related=None)`` of one kind family.

    ``previous`` is the last status computed for the same uid (None on first sight). ``related`` is
    an optional companion object: the JobSet of a TrainJob, the PodGroup of a Volcano or gang
    scheduled Kubeflow job; the other families ignore it.
    """

    def __call__(
        self,
        obj: Mapping[str, Any],
        previous: NormalizedStatus | None,
        related: Mapping[str, Any] | None = None,
    ) -> NormalizedStatus: ...


_NORMALIZERS: Mapping[JobKind, Normalizer] = MappingProxyType(
    {
        catalog.BATCH_JOB: batch.normalize,
        catalog.PYTORCH_JOB: kubeflow_v1.normalize,
        catalog.TF_JOB: kubeflow_v1.normalize,
        catalog.MPI_JOB_V1: kubeflow_v1.normalize,
        catalog.XGBOOST_JOB: kubeflow_v1.normalize,
        catalog.PADDLE_JOB: kubeflow_v1.normalize,
        catalog.JAX_JOB: kubeflow_v1.normalize,
        catalog.MPI_JOB_V2BETA1: mpi_v2beta1.normalize,
        catalog.TRAIN_JOB: trainjob.normalize,
        catalog.JOBSET: jobset.normalize,
        catalog.VOLCANO_JOB: volcano.normalize,
        catalog.RAY_JOB: ray.normalize,
    }
)


DecisionInputs = Callable[[Mapping[str, Any]], bytes | None]

# Kinds whose normalizer has a cheap ``decision_inputs`` (see kubeflow_v1.decision_inputs): equal
# inputs for a uid mean an equal trimmed status, so the watcher may skip normalizing.
_DECISION_INPUTS: Mapping[JobKind, DecisionInputs] = MappingProxyType(
    {
        kind: kubeflow_v1.decision_inputs
        for kind in (
            catalog.PYTORCH_JOB,
            catalog.TF_JOB,
            catalog.MPI_JOB_V1,
            catalog.XGBOOST_JOB,
            catalog.PADDLE_JOB,
            catalog.JAX_JOB,
        )
    }
)


def decision_inputs_for(kind: JobKind) -> DecisionInputs | None:
    """The kind's decision-inputs reader, or None when every observation must be normalized."""
    return _DECISION_INPUTS.get(kind)


def normalizer_for(kind: JobKind) -> Normalizer:
    """The normalizer of a catalog kind; LookupError for a kind outside the catalog."""
    try:
        return _NORMALIZERS[kind]
    except KeyError:
        raise LookupError(f"no normalizer for {kind.api_version} {kind.kind}") from None


def normalize_object(
    kind: JobKind,
    obj: Mapping[str, Any],
    previous: NormalizedStatus | None,
    *,
    related: Mapping[str, Any] | None = None,
) -> NormalizedStatus:
    """Normalize one object of ``kind``. Raises MalformedObject when it cannot be read at all;
    any value it does not know becomes Phase.Unknown instead."""
    return normalizer_for(kind)(obj, previous, related)
