"""The precedence of diagnose() (package docstring), one rule at a time."""

from __future__ import annotations

from typing import Any

from diagnosis_testkit import (
    at,
    condition,
    container_status,
    core_event,
    disruption,
    failed_condition,
    job,
    jobset_labels,
    kubeflow_labels,
    pod,
    run,
    running,
    sp_podgroup,
    terminated,
    unschedulable,
    volcano_podgroup,
    waiting,
    workload,
)

from trainwatch_common.events.diagnosis import Blame, DiagnosisCategory
from trainwatch_common.events.jobs import Phase
from trainwatch_watcher.diagnosis.evidence import JobEvidence

C = DiagnosisCategory
FAILED_PT = failed_condition(
    "PyTorchJobFailed", "PyTorchJob bert is failed because 2 Worker replica(s) failed."
)


def worker(index: int, state: dict[str, Any], *, rtype: str = "worker", **kwargs: Any) -> dict[str, Any]:
    last = kwargs.pop("last", None)
    restarts = kwargs.pop("restarts", 0)
    return pod(
        f"bert-{rtype}-{index}",
        kubeflow_labels("pytorchjob", "bert", rtype, index),
        container_name="pytorch",
        containers=[container_status("pytorch", state, last=last, restarts=restarts)],
        **kwargs,
    )


def pending_worker(index: int, message: str, minutes: float = 0) -> dict[str, Any]:
    return pod(
        f"bert-worker-{index}",
        kubeflow_labels("pytorchjob", "bert", "worker", index),
        phase="Pending",
        node=None,
        containers=[],
        conditions=unschedulable(message, minutes),
    )


def failed_pt() -> JobEvidence:
    return job("pytorchjob", Phase.FAILED, conditions=[FAILED_PT], reason="PyTorchJobFailed")


def test_oom_beats_the_peers_exit_codes_it_caused_within_the_same_moment() -> None:
    pods = [
        worker(
            0, terminated("Error", 1, finished=10.0), phase="Failed"
        ),  # NCCL error 2 s before the OOM shows
        worker(1, terminated("OOMKilled", 137, finished=10.04), phase="Failed"),
        worker(2, terminated("Error", 1, finished=10.05), phase="Failed"),
    ]
    d = run(failed_pt(), pods)
    assert d is not None
    assert (d.category, d.pod) == (C.OOM_KILLED, "bert-worker-1")


def test_the_earliest_failure_is_the_root_cause() -> None:
    pods = [
        worker(0, terminated("Error", 1, finished=10), phase="Failed"),
        worker(
            1, terminated("OOMKilled", 137, finished=25), phase="Failed"
        ),  # 15 minutes later: a second problem
    ]
    d = run(failed_pt(), pods)
    assert d is not None
    assert (d.category, d.pod, d.since) == (C.EXIT_CODE, "bert-worker-0", at(10))


def test_a_preempted_pod_beats_its_own_sigkill_and_the_peers_errors() -> None:
    pods = [
        worker(
            0,
            terminated("Error", 137, finished=12),
            phase="Failed",
            conditions=[disruption("PreemptionByScheduler", "preempting", 11.95)],
        ),
        worker(1, terminated("Error", 1, finished=12.02), phase="Failed"),
    ]
    d = run(failed_pt(), pods)
    assert d is not None
    assert (d.category, d.pod, d.blame) == (C.PREEMPTED, "bert-worker-0", Blame.INFRASTRUCTURE)


def test_oom_in_the_same_pod_beats_a_disruption() -> None:
    p = worker(
        0,
        terminated("OOMKilled", 137),
        phase="Failed",
        conditions=[disruption("TerminationByKubelet", "node memory pressure", 10)],
    )
    d = run(failed_pt(), [p])
    assert d is not None
    assert d.category is C.OOM_KILLED


def test_ties_go_to_the_master_then_the_name() -> None:
    pods = [
        worker(1, terminated("Error", 3, finished=10), phase="Failed"),
        worker(0, terminated("Error", 3, finished=10), rtype="master", phase="Failed"),
        worker(0, terminated("Error", 3, finished=10), phase="Failed"),
    ]
    d = run(failed_pt(), pods)
    assert d is not None
    assert (d.role, d.pod, d.pods_affected) == ("master", "bert-master-0", 3)
    assert d.summary == "master-0 (pytorch) [+2 more pods] exited with code 3"


def test_a_deadline_beats_the_pods_it_killed() -> None:
    reason, message = (
        "PyTorchJobFailed",
        "Job bert has failed because it was active longer than specified deadline",
    )
    pods = [worker(0, terminated("OOMKilled", 137), phase="Failed")]
    d = run(job("pytorchjob", Phase.FAILED, conditions=[failed_condition(reason, message)]), pods)
    assert d is not None
    assert d.category is C.DEADLINE_EXCEEDED


