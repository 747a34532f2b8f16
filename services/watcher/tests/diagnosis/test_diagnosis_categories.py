"""Every category of the vocabulary, for every job kind it applies to (reference diagnosis.md §9)."""

from __future__ import annotations

from typing import Any

import pytest
from diagnosis_testkit import (
    NOW,
    KindCase,
    at,
    case_id,
    condition,
    container_status,
    core_event,
    disruption,
    failed_condition,
    job,
    kind_cases,
    new_event,
    pod,
    run,
    running,
    sp_podgroup,
    terminated,
    ts,
    unschedulable,
    volcano_podgroup,
    waiting,
    workload,
)

from trainwatch_common.events.diagnosis import Blame, DiagnosisCategory
from trainwatch_common.events.jobs import Phase, SubPhase

C = DiagnosisCategory
CASES = kind_cases()
ALL_KINDS = pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
# Kueue integrates every kind but Volcano Job (reference §4.1).
KUEUE_CASES = [c for c in CASES if c.kind != "volcanojob"]


def failed(case: KindCase) -> Any:
    conditions = [failed_condition(case.failed_reason, case.failed_message)] if case.failed_reason else []
    return job(
        case.kind,
        Phase.FAILED,
        conditions=conditions,
        reason=case.failed_reason or None,
        message=case.failed_message or None,
        api_version=case.api_version,
    )


