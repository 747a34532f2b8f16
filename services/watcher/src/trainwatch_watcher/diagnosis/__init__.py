"""Why a job failed, restarts or waits: a pure engine (no I/O, no adapters; import-linter checks).

Inputs are trimmed evidence (:mod:`.evidence`): the job's normalized status and raw conditions, its
pods, Warning events about it and its pods, its Kueue Workload and its PodGroup. Output is the
contract's :class:`~trainwatch_common.events.diagnosis.Diagnosis`, or None when there is nothing
to explain. Vocabulary: ../shared/reference/diagnosis.md §9.

Precedence of :func:`diagnose` (the first rule that yields wins):

1. A **Succeeded** job has nothing to explain: None.
2. A **decisive job verdict** of a Failed job: ``DeadlineExceeded`` (Job / TrainJob / RayJob
   reasons, Kubeflow's "active longer than specified deadline", Kueue
   ``MaximumExecutionTimeExceeded``, a JobSet's first failed child Job's ``DeadlineExceeded``
   Warning), ``PodFailurePolicy`` (Job ``PodFailurePolicy``, JobSet
   ``FailJobSetFailurePolicyAction``, a JobSet's first failed child Job's ``PodFailurePolicy``
   Warning, a Volcano Job ``Terminated``/``Aborted`` by its policy; the
   container, pod and exit code read from the rule's message and enriched with that pod's evidence,
   or taken from the failed pod when the verdict names none), ``ConfigError`` (``<Kind>FailedValidation``,
   ``ValidationFailed``, ``ValidationError``, ``TrainingRuntimeNotSupported``). These explain the
   failure by themselves: pods killed by a deadline are its consequence, not its cause.
3. **Pod failures**, the root cause among them: per pod, OOMKilled (current or last state) beats
   everything, then the pod's disruption — ``DisruptionTarget`` ``PreemptionByScheduler`` ->
   Preempted, ``EvictionByEvictionAPI``/``TerminationByKubelet`` or ``status.reason`` Evicted ->
   Evicted, ``DeletionByTaintManager``/``DeletionByPodGC``, ``NodeLost``, node shutdown,
   ``UnexpectedAdmissionError``, ``ContainerStatusUnknown`` -> NodeFailure (all infrastructure, so a
   137/143 after a disruption is never called the user's exit code) — then container states:
   waiting ``ErrImagePull``/``ImagePullBackOff``/... -> ImagePullFailed,
   ``CreateContainerConfigError``/``InvalidImageName``/``CreateContainerError``/``RunContainerError``
   and terminated ``StartError`` (exit 128) -> ConfigError, ``CrashLoopBackOff`` -> CrashLoop (its
   cause from ``lastState``; a last state of OOMKilled makes it OOMKilled), terminated non-zero ->
   ExitCode; pod ``DeadlineExceeded`` -> DeadlineExceeded. A job that is Failed or Restarting also
   counts containers that failed and were restarted (``lastState``); a Running or Pending job only
   what is failing now. Across pods the earliest failure wins (``since``), except that within
   ``SAME_MOMENT`` (5 s) the higher-ranked category wins (an OOM kill beats the peers' exit 1 it
   caused); ties go to master/chief/launcher/head first, then the pod name. For a JobSet/TrainJob,
   pods of the "first failed job" the failure message names are looked at first. A counting
   verdict (BackoffLimitExceeded, restarts exhausted) is added to the summary, not the category:
   the root cause is the news.
4. **Events**, for a Failed, Restarting or Running job with no pod failure left to read (pods
   cleaned up): Kubeflow's re-posted container reasons (``OOMKilled``, ``CrashLoopBackOff``,
   ``ImagePullBackOff``, ``Error ... exitCode: n``), kubelet ``Failed to pull image``, ``BackOff``,
   ``Evicted``, scheduler ``Preempted``, ``FailedMount``...
5. A **Failed** job with none of the above: its counting verdict (``BackoffLimitExceeded``,
   Kubeflow "reached the specified backoff limit", MPI v2beta1 ``BackoffLimitExceeded/<podReason>``
   — ``/Evicted`` is Evicted —, ``MPIJobEvicted`` -> Evicted, JobSet ``ReachedMaxRestarts``, a
   JobSet's first failed child Job's ``BackoffLimitExceeded`` Warning (for a JobSet ``FailedJobs``),
   RayJob ``SubmissionFailed`` with a backoff, Volcano ``Failed``); RayJob ``AppFailed`` (or a
   SidecarMode head container) naming an exit code -> ExitCode; else Unknown with its reason.
6. **Waiting** (Pending, Suspended, Restarting without pod failure): the Kueue Workload first (no
   pods exist before admission): evicted ``Preempted`` -> Preempted, ``NodeFailures`` ->
   NodeFailure, ``PodsReadyTimeout`` or admitted with ``PodsReady=False WaitForStart`` ->
   GangWaiting; not ``QuotaReserved``: ``... > maximum capacity`` / ``ExceedsMaxQuota`` ->
   QuotaExceeded, missing LocalQueue/ClusterQueue -> ConfigError, otherwise QueueWaiting with the
   queue, the short resource and the visibility API's position — except that an admitted
   Workload whose pods are not ready yet (``WaitForStart``) yields to pods short of a resource.
   Then the PodGroup (gang not satisfied -> GangWaiting, with the resource its pods' scheduler
   messages find short; Volcano's "queue resource quota insufficient" -> QueueWaiting), then pods
   ``PodScheduled=False Unschedulable`` naming ``Insufficient <resource>`` -> Unschedulable (a GPU
   resource is preferred when several are short; also for a Running job), then pods whose scheduler
   message is a coscheduling one -> GangWaiting, then other unschedulable pods (taints, affinity)
   -> Unschedulable blamed on the user's config, then waiting events (``FailedScheduling``,
   ``PodGroupPending``, ResourceQuota ``exceeded quota`` -> QuotaExceeded, Kueue ``Pending``).
7. Nothing: None.

Blame per category is :data:`.engine.BLAME` (RegistryUnavailable and a podFailurePolicy matching a
``DisruptionTarget`` condition are infrastructure; an unschedulable pod with no short resource is
the user's constraint). ``signal`` is the API's or ``exit code - 128`` above 128. ``since`` is the
earliest timestamp of the evidence of the chosen category (clamped to ``now``).

What is news is :func:`diagnosis_changed` (docs/contracts.md "Diagnosis updates").
"""

