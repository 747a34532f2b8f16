"""Diagnosis scenarios: every category on every kind it applies to, checked for consistency between
the ground truth, the job's status, its pods (found with the reference's selectors), Events, logs,
the Kueue visibility API and the PodGroups."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from reference_mapping import ReferenceNormalizer

import kubesim
from kubesim.selectors import parse_label_selector

Client = Any  # conftest.Client: conftest modules are not importable when suites run together

KINDS = [*kubesim.ALL_KINDS, kubesim.MPIJOB_V1]
CASES = [(k, c) for k in KINDS for c in kubesim.CATEGORIES if kubesim.applies(c, k)]
COSCHEDULED = [k for k in KINDS if kubesim.applies("GangWaiting", k, volcano=False)]
FAILED = {
    "OOMKilled",
    "ExitCode",
    "Preempted",
    "Evicted",
    "NodeFailure",
    "DeadlineExceeded",
    "BackoffLimitExceeded",
    "PodFailurePolicy",
    "Unknown",
}
_OPERATOR = {
    "PyTorchJob": "pytorchjob-controller",
    "TFJob": "tfjob-controller",
    "XGBoostJob": "xgboostjob-controller",
    "PaddleJob": "paddlejob-controller",
    "JAXJob": "jaxjob-controller",
    "MPIJob": "mpijob-controller",
}
# The reference's cluster-wide selector of plain batch Jobs' pods (diagnosis.md §1.2).
PLAIN_JOB_PODS = (
    "batch.kubernetes.io/controller-uid,!jobset.sigs.k8s.io/jobset-name,"
    "!training.kubeflow.org/job-name,!ray.io/originated-from-crd"
)


def test_every_category_has_scenarios_for_the_kinds_it_applies_to() -> None:
    by_category = {c: [str(k) for k, cat in CASES if cat == c] for c in kubesim.CATEGORIES}
    assert all(by_category.values())
    assert len(by_category["OOMKilled"]) == len(KINDS)
    assert "batch/v1/Job" not in by_category["GangWaiting"]
    assert "batch.volcano.sh/v1alpha1/Job" in by_category["GangWaiting"]
    assert "kubeflow.org/v2beta1/MPIJob" in by_category["QueueWaiting"]  # mpi-operator's v2beta1 only
    assert "kubeflow.org/v1/MPIJob" not in by_category["QueueWaiting"]
    assert "batch.volcano.sh/v1alpha1/Job" not in by_category["QueueWaiting"]
    assert set(by_category["PodFailurePolicy"]) == {
        "batch/v1/Job",
        "jobset.x-k8s.io/v1alpha2/JobSet",
        "trainer.kubeflow.org/v1alpha1/TrainJob",
        "batch.volcano.sh/v1alpha1/Job",
    }
    assert len(CASES) > 150


def _selectors(truth: kubesim.DiagnosisTruth, job: dict[str, Any]) -> list[str]:
    name, uid = truth.name, truth.uid
    if truth.api_version == "batch/v1":
        return [f"batch.kubernetes.io/controller-uid={uid}"]
    if truth.api_version == "kubeflow.org/v2beta1":
        return [f"training.kubeflow.org/operator-name=mpi-operator,training.kubeflow.org/job-name={name}"]
    if truth.api_version == "kubeflow.org/v1":
        return [
            f"training.kubeflow.org/operator-name={_OPERATOR[truth.kind]},training.kubeflow.org/job-name={name}"
        ]
    if truth.kind in ("JobSet", "TrainJob"):
        return [f"jobset.sigs.k8s.io/jobset-name={name}"]
    if truth.kind == "RayJob":
        cluster = (job.get("status") or {}).get("rayClusterName") or f"{name}-"
        return [
            f"ray.io/cluster={cluster}",
            f"batch.kubernetes.io/job-name={name},ray.io/originated-from-crd=RayJob",
        ]
    return [f"volcano.sh/job-name={name}"]


def _job_pods(
    cluster: kubesim.Cluster, truth: kubesim.DiagnosisTruth, job: dict[str, Any]
) -> list[dict[str, Any]]:
    pods = cluster.store.list_objects(kubesim.POD, truth.namespace)
    found: dict[str, dict[str, Any]] = {}
    for raw in _selectors(truth, job):
        sel = parse_label_selector(raw)
        found.update(
            {p["metadata"]["name"]: p for p in pods if sel.matches(p["metadata"].get("labels") or {})}
        )
    return list(found.values())


def _expected_state(
    cluster: kubesim.Cluster, job: dict[str, Any], pods: list[dict[str, Any]]
) -> tuple[Any, ...]:
    """The reference's reading of the job (§3.3 of job-status-and-feishu.md), with the rows that
    need more than the job: Kueue's Queued (§2.7), a Kubeflow job's pending pods, a TrainJob whose
    node step is not fully ready."""
    norm = ReferenceNormalizer()
    if job["kind"] == "TrainJob" and cluster.store.serves(kubesim.JOBSET):
        js = cluster.store.get(kubesim.JOBSET, job["metadata"]["namespace"], job["metadata"]["name"])
        norm.jobsets[(job["metadata"]["namespace"], job["metadata"]["name"])] = js
    state = norm.state(job)
    labels = job["metadata"].get("labels") or {}
    specd = job.get("spec") or {}
    suspended = specd.get("suspend") or (specd.get("runPolicy") or {}).get("suspend")
    if "kueue.x-k8s.io/queue-name" in labels and suspended and not state[2]:
        return ("Pending", "Queued", False)
    pending = any(p["status"].get("phase") == "Pending" for p in pods)
    if job["apiVersion"].startswith("kubeflow.org/") and state == ("Pending", "Created", False) and pending:
        return ("Pending", "Scheduling", False)
    if job["kind"] == "TrainJob" and state == ("Running", None, False):
        node = next(j for j in job["status"]["jobsStatus"] if j["name"] == "node")
        if node["ready"] < node["active"]:
            return ("Pending", "Scheduling", False)
    return state


def _container(pod: dict[str, Any], name: str | None) -> dict[str, Any]:
    return next(c for c in pod["status"].get("containerStatuses", []) if c["name"] == name)


def _check_pod_evidence(truth: kubesim.DiagnosisTruth, pod: dict[str, Any]) -> None:
    c = truth.category
    st = pod["status"]
    conds = {x["type"]: x for x in st.get("conditions", [])}
    if c == "Unschedulable":
        assert "nodeName" not in pod["spec"]
        assert conds["PodScheduled"]["status"] == "False"
        assert conds["PodScheduled"]["reason"] == "Unschedulable"
        assert f"Insufficient {truth.resource}" in conds["PodScheduled"]["message"]
        assert conds["PodScheduled"]["message"].startswith(
            "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."
        )
        return
    assert pod["spec"]["nodeName"] == truth.node
    cs = _container(pod, truth.container)
    state, last = cs["state"], cs["lastState"]
    if c in ("OOMKilled", "ExitCode", "PodFailurePolicy", "Preempted", "Evicted", "NodeFailure"):
        assert st["phase"] == "Failed"
        assert pod["spec"]["restartPolicy"] == "Never"  # a pod that restarts in place never fails
        assert state["terminated"]["exitCode"] == truth.exit_code
    if c == "CrashLoop" or (c == "BackoffLimitExceeded" and cs["restartCount"] > 0):
        assert pod["spec"]["restartPolicy"] in ("OnFailure", "Always")
    if c == "OOMKilled":
        assert state["terminated"]["reason"] == "OOMKilled"
    if c == "ExitCode":
        assert state["terminated"]["reason"] == "Error"
    if c == "Preempted":
        assert conds["DisruptionTarget"]["reason"] == "PreemptionByScheduler"
    if c == "Evicted":
        assert st["reason"] == "Evicted"
        assert st["message"].startswith("The node was low on resource: memory.")
        assert conds["DisruptionTarget"]["reason"] == "TerminationByKubelet"
    if c == "NodeFailure":
        assert conds["DisruptionTarget"]["reason"] == "DeletionByPodGC"
        assert state["terminated"]["reason"] == "ContainerStatusUnknown"
    if c == "CrashLoop":
        assert st["phase"] == "Running"
        assert state["waiting"]["reason"] == "CrashLoopBackOff"
        assert last["terminated"]["exitCode"] == 1
        assert cs["restartCount"] == 5
    if c == "ImagePullFailed":
        assert state["waiting"]["reason"] == "ImagePullBackOff"
        assert cs["image"] == truth.extra["image"]
    if c == "ConfigError":
        assert state["waiting"]["reason"] == "CreateContainerConfigError"
    if c == "BackoffLimitExceeded":
        attempt = state.get("terminated") or last.get("terminated")
        assert attempt["exitCode"] == 1


async def _check(
    cluster: kubesim.Cluster, client: Client, driver: kubesim.ScenarioDriver, truth: kubesim.DiagnosisTruth
) -> None:
    spec = kubesim.resolve_kind(f"{truth.api_version}/{truth.kind}")
    job = cluster.store.get(spec, truth.namespace, truth.name)
    assert job["metadata"]["uid"] == truth.uid
    assert truth.blame == kubesim.BLAME[truth.category]
    # The TruthLog: one created entry, transitions only on change, growing resourceVersions.
    entries = [e for e in driver.truth if e.uid == truth.uid]
    assert entries[0].change == "created"
    for a, b in itertools.pairwise(entries):
        assert a.state != b.state
        assert int(a.resource_version) < int(b.resource_version)
    assert (entries[-1].phase, entries[-1].sub_phase, entries[-1].terminal) == (
        truth.phase,
        truth.sub_phase,
        truth.terminal,
    )
    pods = _job_pods(cluster, truth, job)
    assert (truth.phase, truth.sub_phase, truth.terminal) == _expected_state(cluster, job, pods)
    if truth.category in FAILED and "variant" not in truth.extra:
        assert (truth.phase, truth.terminal) == ("Failed", True)
    else:
        assert not truth.terminal
        assert truth.phase in ("Pending", "Running")
    # Every pod is owned by the job or one of its child objects, and found by the reference's selector.
    for p in pods:
        owners = [o for o in p["metadata"]["ownerReferences"] if o.get("controller")]
        assert len(owners) == 1
        assert owners[0]["kind"] in (truth.kind, "Job", "RayCluster")
    plain = parse_label_selector(PLAIN_JOB_PODS)
    assert all(plain.matches(p["metadata"]["labels"]) == (truth.api_version == "batch/v1") for p in pods)
    if truth.pod is not None:
        pod = next(p for p in pods if p["metadata"]["name"] == truth.pod)
        _check_pod_evidence(truth, pod)
    if truth.category in ("QuotaExceeded", "QueueWaiting", "Unknown", "DeadlineExceeded"):
        assert pods == []
    if truth.extra.get("variant") == "kueue":
        assert pods == []  # Kueue suspended the job: its pods are gone
        wl = cluster.store.get(kubesim.WORKLOAD, truth.namespace, truth.extra["workload"])
        conds = {c["type"]: c for c in wl["status"]["conditions"]}
        assert (conds["Evicted"]["status"], conds["Evicted"]["reason"]) == ("True", "Preempted")
        assert (conds["Preempted"]["status"], conds["Preempted"]["reason"]) == ("True", "InClusterQueue")
        assert conds["Evicted"]["message"] == truth.message
        assert conds["QuotaReserved"]["status"] == conds["Admitted"]["status"] == "False"
        assert "admission" not in wl["status"]
    if truth.category == "GangWaiting":
        assert pods
        assert all(p["status"]["phase"] == "Pending" for p in pods)
        pg_kind = (
            kubesim.VOLCANO_PODGROUP if truth.extra["gang"] == "volcano" else kubesim.COSCHEDULING_PODGROUP
        )
        pg = cluster.store.get(pg_kind, truth.namespace, truth.extra["podgroup"])
        assert pg["spec"]["minMember"] == len(pods) == truth.extra["min_member"]
        assert pg["status"]["phase"] in ("Inqueue", "Scheduling")
        if pg_kind is kubesim.VOLCANO_PODGROUP:
            assert pg["status"]["conditions"][0]["message"] == truth.message
            assert all(
                p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == pg["metadata"]["name"]
                for p in pods
            )
        else:
            assert all(
                p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == pg["metadata"]["name"]
                for p in pods
            )
    # Warning events about the job, its pods, its children: the truth names their reasons.
    _, events = await client.get("/api/v1/events", fieldSelector="type=Warning")
    assert set(truth.warnings) <= {e["reason"] for e in events["items"]}
    abnormal = {"ImagePullFailed": "ImagePullBackOff", "ConfigError": "CreateContainerConfigError"}
    abnormal.update(Unschedulable="Unschedulable", CrashLoop="CrashLoopBackOff")
    if truth.api_version == "kubeflow.org/v1" and truth.category in abnormal:
        _, on_job = await client.get(
            f"/api/v1/namespaces/{truth.namespace}/events",
            fieldSelector=f"involvedObject.uid={truth.uid},type=Warning",
        )
        [ev] = [e for e in on_job["items"] if e["reason"] == abnormal[truth.category]]
        assert ev["message"].startswith(f"Error pod {truth.pod} ")  # RecordAbnormalPods
        assert ev["source"]["component"] == f"{truth.kind.lower()}-controller"
    if truth.category == "QuotaExceeded":
        assert any("exceeded quota" in e["message"] and e["reason"] == truth.reason for e in events["items"])
    if truth.pod is not None:
        _, about = await client.get(
            f"/api/v1/namespaces/{truth.namespace}/events", fieldSelector=f"involvedObject.name={truth.pod}"
        )
        if truth.category in ("ImagePullFailed", "ConfigError", "Unschedulable", "CrashLoop", "Evicted"):
            assert {e["reason"] for e in about["items"] if e["type"] == "Warning"}
    # The log tail the truth names is what pods/log answers.
    if truth.log_tail:
        params = {"container": str(truth.container), "tailLines": str(len(truth.log_tail))}
        if truth.previous_log:
            params["previous"] = "true"
        code, text = await client.get(f"/api/v1/namespaces/{truth.namespace}/pods/{truth.pod}/log", **params)
        assert code == 200
        assert text == "".join(f"{line}\n" for line in truth.log_tail)
        if truth.log_secret:
            assert truth.log_secret in text
    if truth.queue is not None:
        base = "/apis/visibility.kueue.x-k8s.io/v1beta1"
        _, cq = await client.get(f"{base}/clusterqueues/{truth.cluster_queue}/pendingworkloads")
        mine = [i for i in cq["items"] if i["metadata"]["ownerReferences"][0]["uid"] == truth.uid]
        assert [(i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in mine] == [
            (truth.position, truth.local_position)
        ]
        _, lq = await client.get(
            f"{base}/namespaces/{truth.namespace}/localqueues/{truth.queue}/pendingworkloads"
        )
        assert truth.uid in {i["metadata"]["ownerReferences"][0]["uid"] for i in lq["items"]}
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == truth.queue
        wl = cluster.store.get(kubesim.WORKLOAD, truth.namespace, truth.extra["workload"])
        assert wl["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == truth.uid
        reserved = next(c for c in wl["status"]["conditions"] if c["type"] == "QuotaReserved")
        assert reserved["status"] == "False"
    if truth.extra.get("variant") == "after-queue":
        wl = cluster.store.get(kubesim.WORKLOAD, truth.namespace, truth.extra["workload"])
        conds = {c["type"]: c["status"] for c in wl["status"]["conditions"]}
        assert conds["QuotaReserved"] == conds["Admitted"] == "True"
        assert wl["status"]["admission"]["clusterQueue"] == "team-gpu"
    if truth.category == "BackoffLimitExceeded":
        assert truth.cause == "ExitCode"
        assert truth.extra["attempts"] > 1
    if truth.exit_code is not None and truth.exit_code > 128:
        assert truth.signal == truth.exit_code - 128


@pytest.fixture
def diag_cluster(sim: kubesim.Simulator) -> Callable[..., Any]:
    async def make(kind: kubesim.KindSpec, *, gang: str = "volcano") -> kubesim.Cluster:
        kinds = kubesim.ALL_KINDS_MPI_V1 if kind is kubesim.MPIJOB_V1 else kubesim.ALL_KINDS
        return await sim.add_cluster(
            "d",
            tls=False,
            kinds=kinds,
            seed=11,
            kueue=True,
            volcano_podgroups=gang == "volcano",
            coscheduling=gang == "coscheduling",
        )

    return make


@pytest.mark.parametrize(("kind", "category"), CASES, ids=[f"{k.kind}-{k.version}-{c}" for k, c in CASES])
async def test_scenario_is_consistent(
    diag_cluster: Callable[..., Any],
    make_client: Callable[..., Client],
    kind: kubesim.KindSpec,
    category: str,
) -> None:
    cluster = await diag_cluster(kind)
    driver = kubesim.ScenarioDriver(cluster, seed=11, rate=None)
    truth = await driver.run_diagnosis(kind, category)
    assert (truth.kind, truth.api_version, truth.category) == (kind.kind, kind.api_version, category)
    assert driver.diagnoses == [truth]
    await _check(cluster, make_client(cluster), driver, truth)


@pytest.mark.parametrize("kind", COSCHEDULED, ids=str)
async def test_gang_waiting_with_scheduler_plugins(
    diag_cluster: Callable[..., Any], make_client: Callable[..., Client], kind: kubesim.KindSpec
) -> None:
    cluster = await diag_cluster(kind, gang="coscheduling")
    driver = kubesim.ScenarioDriver(cluster, seed=3, rate=None)
    truth = await driver.run_diagnosis(kind, "GangWaiting")
    assert truth.extra["gang"] == "coscheduling"
    await _check(cluster, make_client(cluster), driver, truth)


async def test_pytorchjob_worker_oom_then_failed(
    sim: kubesim.Simulator, make_client: Callable[..., Client]
) -> None:
    cluster = await sim.add_cluster("c", tls=False, seed=1)
    driver = kubesim.ScenarioDriver(cluster, seed=1, rate=None)
    truth = await driver.run_diagnosis("PyTorchJob", "OOMKilled", name="train-llm")
    assert (truth.role, truth.pod, truth.container) == ("Worker", "train-llm-worker-3", "pytorch")
    assert (truth.exit_code, truth.signal, truth.reason) == (137, 9, "OOMKilled")
    assert truth.node is not None
    assert truth.node.startswith("gpu-node-")
    assert (truth.phase, truth.terminal) == ("Failed", True)
    job = cluster.store.get("PyTorchJob", "default", "train-llm")
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["message"] == "PyTorchJob train-llm is failed because 1 Worker replica(s) failed."
    assert job["status"]["replicaStatuses"]["Worker"]["failed"] == 1
    pod = cluster.store.get(kubesim.POD, "default", "train-llm-worker-3")
    labels = pod["metadata"]["labels"]
    assert labels["training.kubeflow.org/replica-type"] == "worker"
    assert labels["training.kubeflow.org/replica-index"] == "3"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    master = cluster.store.get(kubesim.POD, "default", "train-llm-master-0")
    assert master["metadata"]["labels"]["training.kubeflow.org/job-role"] == "master"
    assert [(e.change, e.phase) for e in driver.truth] == [
        ("created", "Pending"),
        ("transition", "Running"),
        ("transition", "Failed"),
    ]


async def test_a_jobset_past_its_deadline_says_so_on_its_first_failed_child_job(
    diag_cluster: Callable[..., Any], make_client: Callable[..., Client]
) -> None:
    """The JobSet says only FailedJobs (first failed job: <child>); the child Job has the Failed
    condition DeadlineExceeded and, as the job controller writes on every Job it fails, a Warning
    with that reason and message (reference §3.4, §3.1, §5)."""
    cluster = await diag_cluster(kubesim.JOBSET)
    driver = kubesim.ScenarioDriver(cluster, seed=11, rate=None)
    truth = await driver.run_diagnosis(kubesim.JOBSET, "DeadlineExceeded")
    jobset = cluster.store.get(kubesim.JOBSET, truth.namespace, truth.name)
    failed = next(c for c in jobset["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "FailedJobs"
    child = failed["message"].rsplit("first failed job: ", 1)[1].rstrip(")")
    child_job = cluster.store.get(kubesim.BATCH_JOB, truth.namespace, child)
    child_failed = next(c for c in child_job["status"]["conditions"] if c["type"] == "Failed")
    assert child_failed["reason"] == "DeadlineExceeded"
    _, events = await make_client(cluster).get(
        f"/api/v1/namespaces/{truth.namespace}/events",
        fieldSelector=f"involvedObject.name={child},type=Warning",
    )
    [warning] = events["items"]
    assert (warning["involvedObject"]["kind"], warning["reason"]) == ("Job", "DeadlineExceeded")
    assert warning["message"] == child_failed["message"] == "Job was active longer than specified deadline"
    assert warning["source"]["component"] == "job-controller"


async def test_not_applicable_and_unknown(sim: kubesim.Simulator) -> None:
    cluster = await sim.add_cluster("c", tls=False)
    driver = kubesim.ScenarioDriver(cluster, rate=None)
    with pytest.raises(kubesim.NotApplicable):
        await driver.run_diagnosis("Job", "GangWaiting")
    with pytest.raises(kubesim.NotApplicable):
        await driver.run_diagnosis("PyTorchJob", "QueueWaiting")  # no Kueue on this cluster
    with pytest.raises(KeyError):
        await driver.run_diagnosis("PyTorchJob", "Sunspots")
    assert ("PyTorchJob", "QueueWaiting") not in {(k.kind, c) for k, c in kubesim.diagnosis_cases(cluster)}
    assert ("PyTorchJob", "OOMKilled") in {(k.kind, c) for k, c in kubesim.diagnosis_cases(cluster)}


async def test_scenarios_are_seeded(sim: kubesim.Simulator) -> None:
    runs = []
    for name in ("a", "b"):
        cluster = await sim.add_cluster(name, tls=False, seed=4, kueue=True, volcano_podgroups=True)
        driver = kubesim.ScenarioDriver(cluster, seed=4, rate=None)
        truths = [await driver.run_diagnosis(k, c) for k, c in kubesim.diagnosis_cases(cluster)[:40]]
        runs.append([{**t.as_dict(), "cluster": "", "since": ""} for t in truths])
    assert runs[0] == runs[1]


KUEUE_KINDS = [k for k in KINDS if kubesim.applies("QueueWaiting", k)]
VARIANT_CASES = [(k, c, v) for k in KUEUE_KINDS for c, v in sorted(kubesim.DIAGNOSIS_VARIANTS)]


@pytest.mark.parametrize(
    ("kind", "category", "variant"), VARIANT_CASES, ids=[f"{k.kind}-{c}-{v}" for k, c, v in VARIANT_CASES]
)
async def test_variants_are_consistent(
    diag_cluster: Callable[..., Any],
    make_client: Callable[..., Client],
    kind: kubesim.KindSpec,
    category: str,
    variant: str,
) -> None:
    cluster = await diag_cluster(kind)
    driver = kubesim.ScenarioDriver(cluster, seed=5, rate=None)
    truth = await driver.run_diagnosis(kind, category, variant=variant)
    assert truth.extra["variant"] == variant
    await _check(cluster, make_client(cluster), driver, truth)
    states = [(e.phase, e.sub_phase) for e in driver.truth if e.uid == truth.uid]
    assert states[0] == ("Pending", "Queued")  # Kueue-managed from creation
    if variant == "kueue":
        assert ("Running", None) in states
        assert states[-1] == ("Pending", "Queued")  # back in the queue, not Failed
        assert truth.blame == "policy"
        assert truth.position is not None
    else:
        earlier = driver.diagnoses[0]
        assert driver.diagnoses == [earlier, truth]
        assert (earlier.category, earlier.phase, earlier.sub_phase) == ("QueueWaiting", "Pending", "Queued")
        assert earlier.uid == truth.uid
        assert truth.phase in ("Pending", "Running")
        assert truth.resource == "nvidia.com/gpu"


async def test_variants_need_kueue(sim: kubesim.Simulator) -> None:
    cluster = await sim.add_cluster("c", tls=False)
    driver = kubesim.ScenarioDriver(cluster, rate=None)
    with pytest.raises(kubesim.NotApplicable):
        await driver.run_diagnosis("Job", "Preempted", variant="kueue")
    with pytest.raises(KeyError):
        await driver.run_diagnosis("Job", "OOMKilled", variant="kueue")