def failing_pod(case: KindCase, state: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    last = kwargs.pop("last", None)
    restarts = kwargs.pop("restarts", 0)
    return pod(
        case.pod_name,
        case.labels,
        container_name=case.container,
        containers=[container_status(case.container, state, last=last, restarts=restarts)],
        **kwargs,
    )


def check_pod(diagnosis: Any, case: KindCase) -> None:
    assert diagnosis.pod == case.pod_name
    assert diagnosis.role == case.role
    assert diagnosis.replica_index == case.index
    assert diagnosis.container == case.container
    assert diagnosis.node == "gpu-node-7"


# --- OOMKilled ---------------------------------------------------------------------------------


@ALL_KINDS
def test_oomkilled_container_of_a_failed_job(case: KindCase) -> None:
    p = failing_pod(case, terminated("OOMKilled", 137, finished=12), phase="Failed")
    d = run(failed(case), [p])
    assert d is not None
    assert d.category is C.OOM_KILLED
    assert d.blame is Blame.USER_CONFIG
    assert (d.exit_code, d.signal) == (137, 9)
    assert d.since == at(12)
    check_pod(d, case)
    assert "out of memory" in d.summary
    assert "\n" not in d.summary


@ALL_KINDS
def test_oomkilled_in_last_state_while_crash_looping_is_oomkilled(case: KindCase) -> None:
    p = failing_pod(
        case,
        waiting(
            "CrashLoopBackOff",
            f"back-off 5m0s restarting failed container={case.container} pod={case.pod_name}",
        ),
        last=terminated("OOMKilled", 137, finished=30),
        restarts=6,
    )
    d = run(job(case.kind, Phase.RUNNING, api_version=case.api_version), [p])
    assert d is not None
    assert d.category is C.OOM_KILLED
    assert d.restarts == 6
    check_pod(d, case)


def test_kubeflow_oomkilled_event_explains_a_failed_job_whose_pods_are_gone() -> None:
    event = core_event(
        "OOMKilled",
        "Error pod bert-worker-1 container pytorch exitCode: 137 terminated message: ",
        kind="PyTorchJob",
        name="bert",
    )
    reason, message = (
        "PyTorchJobFailed",
        "Job bert has failed because it has reached the specified backoff limit",
    )
    d = run(job("pytorchjob", Phase.FAILED, conditions=[failed_condition(reason, message)]), [], [event])
    assert d is not None
    assert d.category is C.OOM_KILLED
    assert (d.pod, d.container, d.exit_code) == ("bert-worker-1", "pytorch", 137)
    assert d.events[0].reason == "OOMKilled"
    assert d.events[0].object == "PyTorchJob/bert"


# --- ExitCode, CrashLoop ------------------------------------------------------------------------


@ALL_KINDS
def test_non_zero_exit_of_a_failed_job(case: KindCase) -> None:
    p = failing_pod(
        case, terminated("Error", 1, finished=15, message="Traceback: KeyError 'label'"), phase="Failed"
    )
    d = run(failed(case), [p])
    assert d is not None
    assert d.category is C.EXIT_CODE
    assert d.blame is Blame.USER_CODE
    assert (d.exit_code, d.signal) == (1, None)
    check_pod(d, case)
    assert "exited with code 1" in d.summary


def test_segfault_exit_code_gives_the_signal() -> None:
    case = CASES[0]
    p = failing_pod(case, terminated("Error", 139), phase="Failed")
    d = run(failed(case), [p])
    assert d is not None
    assert (d.category, d.exit_code, d.signal) == (C.EXIT_CODE, 139, 11)
    assert "SIGSEGV" in d.summary


def test_batch_backoff_with_a_failed_pod_reports_the_pod_and_mentions_the_limit() -> None:
    case = next(c for c in CASES if c.kind == "job")
    d = run(failed(case), [failing_pod(case, terminated("Error", 2), phase="Failed")])
    assert d is not None
    assert d.category is C.EXIT_CODE
    assert "backoff limit" in d.summary


@ALL_KINDS
def test_crash_loop_on_a_running_job(case: KindCase) -> None:
    p = failing_pod(
        case,
        waiting("CrashLoopBackOff", "back-off 2m40s restarting failed container"),
        last=terminated("Error", 1, finished=40),
        restarts=4,
    )
    d = run(job(case.kind, Phase.RUNNING, api_version=case.api_version), [p])
    assert d is not None
    assert d.category is C.CRASH_LOOP
    assert (d.exit_code, d.restarts) == (1, 4)
    assert d.blame is Blame.USER_CODE
    check_pod(d, case)


def test_crash_loop_from_backoff_events_when_pods_are_not_read() -> None:
    event = core_event(
        "BackOff", "Back-off restarting failed container pytorch in pod bert-worker-0", count=12
    )
    d = run(job("pytorchjob", Phase.RUNNING), [], [event])
    assert d is not None
    assert d.category is C.CRASH_LOOP
    assert d.pod == "bert-worker-3"
    assert d.events[0].count == 12


# --- ImagePullFailed, ConfigError -----------------------------------------------------------------


@ALL_KINDS
@pytest.mark.parametrize("reason", ["ImagePullBackOff", "ErrImagePull"])
def test_image_pull_failure_of_a_pending_job(case: KindCase, reason: str) -> None:
    p = failing_pod(
        case, waiting(reason, 'Back-off pulling image "registry.example.com/ml/train:v9"'), phase="Pending"
    )
    d = run(job(case.kind, Phase.PENDING, sub_phase=SubPhase.SCHEDULING, api_version=case.api_version), [p])
    assert d is not None
    assert d.category is C.IMAGE_PULL_FAILED
    assert d.blame is Blame.USER_CONFIG
    assert d.reason == reason
    check_pod(d, case)
    assert "cannot pull its image" in d.summary


def test_registry_unavailable_is_infrastructure() -> None:
    case = CASES[0]
    p = failing_pod(case, waiting("RegistryUnavailable", "registry.example.com: 503"), phase="Pending")
    d = run(job(case.kind, Phase.PENDING), [p])
    assert d is not None
    assert (d.category, d.blame) == (C.IMAGE_PULL_FAILED, Blame.INFRASTRUCTURE)


def test_image_pull_from_kubelet_events_only() -> None:
    event = core_event("Failed", 'Failed to pull image "x:v9": rpc error: code = NotFound desc = not found')
    d = run(job("rayjob", Phase.PENDING, sub_phase=SubPhase.INITIALIZING), [], [event])
    assert d is not None
    assert d.category is C.IMAGE_PULL_FAILED


@ALL_KINDS
@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("CreateContainerConfigError", 'secret "wandb" not found'),
        ("InvalidImageName", 'Failed to apply default image tag "Train:V1": couldn\'t parse image name'),
        ("CreateContainerError", "failed to generate spec: no command specified"),
    ],
)
def test_config_errors_of_a_pending_job(case: KindCase, reason: str, message: str) -> None:
    p = failing_pod(case, waiting(reason, message), phase="Pending")
    d = run(job(case.kind, Phase.PENDING, api_version=case.api_version), [p])
    assert d is not None
    assert (d.category, d.blame, d.reason) == (C.CONFIG_ERROR, Blame.USER_CONFIG, reason)
    check_pod(d, case)


def test_start_error_exit_128_is_a_config_error() -> None:
    case = CASES[0]
    p = failing_pod(
        case, terminated("StartError", 128, message='exec: "torchrun": not found'), phase="Failed"
    )
    d = run(failed(case), [p])
    assert d is not None
    assert (d.category, d.exit_code) == (C.CONFIG_ERROR, 128)


@pytest.mark.parametrize(
    ("kind", "api", "reason", "message"),
    [
        ("pytorchjob", "kubeflow.org/v1", "PyTorchJobFailedValidation", "PyTorchJobSpec is not valid"),
        ("rayjob", "ray.io/v1", "ValidationFailed", "spec.entrypoint is required"),
        (
            "trainjob",
            "trainer.kubeflow.org/v1alpha1",
            "TrainingRuntimeNotSupported",
            "runtime torch-x not found",
        ),
    ],
)
def test_a_refused_spec_is_a_config_error(kind: str, api: str, reason: str, message: str) -> None:
    conditions = [] if kind == "rayjob" else [failed_condition(reason, message)]
    status = {"reason": reason, "message": message} if kind == "rayjob" else None
    d = run(
        job(
            kind,
            Phase.FAILED,
            conditions=conditions,
            reason=reason,
            message=message,
            api_version=api,
            status=status,
        )
    )
    assert d is not None
    assert (d.category, d.blame, d.reason) == (C.CONFIG_ERROR, Blame.USER_CONFIG, reason)
    assert "spec was refused" in d.summary