from trainwatch_watcher.diagnosis.engine import (
    LogRequest,
    attach_log_tail,
    diagnose,
    diagnosis_changed,
    log_request,
)
from trainwatch_watcher.diagnosis.evidence import (
    Condition,
    ContainerEvidence,
    JobEvidence,
    KueueWorkload,
    PodEvidence,
    PodGroupEvidence,
    WarningEvent,
    job_evidence,
    trim_event,
    trim_pod,
    trim_podgroup,
    trim_workload,
)
from trainwatch_watcher.diagnosis.redact import log_tail, redact
from trainwatch_watcher.diagnosis.resources import job_times, summarize_resources
from trainwatch_watcher.diagnosis.selectors import KIND_POD_SELECTORS, index_of, pod_selector, role_of

__all__ = [
    "KIND_POD_SELECTORS",
    "Condition",
    "ContainerEvidence",
    "JobEvidence",
    "KueueWorkload",
    "LogRequest",
    "PodEvidence",
    "PodGroupEvidence",
    "WarningEvent",
    "attach_log_tail",
    "diagnose",
    "diagnosis_changed",
    "index_of",
    "job_evidence",
    "job_times",
    "log_request",
    "log_tail",
    "pod_selector",
    "redact",
    "role_of",
    "summarize_resources",
    "trim_event",
    "trim_pod",
    "trim_podgroup",
    "trim_workload",
]
