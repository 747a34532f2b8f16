"""The diagnosis engine: evidence in, one :class:`Diagnosis` (or None) out. Pure and deterministic.

See the package docstring for the precedence. Everything here reads the trimmed evidence of
:mod:`trainwatch_watcher.diagnosis.evidence`; ``now`` only bounds which Warning events still count
for a job that is not finished and clamps timestamps from skewed clocks.
"""

from __future__ import annotations

import re
import signal as signals
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from trainwatch_common.events.diagnosis import (
    MAX_MESSAGE_CHARS,
    MAX_SUMMARY_CHARS,
    MAX_WARNING_EVENTS,
    Blame,
    Diagnosis,
    DiagnosisCategory,
    DiagnosisWarning,
)
from trainwatch_common.events.jobs import Phase
from trainwatch_watcher.diagnosis.evidence import (
    ContainerEvidence,
    JobEvidence,
    KueueWorkload,
    PodEvidence,
    PodGroupEvidence,
    WarningEvent,
    insufficient_resources,
)
from trainwatch_watcher.diagnosis.redact import log_tail

C = DiagnosisCategory

# Rank inside one moment: the lower, the more it explains. A pod that was OOMKilled *and* exited
# 137 was OOMKilled; a pod that was preempted and then exited 143 was preempted.
RANK: dict[DiagnosisCategory, int] = {
    C.OOM_KILLED: 0,
    C.PREEMPTED: 1,
    C.EVICTED: 2,
    C.NODE_FAILURE: 3,
    C.CONFIG_ERROR: 4,
    C.IMAGE_PULL_FAILED: 5,
    C.CRASH_LOOP: 6,
    C.EXIT_CODE: 7,
    C.DEADLINE_EXCEEDED: 8,
    C.QUOTA_EXCEEDED: 9,
    C.UNSCHEDULABLE: 10,
    C.GANG_WAITING: 11,
    C.QUEUE_WAITING: 12,
    C.POD_FAILURE_POLICY: 13,
    C.BACKOFF_LIMIT_EXCEEDED: 14,
    C.UNKNOWN: 15,
}
# Categories that say a process or pod *failed* (as opposed to: is waiting).
FAILURES = frozenset(
    {
        C.OOM_KILLED,
        C.PREEMPTED,
        C.EVICTED,
        C.NODE_FAILURE,
        C.CONFIG_ERROR,
        C.IMAGE_PULL_FAILED,
        C.CRASH_LOOP,
        C.EXIT_CODE,
        C.DEADLINE_EXCEEDED,
    }
)
BLAME: dict[DiagnosisCategory, Blame] = {
    C.OOM_KILLED: Blame.USER_CONFIG,  # the memory limit is the job's; raise it or use less
    C.IMAGE_PULL_FAILED: Blame.USER_CONFIG,
    C.CONFIG_ERROR: Blame.USER_CONFIG,
    C.CRASH_LOOP: Blame.USER_CODE,
    C.EXIT_CODE: Blame.USER_CODE,
    C.PREEMPTED: Blame.INFRASTRUCTURE,
    C.EVICTED: Blame.INFRASTRUCTURE,
    C.NODE_FAILURE: Blame.INFRASTRUCTURE,
    C.UNSCHEDULABLE: Blame.INFRASTRUCTURE,
    C.GANG_WAITING: Blame.INFRASTRUCTURE,
    C.QUEUE_WAITING: Blame.INFRASTRUCTURE,
    C.QUOTA_EXCEEDED: Blame.USER_CONFIG,
    C.DEADLINE_EXCEEDED: Blame.USER_CONFIG,
    C.BACKOFF_LIMIT_EXCEEDED: Blame.USER_CODE,
    C.POD_FAILURE_POLICY: Blame.USER_CODE,
    C.UNKNOWN: Blame.UNKNOWN,
}

# Two failures this close together are one moment: the more explanatory one wins (an OOM kill and
# the peers' NCCL errors it caused land within the same seconds).
SAME_MOMENT = timedelta(seconds=5)
# For a job that is not finished, Warning events last seen longer ago than this are history.
WARNING_HORIZON = timedelta(hours=1)

IMAGE_PULL_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "ImageInspectError",
        "RegistryUnavailable",
        "SignatureValidationFailed",
    }
)
CONFIG_WAITING_REASONS = frozenset(
    {
        "CreateContainerConfigError",
        "InvalidImageName",
        "CreateContainerError",
        "RunContainerError",
        "RunInitContainerError",
        "PreCreateHookError",
        "PreStartHookError",
        "PostStartHookError",
        "VerifyNonRootError",
    }
)
SANDBOX_REASONS = frozenset({"CreatePodSandboxError", "ConfigPodSandboxError", "KillPodSandboxError"})
START_FAILURE_REASONS = frozenset({"StartError", "ContainerCannotRun"})
DISRUPTIONS: dict[str, DiagnosisCategory] = {
    "PreemptionByScheduler": C.PREEMPTED,
    "PreemptionByKubeScheduler": C.PREEMPTED,  # name used by 1.26-1.27
    "EvictionByEvictionAPI": C.EVICTED,
    "TerminationByKubelet": C.EVICTED,
    "DeletionByTaintManager": C.NODE_FAILURE,
    "DeletionByPodGC": C.NODE_FAILURE,
}
NODE_LOST_REASONS = frozenset(
    {"NodeLost", "Terminated", "Shutdown", "NodeShutdown", "UnexpectedAdmissionError"}
)
ROLE_ORDER = ("master", "chief", "launcher", "head", "submitter", "node", "ps", "worker")