def test_mpi_validation_error_event_is_a_config_error() -> None:
    event = core_event(
        "ValidationError",
        "Found validation errors: spec.mpiReplicaSpecs[Launcher] is required",
        kind="MPIJob",
        name="bert",
    )
    d = run(job("mpijob", Phase.PENDING, api_version="kubeflow.org/v2beta1"), [], [event])
    assert d is not None
    assert d.category is C.CONFIG_ERROR


# --- Preempted, Evicted, NodeFailure ----------------------------------------------------------------


@ALL_KINDS
def test_preempted_pod_is_infrastructure_not_its_exit_code(case: KindCase) -> None:
    p = failing_pod(
        case,
        terminated("Error", 137, finished=14),
        phase="Failed",
        conditions=[
            disruption(
                "PreemptionByScheduler",
                "default-scheduler: preempting to accommodate a higher priority pod",
                13,
            )
        ],
    )
    d = run(failed(case), [p])
    assert d is not None
    assert (d.category, d.blame) == (C.PREEMPTED, Blame.INFRASTRUCTURE)
    assert d.reason == "PreemptionByScheduler"
    assert d.since == at(13)
    assert d.exit_code == 137
    assert d.pod == case.pod_name


@ALL_KINDS
def test_evicted_for_node_memory_pressure(case: KindCase) -> None:
    p = pod(
        case.pod_name,
        case.labels,
        phase="Failed",
        reason="Evicted",
        message="The node was low on resource: memory. Threshold quantity: 100Mi, available: 12Mi. ",
        containers=[container_status(case.container, terminated("Error", 137, finished=22))],
        conditions=[disruption("TerminationByKubelet", "The node was low on resource: memory.", 21)],
    )
    d = run(failed(case), [p])
    assert d is not None
    assert (d.category, d.blame, d.pod) == (C.EVICTED, Blame.INFRASTRUCTURE, case.pod_name)


def test_evicted_by_status_reason_gives_the_resource() -> None:
    case = CASES[0]
    p = pod(
        case.pod_name,
        case.labels,
        phase="Failed",
        reason="Evicted",
        message="The node was low on resource: ephemeral-storage. Container pytorch was using 80Gi, "
        "request is 0",
        containers=[],
    )
    d = run(failed(case), [p])
    assert d is not None
    assert (d.category, d.resource) == (C.EVICTED, "ephemeral-storage")


def test_drain_eviction_api_is_evicted() -> None:
    case = CASES[0]
    p = failing_pod(
        case,
        terminated("Error", 143),
        phase="Failed",
        conditions=[disruption("EvictionByEvictionAPI", "Eviction API: evicting", 10)],
    )
    d = run(job(case.kind, Phase.RESTARTING), [p])
    assert d is not None
    assert d.category is C.EVICTED


@pytest.mark.parametrize(
    ("kind", "api", "reason"),
    [
        ("mpijob", "kubeflow.org/v1", "MPIJobEvicted"),
        ("mpijob", "kubeflow.org/v2beta1", "BackoffLimitExceeded/Evicted"),
    ],
)
def test_mpi_job_level_eviction(kind: str, api: str, reason: str) -> None:
    d = run(
        job(
            kind,
            Phase.FAILED,
            conditions=[failed_condition(reason, "2/4 workers are evicted")],
            api_version=api,
        )
    )
    assert d is not None
    assert (d.category, d.blame) == (C.EVICTED, Blame.INFRASTRUCTURE)


@ALL_KINDS
@pytest.mark.parametrize(
    ("disruption_reason", "message"),
    [
        ("DeletionByPodGC", "PodGC: node no longer exists"),
        ("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint"),
    ],
)
def test_node_lost_under_the_pod(case: KindCase, disruption_reason: str, message: str) -> None:
    p = failing_pod(case, running(), phase="Failed", conditions=[disruption(disruption_reason, message, 30)])
    d = run(failed(case), [p])
    assert d is not None
    assert (d.category, d.blame, d.reason) == (C.NODE_FAILURE, Blame.INFRASTRUCTURE, disruption_reason)
    assert "gpu-node-7" in d.summary