def test_a_running_job_ignores_restarts_that_are_over() -> None:
    p = worker(0, running(40), last=terminated("Error", 1, finished=30), restarts=1)
    assert run(job("pytorchjob", Phase.RUNNING), [p]) is None


def test_a_restarting_job_counts_restarts_that_are_over() -> None:
    p = worker(0, running(40), last=terminated("Error", 1, finished=30), restarts=1)
    d = run(job("pytorchjob", Phase.RESTARTING, reason="PyTorchJobRestarting"), [p])
    assert d is not None
    assert (d.category, d.exit_code, d.restarts, d.since) == (C.EXIT_CODE, 1, 1, at(30))


def test_kueue_explains_before_the_pods_do() -> None:
    wl = workload(
        [condition("QuotaReserved", "False", "Pending", "insufficient unused quota for cpu in flavor x", 1)]
    )
    p = pending_worker(0, "0/3: 3 Insufficient cpu.")
    d = run(job("pytorchjob", Phase.PENDING), [p], [], wl)
    assert d is not None
    assert d.category is C.QUEUE_WAITING


def test_an_admitted_workload_lets_the_pods_explain() -> None:
    wl = workload(
        [
            condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved", 1),
            condition("Admitted", "True", "Admitted", "admitted", 1),
        ],
        cluster_queue="cq",
    )
    p = pending_worker(0, "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", 2)
    d = run(job("pytorchjob", Phase.PENDING), [p], [], wl)
    assert d is not None
    assert (d.category, d.resource) == (C.UNSCHEDULABLE, "nvidia.com/gpu")