_COSCHEDULING = re.compile(
    r"cannot find enough sibling pods|podGroup \S+ failed recently|gated pods in the same PodGroup|"
    r"PodGroup \S+ gets rejected|pod group is not ready|tasks in gang unschedulable|resource gap",
    re.IGNORECASE,
)
_EVICTED_RESOURCE = re.compile(r"low on resource: ([A-Za-z0-9/_-]+(?:\.[A-Za-z0-9/_-]+)*)")
_EXIT_IN_MESSAGE = re.compile(r"exit(?:ed with)? ?code:? (\d+)", re.IGNORECASE)
_POD_CONTAINER = re.compile(r"[Ee]rror pod (\S+) container (\S+)")
_FAILURE_POLICY_CONTAINER = re.compile(r"Container (\S+) for pod (\S+?)/(\S+) failed with exit code (\d+)")
_FAILURE_POLICY_CONDITION = re.compile(r"Pod (\S+?)/(\S+) has condition (\S+) matching")
_FIRST_FAILED_JOB = re.compile(r"first failed job: ([A-Za-z0-9.-]+)")
_KUEUE_UNUSED = re.compile(r"insufficient unused quota for ([A-Za-z0-9./_-]+?) in flavor")
_KUEUE_MAX = re.compile(r"insufficient quota for ([A-Za-z0-9./_-]+?) in flavor [^;]*?> maximum capacity")
_RESOURCEQUOTA = re.compile(r"exceeded quota: [^,]+, requested: (?:requests\.|limits\.)?([A-Za-z0-9./_-]+)=")
_DEADLINE_MESSAGE = re.compile(
    r"active longer than specified deadline|exceeded its active deadline|passed the activeDeadlineSeconds|"
    r"passed the preRunningDeadlineSeconds",
    re.IGNORECASE,
)
_BACKOFF_MESSAGE = re.compile(
    r"reached the specified backoff limit|maximum restart count|max number of restarts"
)

GPU_HINT = ("gpu", "nvidia", "amd.com", "habana", "neuron", "tpu")


@dataclass(frozen=True, slots=True)
class Finding:
    """One explanation and its evidence; the engine keeps the best and turns it into a Diagnosis."""

    category: DiagnosisCategory
    reason: str | None = None
    message: str | None = None
    pod: PodEvidence | None = None
    container: ContainerEvidence | None = None
    exit_code: int | None = None
    signal: int | None = None
    restarts: int | None = None
    resource: str | None = None
    queue: str | None = None
    cluster_queue: str | None = None
    position: int | None = None
    since: datetime | None = None
    blame: Blame | None = None
    pod_name: str | None = None  # when only a message names the pod
    container_name: str | None = None
    detail: str | None = None  # a clause for the summary


# ---------------------------------------------------------------------------------------------
# Pods


def _signal(exit_code: int | None, signal: int | None) -> int | None:
    if signal:
        return signal
    if exit_code is not None and 128 < exit_code <= 128 + 64:
        return exit_code - 128
    return None


def _preferred_resource(resources: Sequence[str]) -> str | None:
    for resource in resources:
        if any(hint in resource.lower() for hint in GPU_HINT):
            return resource
    return resources[0] if resources else None


def _container_finding(pod: PodEvidence, c: ContainerEvidence, include_past: bool) -> Finding | None:
    if c.state == "terminated" and c.reason == "OOMKilled":
        return Finding(
            C.OOM_KILLED,
            "OOMKilled",
            c.message,
            pod=pod,
            container=c,
            exit_code=c.exit_code,
            signal=_signal(c.exit_code, c.signal),
            restarts=c.restarts,
            since=c.finished_at,
        )
    live_failure = c.state == "waiting" and c.reason == "CrashLoopBackOff"
    if c.last_reason == "OOMKilled" and (include_past or live_failure):
        return Finding(
            C.OOM_KILLED,
            "OOMKilled",
            None,
            pod=pod,
            container=c,
            exit_code=c.last_exit_code,
            signal=_signal(c.last_exit_code, c.last_signal),
            restarts=c.restarts,
            since=c.last_finished_at,
            detail="crash-looping" if live_failure else None,
        )
    if c.state == "terminated" and c.reason == "ContainerStatusUnknown":
        return Finding(
            C.NODE_FAILURE,
            c.reason,
            c.message,
            pod=pod,
            container=c,
            exit_code=c.exit_code,
            signal=None,
            restarts=c.restarts,
            since=c.finished_at,
        )
    if c.state == "waiting" and c.reason:
        if c.reason in IMAGE_PULL_REASONS:
            blame = Blame.INFRASTRUCTURE if c.reason == "RegistryUnavailable" else None
            return Finding(
                C.IMAGE_PULL_FAILED,
                c.reason,
                c.message,
                pod=pod,
                container=c,
                restarts=c.restarts,
                since=pod.created_at,
                blame=blame,
            )
        if c.reason in CONFIG_WAITING_REASONS:
            return Finding(
                C.CONFIG_ERROR,
                c.reason,
                c.message,
                pod=pod,
                container=c,
                restarts=c.restarts,
                since=pod.created_at,
            )
        if c.reason in SANDBOX_REASONS:
            return Finding(C.NODE_FAILURE, c.reason, c.message, pod=pod, container=c, since=pod.created_at)
        if c.reason == "CrashLoopBackOff":
            return Finding(
                C.CRASH_LOOP,
                c.reason,
                c.message,
                pod=pod,
                container=c,
                exit_code=c.last_exit_code,
                signal=_signal(c.last_exit_code, c.last_signal),
                restarts=c.restarts,
                since=c.last_finished_at or pod.created_at,
                detail=c.last_reason,
            )
    if c.state == "terminated" and c.reason in START_FAILURE_REASONS:
        return Finding(
            C.CONFIG_ERROR,
            c.reason,
            c.message,
            pod=pod,
            container=c,
            exit_code=c.exit_code,
            signal=None,
            restarts=c.restarts,
            since=c.finished_at,
        )
    if c.state == "terminated" and c.exit_code:
        return Finding(
            C.EXIT_CODE,
            c.reason,
            c.message,
            pod=pod,
            container=c,
            exit_code=c.exit_code,
            signal=_signal(c.exit_code, c.signal),
            restarts=c.restarts,
            since=c.finished_at,
        )
    if include_past and c.last_exit_code:
        if c.last_reason in START_FAILURE_REASONS:
            return Finding(
                C.CONFIG_ERROR,
                c.last_reason,
                None,
                pod=pod,
                container=c,
                exit_code=c.last_exit_code,
                signal=None,
                restarts=c.restarts,
                since=c.last_finished_at,
            )
        return Finding(
            C.EXIT_CODE,
            c.last_reason,
            None,
            pod=pod,
            container=c,
            exit_code=c.last_exit_code,
            signal=_signal(c.last_exit_code, c.last_signal),
            restarts=c.restarts,
            since=c.last_finished_at,
        )
    return None