@pytest.mark.parametrize("reason", ["NodeLost", "Terminated", "UnexpectedAdmissionError"])
def test_node_failure_pod_reasons(reason: str) -> None:
    case = CASES[0]
    p = pod(
        case.pod_name,
        case.labels,
        phase="Failed",
        reason=reason,
        message="node shutdown / device lost",
        containers=[],
    )
    d = run(failed(case), [p])
    assert d is not None
    assert d.category is C.NODE_FAILURE


def test_container_status_unknown_is_a_node_failure() -> None:
    case = CASES[0]
    p = failing_pod(
        case,
        terminated(
            "ContainerStatusUnknown",
            137,
            message="The container could not be located when the pod was terminated",
        ),
        phase="Failed",
    )
    d = run(failed(case), [p])
    assert d is not None
    assert (d.category, d.exit_code) == (C.NODE_FAILURE, 137)


# --- Unschedulable ---------------------------------------------------------------------------------

GPU_FIT = (
    "0/5 nodes are available: 2 node(s) had untolerated taint {dedicated: infra}, "
    "3 Insufficient nvidia.com/gpu. preemption: 0/5 nodes are available: "
    "2 Preemption is not helpful for scheduling, 3 No preemption victims found."
)


@ALL_KINDS
def test_pending_for_gpus(case: KindCase) -> None:
    p = pod(
        case.pod_name,
        case.labels,
        phase="Pending",
        node=None,
        containers=[],
        conditions=unschedulable(GPU_FIT, 3),
    )
    d = run(job(case.kind, Phase.PENDING, sub_phase=SubPhase.SCHEDULING, api_version=case.api_version), [p])
    assert d is not None
    assert (d.category, d.blame, d.resource) == (C.UNSCHEDULABLE, Blame.INFRASTRUCTURE, "nvidia.com/gpu")
    assert d.since == at(3)
    assert d.node is None
    assert d.summary.endswith("no node has enough free nvidia.com/gpu")


def test_gpu_is_preferred_among_several_short_resources() -> None:
    case = CASES[0]
    message = (
        "0/8 nodes are available: 2 Insufficient cpu, 2 Insufficient memory, 4 Insufficient nvidia.com/gpu."
    )
    p = pod(
        case.pod_name,
        case.labels,
        phase="Pending",
        node=None,
        containers=[],
        conditions=unschedulable(message),
    )
    d = run(job(case.kind, Phase.PENDING), [p])
    assert d is not None
    assert d.resource == "nvidia.com/gpu"


def test_placement_constraint_is_the_users_config() -> None:
    case = CASES[0]
    message = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    p = pod(
        case.pod_name,
        case.labels,
        phase="Pending",
        node=None,
        containers=[],
        conditions=unschedulable(message),
    )
    d = run(job(case.kind, Phase.PENDING), [p])
    assert d is not None
    assert (d.category, d.resource, d.blame) == (C.UNSCHEDULABLE, None, Blame.USER_CONFIG)


def test_kubelet_admission_out_of_gpu() -> None:
    case = CASES[0]
    p = pod(
        case.pod_name,
        case.labels,
        phase="Failed",
        reason="OutOfnvidia.com/gpu",
        containers=[],
        message="Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 8, used: 8",
    )
    d = run(job(case.kind, Phase.RESTARTING), [p])
    assert d is not None
    assert (d.category, d.resource) == (C.UNSCHEDULABLE, "nvidia.com/gpu")


def test_failed_scheduling_event_in_the_new_events_api() -> None:
    event = new_event("FailedScheduling", GPU_FIT, count=7)
    d = run(job("jobset", Phase.PENDING), [], [event])
    assert d is not None
    assert (d.category, d.resource) == (C.UNSCHEDULABLE, "nvidia.com/gpu")
    assert d.events[0].count == 7


# --- GangWaiting ---------------------------------------------------------------------------------

VOLCANO_GANG = (
    "3/4 tasks in gang unschedulable: pod group is not ready, 4 Pending, 4 minAvailable; "
    "Pending: 3 Unschedulable, "
    "1 Schedulable. Origin reason is worker-0: 0/3 nodes are unavailable: 3 Insufficient nvidia.com/gpu."
)


@pytest.mark.parametrize("kind", ["volcanojob", "pytorchjob", "mpijob", "rayjob", "tfjob"])
def test_volcano_gang_not_satisfied(kind: str) -> None:
    # Gang-scheduled Kubeflow jobs have no pods while the PodGroup is Pending (reference §4.3).
    d = run(
        job(kind, Phase.PENDING, sub_phase=SubPhase.QUEUED),
        [],
        [],
        None,
        volcano_podgroup("Pending", message=VOLCANO_GANG),
    )
    assert d is not None
    assert (d.category, d.blame) == (C.GANG_WAITING, Blame.INFRASTRUCTURE)
    assert d.queue == "research"
    assert d.resource == "nvidia.com/gpu"
    assert d.since == at(2)


