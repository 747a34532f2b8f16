"""kubesim: a faithful Kubernetes API simulator for tests, benchmarks and the demo.

    async with kubesim.Simulator() as sim:
        alpha = await sim.add_cluster("alpha", kinds=kubesim.ALL_KINDS, tls=True)
        alpha.write_kubeconfig(path)
        driver = kubesim.ScenarioDriver(alpha, seed=1, rate=500)
        await driver.run_lifecycle("PyTorchJob", outcome="failed")
        driver.truth

See ``libs/kubesim/README.md``.
"""

from kubesim.accounts import (
    ACCOUNT_KINDS,
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
    NAMESPACE,
    SECRET,
    SERVICE_ACCOUNT,
    SERVICE_ACCOUNT_TOKEN_TYPE,
    Accounts,
)
from kubesim.background import BackgroundSimulator
from kubesim.cluster import Cluster
from kubesim.diagnosis import BLAME, CATEGORIES, DiagnosisTruth, NotApplicable, applies
from kubesim.diagnosis_scenarios import VARIANTS as DIAGNOSIS_VARIANTS
from kubesim.diagnosis_scenarios import cases as diagnosis_cases
from kubesim.errors import ApiError
from kubesim.events import Recorder
from kubesim.faults import Faults
from kubesim.kinds import (
    ALL_KINDS,
    ALL_KINDS_MPI_V1,
    BATCH_JOB,
    CATALOG,
    CLUSTER_QUEUE,
    CORE_KINDS,
    COSCHEDULING_PODGROUP,
    CRD,
    EVENT,
    EVENT_V1,
    JAXJOB,
    JOBSET,
    KUEUE_KINDS,
    LOCAL_QUEUE,
    MPIJOB_V1,
    MPIJOB_V2BETA1,
    PADDLEJOB,
    POD,
    PYTORCHJOB,
    RAYJOB,
    TFJOB,
    TRAINJOB,
    VOLCANO_JOB,
    VOLCANO_PODGROUP,
    WORKLOAD,
    XGBOOSTJOB,
    KindSpec,
    resolve_kind,
)
from kubesim.kueue import workload_body as kueue_workload
from kubesim.manifests import manifest
from kubesim.scenarios import Options, ScenarioDriver
from kubesim.simulator import Simulator
from kubesim.store import Backup, Store
from kubesim.truth import PHASES, NormState, TruthEntry, TruthLog

__all__ = [
    "ACCOUNT_KINDS",
    "ALL_KINDS",
    "ALL_KINDS_MPI_V1",
    "BATCH_JOB",
    "BLAME",
    "CATALOG",
    "CATEGORIES",
    "CLUSTER_QUEUE",
    "CLUSTER_ROLE",
    "CLUSTER_ROLE_BINDING",
    "CORE_KINDS",
    "COSCHEDULING_PODGROUP",
    "CRD",
    "DIAGNOSIS_VARIANTS",
    "EVENT",
    "EVENT_V1",
    "JAXJOB",
    "JOBSET",
    "KUEUE_KINDS",
    "LOCAL_QUEUE",
    "MPIJOB_V1",
    "MPIJOB_V2BETA1",
    "NAMESPACE",
    "PADDLEJOB",
    "PHASES",
    "POD",
    "PYTORCHJOB",
    "RAYJOB",
    "SECRET",
    "SERVICE_ACCOUNT",
    "SERVICE_ACCOUNT_TOKEN_TYPE",
    "TFJOB",
    "TRAINJOB",
    "VOLCANO_JOB",
    "VOLCANO_PODGROUP",
    "WORKLOAD",
    "XGBOOSTJOB",
    "Accounts",
    "ApiError",
    "BackgroundSimulator",
    "Backup",
    "Cluster",
    "DiagnosisTruth",
    "Faults",
    "KindSpec",
    "NormState",
    "NotApplicable",
    "Options",
    "Recorder",
    "ScenarioDriver",
    "Simulator",
    "Store",
    "TruthEntry",
    "TruthLog",
    "applies",
    "diagnosis_cases",
    "kueue_workload",
    "manifest",
    "resolve_kind",
]