def _best(findings: Iterable[Finding]) -> Finding | None:
    """The root cause among failures: the earliest, unless something that explains more happened
    within the same moment (``SAME_MOMENT``); ties go to the leading role, then the name."""
    pool = list(findings)
    if not pool:
        return None
    dated = [f.since for f in pool if f.since is not None]
    if dated:
        first = min(dated)
        pool = [f for f in pool if f.since is None or f.since <= first + SAME_MOMENT]

    return min(pool, key=_priority)


def _priority(f: Finding) -> tuple[int, float, int, str, str]:
    role = f.pod.role if f.pod else None
    order = ROLE_ORDER.index(role) if role in ROLE_ORDER else len(ROLE_ORDER)
    name = f.pod.name if f.pod else (f.pod_name or "")
    return (RANK[f.category], _ts(f.since), order, name, f.reason or "")


def _ts(value: datetime | None) -> float:
    return value.timestamp() if value is not None else float("inf")


def pod_finding(pod: PodEvidence, *, include_past: bool) -> Finding | None:
    """The strongest explanation one pod gives (``include_past``: count containers that failed
    and were restarted, for a job that is failing or restarting)."""
    if not pod.containers and not pod.conditions and pod.reason is None:
        return None  # a healthy pod (trim_pod keeps nothing of it): most pods, on every job event
    containers = [f for c in pod.containers if (f := _container_finding(pod, c, include_past)) is not None]
    oom = [f for f in containers if f.category is C.OOM_KILLED]
    if oom:
        return _best(oom)
    disruption = pod.condition("DisruptionTarget")
    if disruption is not None and disruption.reason in DISRUPTIONS:
        category = DISRUPTIONS[disruption.reason]
        exit_code = next((c.exit_code for c in pod.containers if c.exit_code), None)
        return Finding(
            category,
            disruption.reason,
            disruption.message,
            pod=pod,
            exit_code=exit_code,
            signal=_signal(exit_code, None),
            since=disruption.since,
        )
    if pod.reason == "Evicted":
        return Finding(
            C.EVICTED,
            pod.reason,
            pod.message,
            pod=pod,
            resource=pod.insufficient[0] if pod.insufficient else None,
            since=_latest_finish(pod),
        )
    if pod.reason in NODE_LOST_REASONS:
        return Finding(
            C.NODE_FAILURE, pod.reason, pod.message, pod=pod, since=_latest_finish(pod) or pod.created_at
        )
    if pod.reason == "DeadlineExceeded":
        return Finding(C.DEADLINE_EXCEEDED, pod.reason, pod.message, pod=pod, since=_latest_finish(pod))
    if pod.reason and pod.reason.startswith("OutOf") and pod.insufficient:
        return Finding(
            C.UNSCHEDULABLE,
            pod.reason,
            pod.message,
            pod=pod,
            resource=pod.insufficient[0],
            since=pod.created_at,
        )
    if containers:
        return _best(containers)
    scheduled = pod.condition("PodScheduled")
    if scheduled is not None and scheduled.reason == "Unschedulable" and pod.phase in ("Pending", ""):
        if _COSCHEDULING.search(scheduled.message or ""):
            return Finding(
                C.GANG_WAITING, scheduled.reason, scheduled.message, pod=pod, since=scheduled.since
            )
        resource = _preferred_resource(pod.insufficient)
        return Finding(
            C.UNSCHEDULABLE,
            scheduled.reason,
            scheduled.message,
            pod=pod,
            resource=resource,
            since=scheduled.since,
            blame=None if resource else Blame.USER_CONFIG,
        )
    return None


def _latest_finish(pod: PodEvidence) -> datetime | None:
    times = [c.finished_at for c in pod.containers if c.finished_at is not None]
    return max(times) if times else None


# ---------------------------------------------------------------------------------------------
# The job's own conditions


def _failed_condition(job: JobEvidence) -> tuple[str | None, str | None, datetime | None]:
    for type_ in ("Failed", "FailureTarget"):
        for condition in job.conditions:
            if condition.type == type_ and condition.status == "True":
                return condition.reason, condition.message, condition.since
    return job.reason, job.message, None