@pytest.mark.parametrize("kind", ["pytorchjob", "trainjob", "mpijob", "jaxjob"])
def test_scheduler_plugins_gang_pending(kind: str) -> None:
    d = run(job(kind, Phase.PENDING), [], [], None, sp_podgroup("Scheduling", min_member=8, running=3))
    assert d is not None
    assert d.category is C.GANG_WAITING
    assert "3/8 running" in d.summary


def test_scheduler_plugins_gang_satisfied_is_nothing() -> None:
    assert (
        run(job("pytorchjob", Phase.PENDING), [], [], None, sp_podgroup("Running", min_member=4, running=4))
        is None
    )


def test_coscheduling_prefilter_message_on_the_pod() -> None:
    case = next(c for c in CASES if c.kind == "trainjob")
    message = (
        "0/6 nodes are available: pre-filter pod bert-node-3-0-abcde cannot find enough sibling pods, "
        "current pods number: 2, minMember of group: 4."
    )
    p = pod(
        case.pod_name,
        case.labels,
        phase="Pending",
        node=None,
        containers=[],
        conditions=unschedulable(message),
    )
    d = run(job("trainjob", Phase.PENDING), [p])
    assert d is not None
    assert d.category is C.GANG_WAITING


def test_kueue_admitted_but_pods_not_ready_is_gang_waiting() -> None:
    conditions = [
        condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq", 1),
        condition("Admitted", "True", "Admitted", "The workload is admitted", 1),
        condition("PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded", 2),
    ]
    d = run(job("jobset", Phase.PENDING), [], [], workload(conditions, cluster_queue="cq"))
    assert d is not None
    assert (d.category, d.queue, d.cluster_queue) == (C.GANG_WAITING, "gpu-queue", "cq")


def test_kueue_admitted_job_whose_pod_no_node_can_take_is_unschedulable() -> None:
    conditions = [
        condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq", 1),
        condition("Admitted", "True", "Admitted", "The workload is admitted", 1),
        condition("PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded", 2),
    ]
    p = pod(
        "bert-worker-3",
        {},
        phase="Pending",
        node=None,
        containers=[],
        conditions=unschedulable("0/8 nodes are available: 8 Insufficient nvidia.com/gpu."),
    )
    d = run(job("jobset", Phase.PENDING), [p], [], workload(conditions, cluster_queue="cq"))
    assert d is not None
    assert (d.category, d.resource) == (C.UNSCHEDULABLE, "nvidia.com/gpu")


def test_volcano_podgroup_pending_event() -> None:
    event = core_event(
        "PodGroupPending",
        "PodGroup team-a:bert unschedulable, reason: " + VOLCANO_GANG,
        kind="Job",
        name="bert",
    )
    d = run(job("volcanojob", Phase.PENDING), [], [event])
    assert d is not None
    assert d.category is C.GANG_WAITING


# --- QueueWaiting, QuotaExceeded --------------------------------------------------------------------

KUEUE_PENDING = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, "
    "16 more needed"
)


@pytest.mark.parametrize("case", KUEUE_CASES, ids=[case_id(c) for c in KUEUE_CASES])
def test_waiting_in_a_kueue_queue_with_position(case: KindCase) -> None:
    wl = workload([condition("QuotaReserved", "False", "Pending", KUEUE_PENDING, 4)])
    pending = {
        "metadata": {"name": "pytorchjob-bert-8d56e"},
        "positionInLocalQueue": 2,
        "positionInClusterQueue": 7,
        "localQueueName": "gpu-queue",
        "priority": 0,
    }
    d = run(
        job(case.kind, Phase.PENDING, sub_phase=SubPhase.QUEUED, api_version=case.api_version),
        [],
        [],
        wl,
        pending=pending,
    )
    assert d is not None
    assert (d.category, d.blame) == (C.QUEUE_WAITING, Blame.INFRASTRUCTURE)
    assert (d.queue, d.position, d.resource) == ("gpu-queue", 2, "nvidia.com/gpu")
    assert d.since == at(4)
    assert d.summary == "waiting for quota in queue gpu-queue, position 3 (short of nvidia.com/gpu)"


def test_queue_waiting_without_the_visibility_api() -> None:
    wl = workload([condition("QuotaReserved", "False", "Pending", "", 4)])
    d = run(job("job", Phase.SUSPENDED), [], [], wl)
    assert d is not None
    assert (d.category, d.position) == (C.QUEUE_WAITING, None)


def test_volcano_queue_quota_insufficient() -> None:
    pg = volcano_podgroup("Pending", message="queue resource quota insufficient: research")
    d = run(job("volcanojob", Phase.PENDING), [], [], None, pg)
    assert d is not None
    assert (d.category, d.queue) == (C.QUEUE_WAITING, "research")


