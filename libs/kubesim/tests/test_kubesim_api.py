"""The public surface other suites build on stays importable and documented."""

from __future__ import annotations

from pathlib import Path

import kubesim


def test_exported_names_exist_and_are_documented() -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    for name in kubesim.__all__:
        assert hasattr(kubesim, name), name
        assert name in readme, f"{name} is not in the README"


def test_catalog_matches_the_reference() -> None:
    assert {str(k) for k in kubesim.CATALOG} == {
        "batch/v1/Job",
        "kubeflow.org/v1/PyTorchJob",
        "kubeflow.org/v1/TFJob",
        "kubeflow.org/v1/MPIJob",
        "kubeflow.org/v1/XGBoostJob",
        "kubeflow.org/v1/PaddleJob",
        "kubeflow.org/v1/JAXJob",
        "kubeflow.org/v2beta1/MPIJob",
        "trainer.kubeflow.org/v1alpha1/TrainJob",
        "jobset.x-k8s.io/v1alpha2/JobSet",
        "batch.volcano.sh/v1alpha1/Job",
        "ray.io/v1/RayJob",
    }
    assert kubesim.MPIJOB_V1.resource == kubesim.MPIJOB_V2BETA1.resource == "mpijobs.kubeflow.org"
    assert kubesim.MPIJOB_V1 not in kubesim.ALL_KINDS
    assert kubesim.MPIJOB_V2BETA1 not in kubesim.ALL_KINDS_MPI_V1