def job_verdict(job: JobEvidence) -> tuple[Finding | None, bool]:
    """What a failed job's own status says, and whether it is *decisive* (explains the failure by
    itself: a deadline, a podFailurePolicy rule, a rejected spec) rather than a count of failures
    whose cause is in the pods (backoff limit, restarts exhausted, replicas failed)."""
    if job.phase is not Phase.FAILED:
        return None, False
    reason, message, since = _failed_condition(job)
    reason_text, message_text = reason or "", message or ""
    base = reason_text.split("/", 1)[0]
    if base in ("DeadlineExceeded", "PreRunningDeadlineExceeded", "MaximumExecutionTimeExceeded") or (
        _DEADLINE_MESSAGE.search(message_text)
    ):
        return Finding(C.DEADLINE_EXCEEDED, reason, message, since=since), True
    if base in ("PodFailurePolicy", "FailJobSetFailurePolicyAction"):
        return _failure_policy(reason, message, since), True
    if job.kind == "volcanojob" and base in ("Terminated", "Aborted"):
        # A TerminateJob / AbortJob policy action (Terminating -> Terminated, Aborting -> Aborted).
        return Finding(C.POD_FAILURE_POLICY, reason, message, since=since), True
    if base.endswith("FailedValidation") or base in (
        "ValidationFailed",
        "ValidationError",
        "TrainingRuntimeNotSupported",
    ):
        return Finding(C.CONFIG_ERROR, reason, message, since=since), True
    if base == "BackoffLimitExceeded" and "/" in reason_text:
        # MPIJob v2beta1: "BackoffLimitExceeded/<last failed launcher pod's status.reason>".
        pod_reason = reason_text.split("/", 1)[1]
        if pod_reason == "Evicted":
            return Finding(C.EVICTED, reason, message, since=since), False
        if pod_reason == "DeadlineExceeded":
            return Finding(C.DEADLINE_EXCEEDED, reason, message, since=since), True
    if base.endswith("Evicted"):  # MPIJobEvicted
        return Finding(C.EVICTED, reason, message, since=since), False
    if (
        base in ("BackoffLimitExceeded", "MaxFailedIndexesExceeded", "FailedIndexes", "ReachedMaxRestarts")
        or _BACKOFF_MESSAGE.search(message_text)
        or (base == "SubmissionFailed" and "BackoffLimitExceeded" in message_text)
        or (job.kind == "volcanojob" and base in ("", "Failed", "MaxRetryExceeded"))
    ):
        return Finding(C.BACKOFF_LIMIT_EXCEEDED, reason, message, since=since), False
    if base == "AppFailed" or (base == "SubmissionFailed" and "terminated with exit code" in message_text):
        # RayJob: the Ray application (or, in SidecarMode, the head's container) failed: user code.
        exit_match = _EXIT_IN_MESSAGE.search(message_text)
        if exit_match:
            code = int(exit_match.group(1))
            finding = Finding(
                C.EXIT_CODE, reason, message, exit_code=code, signal=_signal(code, None), since=since
            )
            return finding, False
        return Finding(C.UNKNOWN, reason, message, since=since, blame=Blame.USER_CODE), False
    return Finding(C.UNKNOWN, reason, message, since=since), False


def _failure_policy(reason: str | None, message: str | None, since: datetime | None) -> Finding:
    text = message or ""
    if match := _FAILURE_POLICY_CONTAINER.search(text):
        code = int(match.group(4))
        return Finding(
            C.POD_FAILURE_POLICY,
            reason,
            message,
            exit_code=code,
            signal=_signal(code, None),
            since=since,
            pod_name=match.group(3),
            container_name=match.group(1),
        )
    if match := _FAILURE_POLICY_CONDITION.search(text):
        blame = Blame.INFRASTRUCTURE if match.group(3) == "DisruptionTarget" else None
        return Finding(
            C.POD_FAILURE_POLICY,
            reason,
            message,
            since=since,
            pod_name=match.group(2),
            blame=blame,
            detail=f"pod condition {match.group(3)}",
        )
    return Finding(C.POD_FAILURE_POLICY, reason, message, since=since)


# ---------------------------------------------------------------------------------------------
# Queues and gangs


def workload_finding(workload: KueueWorkload) -> Finding | None:
    """Why Kueue has not admitted the job (or took its admission back), if it has not."""
    evicted = workload.condition("Evicted")
    reserved = workload.condition("QuotaReserved")
    admitted = workload.condition("Admitted")
    if admitted is not None and admitted.status == "True" and (evicted is None or evicted.status != "True"):
        pods_ready = workload.condition("PodsReady")
        if pods_ready is not None and pods_ready.status == "False" and pods_ready.reason == "WaitForStart":
            return Finding(
                C.GANG_WAITING,
                pods_ready.reason,
                pods_ready.message,
                since=pods_ready.since,
                queue=workload.queue,
                cluster_queue=workload.cluster_queue,
            )
        return None

    def make(category: DiagnosisCategory, reason: str | None, message: str | None, **more: Any) -> Finding:
        return Finding(
            category, reason, message, queue=workload.queue, cluster_queue=workload.cluster_queue, **more
        )

    if evicted is not None and evicted.status == "True":
        by_reason = {
            "Preempted": C.PREEMPTED,
            "NodeFailures": C.NODE_FAILURE,
            "PodsReadyTimeout": C.GANG_WAITING,
            "MaximumExecutionTimeExceeded": C.DEADLINE_EXCEEDED,
        }
        if evicted.reason in by_reason:
            return make(by_reason[evicted.reason], evicted.reason, evicted.message, since=evicted.since)
        if evicted.reason in ("ClusterQueueStopped", "LocalQueueStopped"):
            return make(C.QUEUE_WAITING, evicted.reason, evicted.message, since=evicted.since)
    if reserved is not None and reserved.status == "True":
        # Quota reserved, admission checks pending (or nothing to say).
        return None
    reason = reserved.reason if reserved else None
    message = reserved.message if reserved else None
    since = (reserved.since if reserved else None) or workload.created_at
    text = message or ""
    if reason in ("Misconfigured",) or "doesn't exist" in text or "is terminating or missing" in text:
        return make(C.CONFIG_ERROR, reason, message, since=since)
    match = _KUEUE_MAX.search(text)
    if reason == "ExceedsMaxQuota" or match is not None:
        resource = match.group(1) if match else None
        return make(C.QUOTA_EXCEEDED, reason, message, resource=resource, since=since)
    unused = _KUEUE_UNUSED.search(text)
    stopped = "is stopped" in text or "is inactive" in text
    return make(
        C.QUEUE_WAITING,
        reason,
        message,
        resource=unused.group(1) if unused else None,
        position=workload.position_in_local_queue,
        since=since,
        detail="stopped" if stopped else None,
    )