@pytest.mark.parametrize("case", KUEUE_CASES, ids=[case_id(c) for c in KUEUE_CASES])
def test_asking_more_than_the_queue_can_ever_give(case: KindCase) -> None:
    message = (
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor h100, "
        "previously considered podsets requests (0) + current podset request (64) > maximum capacity (32)"
    )
    wl = workload([condition("QuotaReserved", "False", "Pending", message, 4)])
    d = run(
        job(case.kind, Phase.PENDING, sub_phase=SubPhase.QUEUED, api_version=case.api_version), [], [], wl
    )
    assert d is not None
    assert (d.category, d.blame, d.resource, d.queue) == (
        C.QUOTA_EXCEEDED,
        Blame.USER_CONFIG,
        "nvidia.com/gpu",
        "gpu-queue",
    )


@pytest.mark.parametrize("kind", ["job", "volcanojob"])
def test_namespace_resource_quota_refusing_pods(kind: str) -> None:
    event = core_event(
        "FailedCreate",
        'Error creating: pods "bert-0" is forbidden: exceeded quota: gpu-quota, '
        "requested: requests.nvidia.com/gpu=8, "
        "used: requests.nvidia.com/gpu=24, limited: requests.nvidia.com/gpu=24",
        kind="Job",
        name="bert",
    )
    d = run(job(kind, Phase.PENDING), [], [event])
    assert d is not None
    assert (d.category, d.resource) == (C.QUOTA_EXCEEDED, "nvidia.com/gpu")


def test_missing_local_queue_is_a_config_error() -> None:
    wl = workload(
        [condition("QuotaReserved", "False", "Inadmissible", "LocalQueue gpu-queue doesn't exist", 1)]
    )
    d = run(job("pytorchjob", Phase.SUSPENDED), [], [], wl)
    assert d is not None
    assert (d.category, d.blame) == (C.CONFIG_ERROR, Blame.USER_CONFIG)


def test_kueue_preemption_while_waiting_again() -> None:
    conditions = [
        condition("QuotaReserved", "False", "Pending", KUEUE_PENDING, 9),
        condition(
            "Evicted",
            "True",
            "Preempted",
            "Preempted to accommodate a workload (UID: u) due to InCohortReclamation",
            8,
        ),
        condition("Preempted", "True", "InCohortReclamation", "Preempted to accommodate a workload", 8),
    ]
    d = run(job("jobset", Phase.PENDING), [], [], workload(conditions))
    assert d is not None
    assert (d.category, d.blame, d.queue) == (C.PREEMPTED, Blame.INFRASTRUCTURE, "gpu-queue")


def test_kueue_workload_pending_event_without_the_workload() -> None:
    event = new_event("Pending", KUEUE_PENDING, kind="Workload", name="pytorchjob-bert-8d56e")
    d = run(job("pytorchjob", Phase.SUSPENDED), [], [event])
    assert d is not None
    assert d.category is C.QUEUE_WAITING


# --- DeadlineExceeded, BackoffLimitExceeded, PodFailurePolicy, Unknown ---------------------------------


@pytest.mark.parametrize(
    ("kind", "api", "reason", "message"),
    [
        ("job", "batch/v1", "DeadlineExceeded", "Job was active longer than specified deadline"),
        (
            "pytorchjob",
            "kubeflow.org/v1",
            "PyTorchJobFailed",
            "Job bert has failed because it was active longer than specified deadline",
        ),
        (
            "mpijob",
            "kubeflow.org/v2beta1",
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
        ),
        (
            "trainjob",
            "trainer.kubeflow.org/v1alpha1",
            "DeadlineExceeded",
            "TrainJob exceeded its active deadline",
        ),
        (
            "rayjob",
            "ray.io/v1",
            "DeadlineExceeded",
            "The RayJob has passed the activeDeadlineSeconds. StartTime: x",
        ),
        (
            "rayjob",
            "ray.io/v1",
            "PreRunningDeadlineExceeded",
            "The RayJob has passed the preRunningDeadlineSeconds.",
        ),
    ],
)
def test_deadline_exceeded(kind: str, api: str, reason: str, message: str) -> None:
    conditions = [] if kind == "rayjob" else [failed_condition(reason, message)]
    status = {"reason": reason, "message": message} if kind == "rayjob" else None
    # The pods killed by the deadline (exit 143) are its consequence, not its cause.
    p = pod(
        "bert-worker-0",
        {"training.kubeflow.org/replica-type": "worker"},
        phase="Failed",
        containers=[container_status("main", terminated("Error", 143, finished=21))],
    )
    d = run(
        job(
            kind,
            Phase.FAILED,
            conditions=conditions,
            reason=reason,
            message=message,
            api_version=api,
            status=status,
        ),
        [p],
    )
    assert d is not None
    assert (d.category, d.blame) == (C.DEADLINE_EXCEEDED, Blame.USER_CONFIG)


