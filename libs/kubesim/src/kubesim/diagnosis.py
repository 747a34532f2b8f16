"""The ground truth of a diagnosis scenario: what a correct diagnosis of the job says.

A diagnosis scenario (``ScenarioDriver.run_diagnosis``) drives one job, its pods, its Events and
(where they apply) its Kueue Workload and PodGroup into one of the categories of issue 16, and
returns a :class:`DiagnosisTruth`. The category is the cause a user should act on first:

* a job-level policy names it outright: ``DeadlineExceeded``, ``PodFailurePolicy``;
* ``BackoffLimitExceeded`` when the job used up its retries over **more than one** failed attempt
  (``cause`` holds the last attempt's pod-level category, e.g. ``ExitCode``);
* otherwise the pod-level signal of the failing pod (``OOMKilled``, ``ExitCode``, ``Preempted``...),
  even when the job's own condition says "backoff limit" after a single attempt;
* for a job that waits: ``Unschedulable`` (one pod, with ``resource``), ``GangWaiting`` (the
  PodGroup holds the gang), ``QueueWaiting`` (Kueue, with ``queue`` and ``position``),
  ``QuotaExceeded`` (a ResourceQuota refused the pods), ``ImagePullFailed``/``ConfigError``;
* ``Unknown`` when the job failed and nothing explains it.

``signal`` follows the 128+N convention (137 -> 9): the API's ``terminated.signal`` is 0 with CRI
runtimes, so it is not written into the pod.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from kubesim.kinds import KindSpec

__all__ = ["BLAME", "CATEGORIES", "Blame", "DiagnosisTruth", "NotApplicable", "applies"]

CATEGORIES = (
    "OOMKilled",
    "ImagePullFailed",
    "CrashLoop",
    "ExitCode",
    "Preempted",
    "Evicted",
    "NodeFailure",
    "Unschedulable",
    "GangWaiting",
    "QueueWaiting",
    "QuotaExceeded",
    "DeadlineExceeded",
    "BackoffLimitExceeded",
    "ConfigError",
    "PodFailurePolicy",
    "Unknown",
)

Blame = Literal["user", "infrastructure", "policy", "unknown"]

BLAME: dict[str, Blame] = {
    "OOMKilled": "user",
    "ImagePullFailed": "user",
    "CrashLoop": "user",
    "ExitCode": "user",
    "ConfigError": "user",
    "DeadlineExceeded": "user",
    "BackoffLimitExceeded": "user",
    "Preempted": "policy",
    "QueueWaiting": "policy",
    "QuotaExceeded": "policy",
    "PodFailurePolicy": "policy",
    "Evicted": "infrastructure",
    "NodeFailure": "infrastructure",
    "Unschedulable": "infrastructure",
    "GangWaiting": "infrastructure",
    "Unknown": "unknown",
}
"""Whether a category points at the user's code or config, the infrastructure, or a policy
(reference §9 of ``diagnosis.md``: U / I / P)."""

_POD_LEVEL = frozenset(
    {
        "OOMKilled",
        "ImagePullFailed",
        "CrashLoop",
        "ExitCode",
        "Preempted",
        "Evicted",
        "NodeFailure",
        "Unschedulable",
        "ConfigError",
        "QuotaExceeded",
        "BackoffLimitExceeded",
        "Unknown",
    }
)
# Kueue integrations (reference §4.1): no Volcano Job, and kubeflow.org/mpijob is mpi-operator's v2beta1.
_KUEUE_FAMILIES = frozenset({"batch", "kubeflow", "mpi-v2", "jobset", "trainjob", "ray"})
_GANG_FAMILIES = frozenset({"kubeflow", "mpi-v2", "trainjob", "volcano", "ray"})
_DEADLINE_FAMILIES = frozenset({"batch", "kubeflow", "mpi-v2", "jobset", "trainjob", "ray"})
_POLICY_FAMILIES = frozenset({"batch", "jobset", "trainjob", "volcano"})


class NotApplicable(ValueError):
    """The category does not apply to this kind, or the cluster lacks what it needs."""


def applies(
    category: str, spec: KindSpec, *, kueue: bool = True, volcano: bool = True, coscheduling: bool = True
) -> bool:
    """Whether ``category`` applies to ``spec`` (on a cluster with those schedulers installed)."""
    family = spec.family
    if category in _POD_LEVEL:
        return True
    if category == "QueueWaiting":
        return kueue and family in _KUEUE_FAMILIES and not (spec.kind == "MPIJob" and spec.version == "v1")
    if category == "GangWaiting":
        if family not in _GANG_FAMILIES:
            return False
        if family in ("volcano", "ray"):
            return volcano
        return volcano or coscheduling
    if category == "DeadlineExceeded":
        return family in _DEADLINE_FAMILIES
    if category == "PodFailurePolicy":
        return family in _POLICY_FAMILIES
    raise KeyError(f"unknown category {category!r}")


@dataclass(frozen=True, slots=True)
class DiagnosisTruth:
    """What a correct diagnosis of one job says after its scenario ran.

    ``phase``/``sub_phase``/``terminal``: the job's normalized state at the end (as in the
    ``TruthLog``). ``role``: the replica type / task / replicated job / Ray group of the pod to
    blame (``None`` for a plain Job or a job-level cause). ``pod``, ``container``, ``node``,
    ``exit_code``, ``signal``: that pod's evidence. ``resource``: the short resource of
    ``Unschedulable``/``GangWaiting``/``QuotaExceeded`` (``nvidia.com/gpu``). ``queue`` (LocalQueue),
    ``cluster_queue``, ``position`` (0-based in the ClusterQueue) and ``local_position``: Kueue's
    visibility answer. ``reason``/``message``: the raw upstream reason and text that identify it.
    ``cause``: for ``BackoffLimitExceeded``, the last attempt's category. ``warnings``: the reasons
    of the Warning Events written for the job and its pods, distinct, oldest first. ``log_tail``:
    the last lines of the blamed container's log (``previous_log``: of its previous instance),
    ``log_secret``: a secret-looking string in that log a diagnosis must redact. ``since``: when the
    cause appeared (RFC 3339).
    """

    cluster: str
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    category: str
    blame: Blame
    phase: str
    sub_phase: str | None
    terminal: bool
    since: str
    reason: str = ""
    message: str = ""
    role: str | None = None
    pod: str | None = None
    container: str | None = None
    node: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    resource: str | None = None
    queue: str | None = None
    cluster_queue: str | None = None
    position: int | None = None
    local_position: int | None = None
    cause: str | None = None
    warnings: tuple[str, ...] = ()
    log_tail: tuple[str, ...] = ()
    previous_log: bool = False
    log_secret: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