def podgroup_finding(podgroup: PodGroupEvidence) -> Finding | None:
    """A gang that is not (yet) satisfied: Volcano Pending/Inqueue/Unknown with Unschedulable, or a
    scheduler-plugins PodGroup Pending/Scheduling with fewer than minMember running."""
    if podgroup.phase in ("Running", "Completed", "Finished", "Failed"):
        unschedulable = podgroup.condition("Unschedulable")
        if podgroup.phase != "Running" or unschedulable is None or unschedulable.status != "True":
            return None
    unschedulable = podgroup.condition("Unschedulable")
    message = unschedulable.message if unschedulable and unschedulable.status == "True" else None
    since = (unschedulable.since if unschedulable else None) or podgroup.created_at
    if podgroup.flavor == "scheduler-plugins":
        if podgroup.phase not in ("", "Pending", "Scheduling", "Unknown"):
            return None
        if podgroup.min_member is not None and podgroup.running >= podgroup.min_member:
            return None
    elif podgroup.phase not in ("", "Pending", "Inqueue", "Unknown") and message is None:
        return None
    if message and "queue resource quota insufficient" in message:
        return Finding(C.QUEUE_WAITING, "Unschedulable", message, queue=podgroup.queue, since=since)
    resources = insufficient_resources(message)
    return Finding(
        C.GANG_WAITING,
        unschedulable.reason if unschedulable else podgroup.phase or None,
        message,
        resource=_preferred_resource(resources),
        queue=podgroup.queue,
        since=since,
        detail=f"{podgroup.running}/{podgroup.min_member}" if podgroup.min_member else None,
    )


# ---------------------------------------------------------------------------------------------
# Events


# Pod creation refused (a ResourceQuota): the job controller, training-operator, KubeRay.
QUOTA_EVENT_REASONS = frozenset(
    {"FailedCreate", "FailedCreatePod", "FailedToCreateHeadPod", "FailedToCreateWorkerPod"}
)


def event_finding(event: WarningEvent) -> Finding | None:
    """What one Event says by itself: the fallback when no pod is left to read (Kubeflow's
    RecordAbnormalPods copies container reasons onto the job; kubelet and scheduler events)."""
    reason, message = event.reason, event.message or ""
    pod_name = event.object_name if event.object_kind == "Pod" else None
    named = _POD_CONTAINER.search(message)
    if named:
        pod_name = named.group(1)
    container = named.group(2) if named else None
    exit_match = _EXIT_IN_MESSAGE.search(message)
    exit_code = int(exit_match.group(1)) if exit_match else None

    def make(category: DiagnosisCategory, **more: Any) -> Finding:
        return Finding(
            category,
            reason,
            event.message,
            since=event.first_seen,
            pod_name=pod_name,
            container_name=container,
            **more,
        )

    if reason == "OOMKilled" or reason == "OOMKilling":
        return make(C.OOM_KILLED, exit_code=exit_code or None, signal=_signal(exit_code, None))
    if reason in IMAGE_PULL_REASONS or (
        reason == "Failed" and ("Failed to pull image" in message or "ErrImagePull" in message)
    ):
        return make(C.IMAGE_PULL_FAILED)
    if reason in CONFIG_WAITING_REASONS or reason in (
        "FailedMount",
        "FailedAttachVolume",
        "FailedMapVolume",
        "PVCError",
        "ValidationError",
        "InvalidRayJobSpec",
    ):
        return make(C.CONFIG_ERROR)
    if reason.endswith("FailedValidation"):
        return make(C.CONFIG_ERROR)
    if reason == "CrashLoopBackOff" or (reason == "BackOff" and "restarting failed container" in message):
        return make(C.CRASH_LOOP)
    if (reason == "Error" and exit_code) or (reason == "ExitedWithCode" and exit_code):
        return make(C.EXIT_CODE, exit_code=exit_code, signal=_signal(exit_code, None))
    if reason == "Preempted":
        return make(C.PREEMPTED)
    if reason == "Evicted":
        match = _EVICTED_RESOURCE.search(message)
        return make(C.EVICTED, resource=match.group(1) if match else None)
    if reason in ("TaintManagerEviction", "NodeNotReady", "FailedCreatePodSandBox"):
        return make(C.NODE_FAILURE)
    if reason in QUOTA_EVENT_REASONS and (quota := _RESOURCEQUOTA.search(message)):
        return make(C.QUOTA_EXCEEDED, resource=quota.group(1))
    if reason == "FailedScheduling" or (reason == "Unschedulable" and event.object_kind != "PodGroup"):
        if _COSCHEDULING.search(message):
            return make(C.GANG_WAITING)
        resource = _preferred_resource(insufficient_resources(message))
        return make(C.UNSCHEDULABLE, resource=resource, blame=None if resource else Blame.USER_CONFIG)
    if reason == "PodGroupPending" or (reason == "Unschedulable" and event.object_kind == "PodGroup"):
        if "queue resource quota insufficient" in message:
            return make(C.QUEUE_WAITING)
        return make(C.GANG_WAITING)
    if reason == "Pending" and event.object_kind == "Workload":
        if _KUEUE_MAX.search(message):
            return Finding(C.QUOTA_EXCEEDED, reason, event.message, since=event.first_seen)
        return Finding(C.QUEUE_WAITING, reason, event.message, since=event.first_seen)
    return None


def _recent(events: Sequence[WarningEvent], job: JobEvidence, now: datetime) -> list[WarningEvent]:
    if job.terminal or job.phase in (Phase.FAILED, Phase.SUCCEEDED):
        return list(events)
    horizon = now - WARNING_HORIZON
    return [e for e in events if e.last_seen is None or e.last_seen >= horizon]