def test_the_gang_beats_a_short_resource_and_names_it_and_the_gang_beats_constraints() -> None:
    gpu = pending_worker(0, "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    taint = pending_worker(1, "0/3 nodes are available: 3 node(s) had untolerated taint {a: b}.")
    pg = sp_podgroup("Pending", min_member=2)
    d = run(job("pytorchjob", Phase.PENDING), [gpu, taint], [], None, pg)
    assert d is not None
    # kubesim's ground truth: a gang that cannot start is GangWaiting, short of what its pods lack.
    assert (d.category, d.resource) == (C.GANG_WAITING, "nvidia.com/gpu")
    d = run(job("pytorchjob", Phase.PENDING), [gpu, taint], [], None, None)
    assert d is not None
    assert (d.category, d.resource) == (C.UNSCHEDULABLE, "nvidia.com/gpu")
    d = run(job("pytorchjob", Phase.PENDING), [taint], [], None, pg)
    assert d is not None
    assert d.category is C.GANG_WAITING
    d = run(
        job("pytorchjob", Phase.PENDING), [taint], [], None, sp_podgroup("Running", min_member=2, running=2)
    )
    assert d is not None
    assert (d.category, d.blame) == (C.UNSCHEDULABLE, Blame.USER_CONFIG)


def test_pod_failures_beat_waiting_evidence_on_a_pending_job() -> None:
    p = worker(0, waiting("ImagePullBackOff", 'Back-off pulling image "x"'), phase="Pending")
    pg = volcano_podgroup("Inqueue", message="3/4 tasks in gang unschedulable")
    d = run(job("pytorchjob", Phase.PENDING), [p], [], None, pg)
    assert d is not None
    assert d.category is C.IMAGE_PULL_FAILED


def test_pods_beat_events() -> None:
    events = [
        core_event(
            "OOMKilled",
            "Error pod bert-worker-9 container pytorch exitCode: 137",
            kind="PyTorchJob",
            name="bert",
        )
    ]
    d = run(failed_pt(), [worker(0, terminated("Error", 2, finished=10), phase="Failed")], events)
    assert d is not None
    assert (d.category, d.pod) == (C.EXIT_CODE, "bert-worker-0")


def test_jobset_looks_at_the_first_failed_job_first() -> None:
    message = "jobset failed due to one or more job failures (first failed job: bert-workers-2)"
    labels = {i: jobset_labels("bert", "workers", i) for i in (0, 2)}
    pods = [
        pod(
            "bert-workers-0-0-aaaaa",
            labels[0],
            phase="Failed",
            containers=[container_status("main", terminated("Error", 143, finished=10))],
        ),
        pod(
            "bert-workers-2-0-bbbbb",
            labels[2],
            phase="Failed",
            containers=[container_status("main", terminated("Error", 1, finished=11))],
        ),
    ]
    d = run(job("jobset", Phase.FAILED, conditions=[failed_condition("FailedJobs", message)]), pods)
    assert d is not None
    assert (d.pod, d.exit_code, d.role, d.replica_index) == ("bert-workers-2-0-bbbbb", 1, "workers", 2)


def test_since_is_the_earliest_evidence_of_the_category_and_never_in_the_future() -> None:
    pods = [
        worker(
            0, waiting("CrashLoopBackOff", "back-off"), last=terminated("Error", 1, finished=20), restarts=3
        ),
        worker(
            1, waiting("CrashLoopBackOff", "back-off"), last=terminated("Error", 1, finished=14), restarts=5
        ),
    ]
    d = run(job("pytorchjob", Phase.RUNNING), pods)
    assert d is not None
    assert (d.category, d.since, d.pods_affected) == (C.CRASH_LOOP, at(14), 2)
    future = [worker(0, terminated("Error", 1, finished=600), phase="Failed")]
    d = run(failed_pt(), future)
    assert d is not None
    assert d.since is not None
    assert d.since <= at(60)


def test_a_jobset_whose_first_failed_job_hit_its_deadline_is_deadline_exceeded() -> None:
    """The JobSet says only "FailedJobs ... (first failed job: X)"; the job controller's Warning on
    child Job X says it ran past activeDeadlineSeconds (reference §3.4, §3.1). The pods the
    deadline killed (SIGTERM, 143) are its consequence, not the cause."""
    message = "jobset failed due to one or more job failures (first failed job: bert-workers-2)"
    deadline = core_event(
        "DeadlineExceeded", "Job was active longer than specified deadline", kind="Job", name="bert-workers-2"
    )
    killed = pod(
        "bert-workers-2-0-bbbbb",
        jobset_labels("bert", "workers", 2),
        phase="Failed",
        containers=[container_status("main", terminated("Error", 143, finished=10))],
    )
    failed = job("jobset", Phase.FAILED, conditions=[failed_condition("FailedJobs", message)])
    for pods in ([], [killed]):
        d = run(failed, pods, [deadline])
        assert d is not None
        assert d.category is C.DEADLINE_EXCEEDED, pods
        assert d.blame is Blame.USER_CONFIG
    # The same Warning about another child Job than the first failed one does not explain it.
    other = core_event(
        "DeadlineExceeded", "Job was active longer than specified deadline", kind="Job", name="bert-workers-0"
    )
    d = run(failed, [killed], [other])
    assert d is not None
    assert d.category is C.EXIT_CODE


def test_a_jobset_whose_first_failed_job_a_pod_failure_policy_rule_failed_is_pod_failure_policy() -> None:
    """The child Job's own verdict, read from the job controller's Warning on it: a FailJob rule
    of its podFailurePolicy (reference §3.1) explains the JobSet's failure, with the container,
    pod and exit code of the rule's message, whether the pods are still there or not."""
    message = "jobset failed due to one or more job failures (first failed job: bert-workers-2)"
    rule = core_event(
        "PodFailurePolicy",
        "Container main for pod default/bert-workers-2-0-bbbbb failed with exit code 42 matching FailJob "
        "rule at index 0",
        kind="Job",
        name="bert-workers-2",
    )
    failed_pod = pod(
        "bert-workers-2-0-bbbbb",
        jobset_labels("bert", "workers", 2),
        phase="Failed",
        containers=[container_status("main", terminated("Error", 42, finished=10))],
    )
    failed = job("jobset", Phase.FAILED, conditions=[failed_condition("FailedJobs", message)])
    for pods in ([], [failed_pod]):
        d = run(failed, pods, [rule])
        assert d is not None
        assert (d.category, d.container, d.exit_code) == (C.POD_FAILURE_POLICY, "main", 42), pods
        assert d.pod == "bert-workers-2-0-bbbbb"


def test_a_jobset_whose_first_failed_job_reached_its_backoff_limit_says_so_or_names_the_pods_cause() -> None:
    """A child Job's ``BackoffLimitExceeded`` is a count, not a cause: with the child's failed pods
    still there the root cause is theirs (the limit in the summary); with them cleaned up the
    JobSet's failure is BackoffLimitExceeded, not the Unknown its "FailedJobs" alone gives."""
    message = "jobset failed due to one or more job failures (first failed job: bert-workers-2)"
    limit = core_event(
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
        kind="Job",
        name="bert-workers-2",
    )
    failed = job("jobset", Phase.FAILED, conditions=[failed_condition("FailedJobs", message)])
    d = run(failed, [], [limit])
    assert d is not None
    assert (d.category, d.reason) == (C.BACKOFF_LIMIT_EXCEEDED, "BackoffLimitExceeded")
    crashed = pod(
        "bert-workers-2-0-bbbbb",
        jobset_labels("bert", "workers", 2),
        phase="Failed",
        containers=[container_status("main", terminated("Error", 1, finished=10))],
    )
    d = run(failed, [crashed], [limit])
    assert d is not None
    assert (d.category, d.exit_code, d.pod) == (C.EXIT_CODE, 1, "bert-workers-2-0-bbbbb")
    assert "backoff limit" in d.summary
    # The same Warning about another child Job than the first failed one does not explain it.
    other = core_event(
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
        kind="Job",
        name="bert-workers-0",
    )
    d = run(failed, [], [other])
    assert d is None or d.category is not C.BACKOFF_LIMIT_EXCEEDED