def test_pod_active_deadline() -> None:
    case = CASES[0]
    p = pod(
        case.pod_name,
        case.labels,
        phase="Failed",
        reason="DeadlineExceeded",
        message="Pod was active on the node longer than the specified deadline",
        containers=[],
    )
    d = run(job(case.kind, Phase.RESTARTING), [p])
    assert d is not None
    assert d.category is C.DEADLINE_EXCEEDED


@pytest.mark.parametrize(
    ("kind", "api", "reason", "message"),
    [
        ("job", "batch/v1", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
        (
            "pytorchjob",
            "kubeflow.org/v1",
            "PyTorchJobFailed",
            "Job bert has failed because it has reached the specified backoff limit",
        ),
        (
            "mpijob",
            "kubeflow.org/v2beta1",
            "BackoffLimitExceeded/Error",
            "Job has reached the specified backoff limit: ",
        ),
        (
            "jobset",
            "jobset.x-k8s.io/v1alpha2",
            "ReachedMaxRestarts",
            "jobset failed due to reaching max number of restarts (first failed job: bert-workers-1)",
        ),
        (
            "trainjob",
            "trainer.kubeflow.org/v1alpha1",
            "ReachedMaxRestarts",
            "jobset failed due to reaching max number of restarts (first failed job: bert-node-0)",
        ),
        ("volcanojob", "batch.volcano.sh/v1alpha1", "", ""),
        (
            "rayjob",
            "ray.io/v1",
            "SubmissionFailed",
            "Job submission has failed. Reason: BackoffLimitExceeded. "
            "Message: Job has reached the specified backoff limit",
        ),
    ],
)
def test_backoff_limit_with_no_pod_left(kind: str, api: str, reason: str, message: str) -> None:
    conditions = [] if kind in ("rayjob", "volcanojob") else [failed_condition(reason, message)]
    status = {"reason": reason, "message": message} if kind == "rayjob" else None
    d = run(
        job(
            kind,
            Phase.FAILED,
            conditions=conditions,
            reason=reason or None,
            message=message or None,
            api_version=api,
            status=status,
        )
    )
    assert d is not None
    assert d.category is C.BACKOFF_LIMIT_EXCEEDED
    assert d.blame is Blame.USER_CODE


def test_pod_failure_policy_names_container_pod_and_exit_code() -> None:
    message = (
        "Container main for pod team-a/bert-2-x7k2p failed with exit code 42 matching FailJob rule at index 0"
    )
    p = pod(
        "bert-2-x7k2p",
        {"batch.kubernetes.io/job-completion-index": "2"},
        phase="Failed",
        containers=[container_status("main", terminated("Error", 42, finished=17))],
    )
    d = run(job("job", Phase.FAILED, conditions=[failed_condition("PodFailurePolicy", message)]), [p])
    assert d is not None
    assert (d.category, d.blame) == (C.POD_FAILURE_POLICY, Blame.USER_CODE)
    assert (d.pod, d.container, d.exit_code, d.replica_index, d.node) == (
        "bert-2-x7k2p",
        "main",
        42,
        2,
        "gpu-node-7",
    )
    assert "exited with code 42" in d.summary


def test_pod_failure_policy_on_a_disruption_is_infrastructure() -> None:
    message = "Pod team-a/bert-2-x7k2p has condition DisruptionTarget matching FailJob rule at index 1"
    d = run(job("job", Phase.FAILED, conditions=[failed_condition("PodFailurePolicy", message)]))
    assert d is not None
    assert (d.category, d.blame, d.pod) == (C.POD_FAILURE_POLICY, Blame.INFRASTRUCTURE, "bert-2-x7k2p")


def test_jobset_failure_policy_action() -> None:
    message = "applying FailJobSet failure policy action (first failed job: bert-workers-0)"
    d = run(
        job("jobset", Phase.FAILED, conditions=[failed_condition("FailJobSetFailurePolicyAction", message)])
    )
    assert d is not None
    assert d.category is C.POD_FAILURE_POLICY


@pytest.mark.parametrize(
    ("reason", "message", "category", "code"),
    [
        ("AppFailed", "Job entrypoint command failed with exit code 3", C.EXIT_CODE, 3),
        (
            "SubmissionFailed",
            "Ray head pod container ray-head terminated with exit code 139: Segfault",
            C.EXIT_CODE,
            139,
        ),
        ("AppFailed", "Ray head pod not found.", C.UNKNOWN, None),
    ],
)
def test_rayjob_application_failures(
    reason: str, message: str, category: DiagnosisCategory, code: int | None
) -> None:
    d = run(
        job("rayjob", Phase.FAILED, status={"reason": reason, "message": message}, api_version="ray.io/v1")
    )
    assert d is not None
    assert (d.category, d.blame, d.exit_code) == (category, Blame.USER_CODE, code)


def test_failed_without_any_known_reason_is_unknown() -> None:
    d = run(
        job("rayjob", Phase.FAILED, status={"reason": "JobStatusCheckTimeoutExceeded", "message": "timeout"})
    )
    assert d is not None
    assert (d.category, d.blame, d.reason) == (C.UNKNOWN, Blame.UNKNOWN, "JobStatusCheckTimeoutExceeded")


# --- nothing to say ---------------------------------------------------------------------------------


@ALL_KINDS
def test_a_healthy_running_job_has_no_diagnosis(case: KindCase) -> None:
    assert (
        run(job(case.kind, Phase.RUNNING, api_version=case.api_version), [failing_pod(case, running())])
        is None
    )


def test_a_succeeded_job_has_no_diagnosis_even_with_old_failures() -> None:
    case = CASES[0]
    p = failing_pod(
        case, terminated("Completed", 0), last=terminated("Error", 1), restarts=1, phase="Succeeded"
    )
    assert run(job(case.kind, Phase.SUCCEEDED), [p]) is None


def test_a_job_just_created_has_no_diagnosis() -> None:
    assert run(job("pytorchjob", Phase.PENDING, sub_phase=SubPhase.CREATED)) is None


def test_warning_events_are_bounded_distinct_and_lead_with_the_pod() -> None:
    case = CASES[0]
    events = [
        core_event("FailedMount", f"MountVolume.SetUp failed {i}", name=f"other-{i}", last=5 + i)
        for i in range(8)
    ]
    events += [
        core_event("BackOff", "Back-off restarting failed container", name=case.pod_name, last=1, count=3),
        core_event("BackOff", "Back-off restarting failed container", name=case.pod_name, last=2, count=4),
        core_event("Pulled", "Container image already present", name=case.pod_name, type_="Normal"),
    ]
    p = failing_pod(case, waiting("CrashLoopBackOff", "back-off"), last=terminated("Error", 1), restarts=3)
    d = run(job(case.kind, Phase.RUNNING), [p], events)
    assert d is not None
    assert len(d.events) == 5
    assert d.events[0].object == f"Pod/{case.pod_name}"
    assert d.events[0].count == 7
    assert all(e.reason != "Pulled" for e in d.events)
    assert [e.object for e in d.events[1:]] == [f"Pod/other-{i}" for i in (7, 6, 5, 4)]


def test_stale_warnings_of_a_running_job_are_left_out() -> None:
    case = CASES[0]
    old = core_event("FailedScheduling", "0/3 nodes are available", name=case.pod_name, first=-300, last=-200)
    p = failing_pod(case, waiting("CrashLoopBackOff", "back-off"), last=terminated("Error", 1), restarts=3)
    d = run(job(case.kind, Phase.RUNNING), [p], [old])
    assert d is not None
    assert d.events == []
    assert ts(0) < NOW.strftime("%Y-%m-%dT%H:%M:%SZ")


# --- found end to end against kubesim (test_watcher_diagnosis) ------------------------------------


def test_a_gang_whose_members_no_node_can_take_is_gang_waiting_short_of_that_resource() -> None:
    message = "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."
    pods = [
        pod(
            f"bert-worker-{i}",
            {},
            phase="Pending",
            node=None,
            containers=[],
            conditions=unschedulable(message),
        )
        for i in range(4)
    ]
    d = run(job("pytorchjob", Phase.PENDING), pods, [], None, sp_podgroup("Scheduling"))
    assert d is not None
    assert (d.category, d.resource, d.pod) == (C.GANG_WAITING, "nvidia.com/gpu", None)


def test_a_running_job_with_a_pod_no_node_can_take_is_unschedulable() -> None:
    p = pod(
        "bert-worker-3",
        {},
        phase="Pending",
        node=None,
        containers=[],
        conditions=unschedulable("0/8 nodes are available: 8 Insufficient nvidia.com/gpu."),
    )
    d = run(job("jobset", Phase.RUNNING), [p])
    assert d is not None
    assert (d.category, d.resource, d.pod) == (C.UNSCHEDULABLE, "nvidia.com/gpu", "bert-worker-3")


def test_kuberay_head_pod_refused_by_a_resource_quota_is_quota_exceeded() -> None:
    event = core_event(
        "FailedToCreateHeadPod",
        "Failed to create head Pod default/rayjob-train-llm-0001-58685-head-x7k2p, "
        'pods "rayjob-train-llm-0001-58685-head-x7k2p" is forbidden: exceeded quota: '
        "gpu-quota, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=8, "
        "limited: requests.nvidia.com/gpu=8",
        kind="RayCluster",
        name="ray-abcde",
    )
    d = run(job("rayjob", Phase.PENDING), [], [event])
    assert d is not None
    assert (d.category, d.resource) == (C.QUOTA_EXCEEDED, "nvidia.com/gpu")