def warning_list(events: Sequence[WarningEvent], about_pod: str | None) -> list[DiagnosisWarning]:
    """Up to MAX_WARNING_EVENTS distinct Warning events (by reason and object), the diagnosed
    pod's first, then the most recent; each with its latest message and summed count."""
    distinct: dict[tuple[str, str | None, str | None], WarningEvent] = {}
    counts: dict[tuple[str, str | None, str | None], int] = {}
    for event in events:
        if event.type != "Warning":
            continue
        key = (event.reason, event.object_kind, event.object_name)
        counts[key] = counts.get(key, 0) + event.count
        held = distinct.get(key)
        if held is None or _ts(event.last_seen) >= _ts(held.last_seen):
            distinct[key] = event
    ordered = sorted(
        distinct.items(),
        key=lambda item: (
            item[1].object_name != about_pod or about_pod is None,
            -_ts(item[1].last_seen),
            item[0][0],
            item[0][2] or "",
        ),
    )
    out = []
    for key, event in ordered[:MAX_WARNING_EVENTS]:
        where = (
            f"{event.object_kind}/{event.object_name}" if event.object_kind and event.object_name else None
        )
        out.append(
            DiagnosisWarning(
                reason=event.reason[:128],
                message=(event.message or "")[:MAX_MESSAGE_CHARS],
                count=counts[key],
                last_seen=event.last_seen,
                object=where[:300] if where else None,
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# diagnose


def diagnose(
    job: JobEvidence,
    pods: Sequence[PodEvidence],
    events: Sequence[WarningEvent],
    workload: KueueWorkload | None,
    podgroup: PodGroupEvidence | None,
    now: datetime,
) -> Diagnosis | None:
    """The job's diagnosis, or None when there is nothing to explain (see the package docstring)."""
    if job.phase is Phase.SUCCEEDED:
        return None
    failing = job.phase in (Phase.FAILED, Phase.RESTARTING)
    pods = _focus(job, pods)
    findings = [f for pod in pods if (f := pod_finding(pod, include_past=failing)) is not None]
    events = _recent(events, job, now)
    event_findings = [f for e in events if (f := event_finding(e)) is not None]
    verdict, decisive = job_verdict(job)
    child = None if decisive else _first_failed_child_verdict(job, events)
    # A decisive child verdict explains the failure; a counting one (the child's backoff limit)
    # only replaces the JobSet's own "FailedJobs", which says nothing (Unknown).
    if child is not None and (child[1] or verdict is None or verdict.category is C.UNKNOWN):
        verdict, decisive = child

    chosen: Finding | None = None
    same: list[Finding] = []
    event_failures = [f for f in event_findings if f.category in FAILURES]
    if verdict is not None and decisive:
        chosen = _enrich(verdict, findings)
    elif failures := [f for f in findings if f.category in FAILURES]:
        chosen = _best(failures)
        same = [f for f in failures if chosen and _same(f, chosen)]
        if verdict is not None and verdict.category is C.BACKOFF_LIMIT_EXCEEDED and chosen is not None:
            chosen = replace(chosen, detail=_join(chosen.detail, "the job reached its backoff limit"))
    elif (failing or job.phase is Phase.RUNNING) and event_failures:
        chosen = _best(event_failures)
    elif job.phase is Phase.FAILED:
        chosen = verdict
    else:
        chosen = _waiting(job, findings, workload, podgroup)
        if chosen is not None:
            same = [f for f in findings if _same(f, chosen)]
        elif job.phase is not Phase.RUNNING:
            # No pod, queue or gang to read: what the events say, failures first.
            chosen = _best(event_failures) or _best(f for f in event_findings if f.category not in FAILURES)
    if chosen is None:
        return None
    if chosen.pod is not None and not same:
        same = [chosen]
    return _diagnosis(chosen, same, events, now)


def _same(finding: Finding, chosen: Finding) -> bool:
    """Whether a pod's finding is the chosen one again (counted in ``pods_affected``)."""
    return finding.category is chosen.category and finding.resource == chosen.resource


def _first_failed_child_verdict(
    job: JobEvidence, events: Sequence[WarningEvent]
) -> tuple[Finding, bool] | None:
    """A failed JobSet (or a TrainJob before Trainer v2.2, which copies the JobSet's condition)
    says only "FailedJobs ... (first failed job: <child>)": the child Job's own verdict is in the
    job controller's Warning on it, with its Failed condition's reason (reference §3.4, §3.1).
    Read as the job's own verdict would be (``job_verdict``), with whether it is decisive: a child
    that ran past its activeDeadlineSeconds or that a podFailurePolicy rule failed explains the
    JobSet's failure like its own deadline or rule would; a child that reached its backoff limit
    (or too many failed indexes) is a count whose cause is in its pods."""
    if job.kind not in ("jobset", "trainjob") or job.phase is not Phase.FAILED:
        return None
    _, message, _ = _failed_condition(job)
    match = _FIRST_FAILED_JOB.search(message or "")
    if not match:
        return None
    child = match.group(1)
    for event in events:
        if event.object_kind != "Job" or event.object_name != child:
            continue
        reason, since = event.reason, event.first_seen
        if reason == "DeadlineExceeded":
            return Finding(C.DEADLINE_EXCEEDED, reason, event.message, since=since), True
        if reason == "PodFailurePolicy":
            return _failure_policy(reason, event.message, since), True
        if reason in ("BackoffLimitExceeded", "MaxFailedIndexesExceeded", "FailedIndexes"):
            return Finding(C.BACKOFF_LIMIT_EXCEEDED, reason, event.message, since=since), False
    return None


def _focus(job: JobEvidence, pods: Sequence[PodEvidence]) -> Sequence[PodEvidence]:
    """For a JobSet/TrainJob whose failure names its first failed child Job, that Job's pods."""
    if job.kind not in ("jobset", "trainjob"):
        return pods
    _, message, _ = _failed_condition(job)
    match = _FIRST_FAILED_JOB.search(message or "")
    if not match:
        return pods
    child = match.group(1)
    focused = [p for p in pods if p.role is not None and f"{job.name}-{p.role}-{p.index}" == child]
    return focused or pods


def _waiting(
    job: JobEvidence,
    findings: Sequence[Finding],
    workload: KueueWorkload | None,
    podgroup: PodGroupEvidence | None,
) -> Finding | None:
    """Why a job that has not failed is not running: Kueue first (no pods exist before admission),
    then pods that cannot get a resource, then the gang, then pods that match no node."""
    unschedulable = [f for f in findings if f.category is C.UNSCHEDULABLE]
    with_resource = [f for f in unschedulable if f.resource]
    if job.phase is Phase.RUNNING:
        # Running, and a pod no node can take (a replacement, the last replica): that is news.
        return _best(with_resource) if with_resource else None
    found = workload_finding(workload) if workload is not None else None
    # Admitted, pods not ready yet (WaitForStart) is every admitted job's first moment: a pod that
    # no node can take is the reason it lasts.
    if found is not None and not (with_resource and found.reason == "WaitForStart"):
        return found
    if podgroup is not None and (found := podgroup_finding(podgroup)) is not None:
        # A gang that cannot start: its members' scheduler messages say what is short.
        if found.category is C.GANG_WAITING and found.resource is None and with_resource:
            best = _best(with_resource)
            found = replace(found, resource=best.resource if best else None)
        return found
    if with_resource:
        return _best(with_resource)
    gang = [f for f in findings if f.category is C.GANG_WAITING]
    if gang:
        return _best(gang)
    return _best(unschedulable)


def _enrich(verdict: Finding, findings: Sequence[Finding]) -> Finding:
    """A decisive job verdict, with the pod evidence of the pod it names (podFailurePolicy); a
    policy verdict that names no pod (JobSet's FailJobSet, Volcano's TerminateJob) takes the
    failed pod's."""
    if verdict.pod_name is None:
        failures = [f for f in findings if f.category in FAILURES and f.pod is not None]
        if verdict.category is C.POD_FAILURE_POLICY and (best := _best(failures)) is not None:
            return replace(
                verdict,
                pod=best.pod,
                container=best.container,
                container_name=best.container.name if best.container else None,
                exit_code=verdict.exit_code if verdict.exit_code is not None else best.exit_code,
                signal=verdict.signal if verdict.signal is not None else best.signal,
                restarts=best.restarts,
            )
        return verdict
    for finding in findings:
        if finding.pod is not None and finding.pod.name == verdict.pod_name:
            container = finding.container
            if verdict.container_name and (container is None or container.name != verdict.container_name):
                container = next(
                    (c for c in finding.pod.containers if c.name == verdict.container_name), None
                )
            return replace(verdict, pod=finding.pod, container=container, restarts=finding.restarts)
    return verdict


def _join(*parts: str | None) -> str | None:
    joined = "; ".join(p for p in parts if p)
    return joined or None


def _clamp(value: datetime | None, now: datetime) -> datetime | None:
    if value is None:
        return None
    return min(value, now)


SIGNAL_NAMES = {int(s): s.name for s in signals.Signals}


def _who(f: Finding) -> str:
    pod = f.pod
    role = pod.role if pod else None
    index = pod.index if pod else None
    name = pod.name if pod else f.pod_name
    if role:
        who = f"{role}-{index}" if index is not None else role
    elif name:
        who = f"pod {name}"
    else:
        who = "the job"
    container = f.container.name if f.container else f.container_name
    return f"{who} ({container})" if container and role else who


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _summary(f: Finding, count: int) -> str:
    who = _who(f)
    if count > 1:  # "worker-3 (pytorch) [+2 more pods] keeps crashing"
        who += f" [+{_plural(count - 1, 'more pod')}]"
    code = f.exit_code
    sig = f" (signal {f.signal} {SIGNAL_NAMES.get(f.signal or 0, '')})".replace(" )", ")") if f.signal else ""
    restarts = f", restarted {_plural(f.restarts, 'time')}" if f.restarts else ""
    message = f": {f.message}" if f.message else ""
    c = f.category
    if c is C.OOM_KILLED:
        text = f"{who} was killed for running out of memory (OOMKilled{f', exit {code}' if code else ''})"
        text += restarts
    elif c is C.IMAGE_PULL_FAILED:
        text = f"{who} cannot pull its image ({f.reason}){message}"
    elif c is C.CONFIG_ERROR:
        text = f"{who} cannot start: {f.reason or 'invalid spec'}{message}"
        if f.pod is None and f.pod_name is None:
            text = f"the job's spec was refused: {f.reason or 'invalid'}{message}"
            if f.queue:
                text = f"its queue {f.queue} is misconfigured{message}"
    elif c is C.CRASH_LOOP:
        last = f" (last exit {code}{sig})" if code is not None else ""
        text = f"{who} keeps crashing{last}{restarts}"
    elif c is C.EXIT_CODE:
        text = f"{who} exited with code {code}{sig}{restarts}"
    elif c is C.PREEMPTED:
        text = f"{who} was preempted for a higher-priority workload"
        if f.pod is None and f.queue:
            text = f"preempted by Kueue in queue {f.queue}{message}"
    elif c is C.EVICTED:
        text = f"{who} was evicted{message}"
    elif c is C.NODE_FAILURE:
        node = f" {f.pod.node}" if f.pod and f.pod.node else ""
        text = f"{who} was lost with its node{node} ({f.reason}){message}"
    elif c is C.UNSCHEDULABLE:
        if f.resource:
            text = f"{who} cannot be scheduled: no node has enough free {f.resource}"
        else:
            text = f"{who} cannot be scheduled: no node matches its constraints{message}"
    elif c is C.GANG_WAITING:
        gang = f" ({f.detail} running)" if f.detail and "/" in f.detail else ""
        text = f"waiting for the whole gang to be scheduled together{gang}{message}"
    elif c is C.QUEUE_WAITING:
        where = f" in queue {f.queue}" if f.queue else ""
        position = f", position {f.position + 1}" if f.position is not None else ""
        short = f" (short of {f.resource})" if f.resource else ""
        text = f"waiting for quota{where}{position}{short}"
        if f.detail == "stopped":
            text = f"waiting: the queue{where.replace(' in queue', '')} is stopped{message}"
    elif c is C.QUOTA_EXCEEDED:
        what = f.resource or "resources"
        where = f" of queue {f.queue}" if f.queue else ""
        text = f"asks for more {what} than the quota{where} allows"
    elif c is C.DEADLINE_EXCEEDED:
        text = f"ran longer than its deadline ({f.reason or 'activeDeadlineSeconds'})"
    elif c is C.BACKOFF_LIMIT_EXCEEDED:
        text = f"failed too many times and reached its retry limit ({f.reason or 'BackoffLimitExceeded'})"
    elif c is C.POD_FAILURE_POLICY:
        if f.container_name and code is not None:
            text = f"stopped by its podFailurePolicy: {who} exited with code {code}{sig}"
        else:
            text = f"stopped by its podFailurePolicy{message}"
    else:
        text = f"failed: {f.reason or 'no reason given'}{message}"
    if f.detail and c not in (C.GANG_WAITING, C.QUEUE_WAITING, C.POD_FAILURE_POLICY):
        text += f"; {f.detail}" if c is not C.CRASH_LOOP else ""
    text = " ".join(text.split())
    return text if len(text) <= MAX_SUMMARY_CHARS else text[: MAX_SUMMARY_CHARS - 1] + "…"


def _diagnosis(
    f: Finding, same: Sequence[Finding], events: Sequence[WarningEvent], now: datetime
) -> Diagnosis:
    pod, container = f.pod, f.container
    times = [x.since for x in same if x.since is not None] + ([f.since] if f.since else [])
    pods_affected = len({x.pod.name for x in same if x.pod is not None}) or (1 if f.pod_name else 0)
    return Diagnosis(
        category=f.category,
        blame=f.blame or BLAME[f.category],
        summary=_summary(f, pods_affected),
        reason=f.reason[:256] if f.reason else None,
        message=f.message[:MAX_MESSAGE_CHARS] if f.message else None,
        role=pod.role if pod else None,
        replica_index=pod.index if pod else None,
        pod=pod.name if pod else f.pod_name,
        container=container.name if container else f.container_name,
        exit_code=f.exit_code,
        signal=f.signal,
        restarts=f.restarts if f.restarts is not None else (container.restarts if container else None),
        node=pod.node if pod else None,
        resource=f.resource,
        queue=f.queue,
        cluster_queue=f.cluster_queue,
        position=f.position,
        pods_affected=pods_affected,
        since=_clamp(min(times), now) if times else None,
        events=warning_list(events, pod.name if pod else f.pod_name),
    )


# ---------------------------------------------------------------------------------------------
# News, and the log tail


def _position_news(old: int | None, new: int | None) -> bool:
    if old is None or new is None:
        return False  # the visibility API answering or not is not news
    if new == old:
        return False
    if new == 0:
        return True
    return new <= old / 2 or new >= old * 2


def diagnosis_changed(old: Diagnosis | None, new: Diagnosis | None) -> bool:
    """Whether ``new`` is news after ``old`` (docs/contracts.md "Diagnosis updates").

    News: a diagnosis appearing or clearing; a change of category, blame, role, resource, queue,
    cluster queue, container or exit code; the affected pods crossing one -> many; a queue position
    halving, doubling or reaching the head (0). Not news: the same evidence again, another pod of
    the same role, a later ``since``, counts, messages, events, log lines, small position moves.
    """
    if old is None or new is None:
        return old is not new
    key = ("category", "blame", "role", "resource", "queue", "cluster_queue", "container", "exit_code")
    if any(getattr(old, name) != getattr(new, name) for name in key):
        return True
    if (old.pods_affected > 1) != (new.pods_affected > 1):
        return True
    return _position_news(old.position, new.position)


@dataclass(frozen=True, slots=True)
class LogRequest:
    pod: str
    container: str
    previous: bool


LOG_CATEGORIES = frozenset(
    {C.OOM_KILLED, C.CRASH_LOOP, C.EXIT_CODE, C.POD_FAILURE_POLICY, C.BACKOFF_LIMIT_EXCEEDED, C.CONFIG_ERROR}
)


def log_request(diagnosis: Diagnosis | None, pods: Sequence[PodEvidence]) -> LogRequest | None:
    """Which container's log explains the diagnosis: the failed instance, i.e. ``previous`` when the
    container was restarted and is not itself the terminated one. None when no log can help
    (waiting for a node or a queue, image not pulled: the container never ran)."""
    if (
        diagnosis is None
        or diagnosis.category not in LOG_CATEGORIES
        or not diagnosis.pod
        or not diagnosis.container
    ):
        return None
    for pod in pods:
        if pod.name != diagnosis.pod:
            continue
        for container in pod.containers:
            if container.name == diagnosis.container:
                if (
                    container.state == "waiting"
                    and container.reason != "CrashLoopBackOff"
                    and not container.last_reason
                ):
                    return None  # never ran (e.g. CreateContainerConfigError)
                previous = container.state != "terminated" and container.restarts > 0
                return LogRequest(pod.name, container.name, previous)
    return LogRequest(diagnosis.pod, diagnosis.container, False)


def attach_log_tail(diagnosis: Diagnosis, text: str, request: LogRequest) -> Diagnosis:
    """The diagnosis with the redacted, bounded tail of the log ``request`` fetched."""
    return diagnosis.model_copy(
        update={"log_tail": log_tail(text, container=request.container, previous=request.previous)}
    )
