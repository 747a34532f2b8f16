"""The evidence diagnosis reads, trimmed from the objects a cluster sends.

A watched pod is a few kilobytes of JSON (managedFields, spec, env...). The informer keeps only
:class:`PodEvidence`, well under 1 KB: the fields named in ../shared/reference/diagnosis.md §2,
messages capped, healthy containers dropped, and the scheduler's message reduced to what it says
(the resources it found insufficient) before it is cut. The same goes for Events (§5), Kueue
Workloads (§4.1) and PodGroups (§4.2, §4.3).

Every ``trim_*`` reads a decoded JSON object defensively: a field of the wrong type reads as
absent, and an object that cannot be read at all returns None (the caller counts and skips it).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trainwatch_common.events.jobs import Phase, SubPhase
from trainwatch_watcher.diagnosis.selectors import index_of, role_of
from trainwatch_watcher.kinds.fields import parse_time

# Kept messages are for people and for the patterns below; 160 characters hold every upstream
# message's distinguishing head ("Back-off pulling image \"...\"", "The node was low on resource").
MAX_EVIDENCE_MESSAGE = 160
MAX_NAME = 253
# Workload, PodGroup and job conditions are one per job, not one per pod: their messages are
# kept whole up to the contract's bound (Kueue's "> maximum capacity" comes after 150 characters).
MAX_OBJECT_MESSAGE = 1024

# A resource name: dot-separated words, never ending in the sentence's full stop.
_INSUFFICIENT = re.compile(r"Insufficient ([A-Za-z0-9/_-]+(?:\.[A-Za-z0-9/_-]+)*)")
_OUT_OF = re.compile(r"^OutOf([A-Za-z0-9./_-]+)$")
_QUOTA = "exceeded quota:"
_LOW_ON = re.compile(r"low on resource: ([A-Za-z0-9/_-]+(?:\.[A-Za-z0-9/_-]+)*)")


def _s(value: object, limit: int = MAX_NAME) -> str | None:
    """A name-like string; None when absent or not a string."""
    if not isinstance(value, str) or not value:
        return None
    return value[:limit]


def _word(value: object, limit: int = 128) -> str | None:
    """A string from a small vocabulary (reasons, types, statuses, roles, container and node names):
    interned, so the 100k cached pods of a large fleet share one copy of each."""
    value = _s(value, limit)
    return sys.intern(value) if value is not None and len(value) <= 64 else value


def _msg(value: object, limit: int = MAX_EVIDENCE_MESSAGE, *, tail: bool = False) -> str | None:
    """One line of at most ``limit`` ASCII-ellipsised characters; ``tail`` keeps the end (where a
    termination message puts the exception)."""
    if not isinstance(value, str):
        return None
    value = " ".join(value.split())  # one line
    if not value:
        return None
    if len(value) <= limit:
        return value
    return "..." + value[-(limit - 3) :] if tail else value[: limit - 3] + "..."


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _map(value: object) -> Mapping[str, Any]:
    # A decoded JSON object is a dict: tested first, as isinstance(Mapping) goes through the ABC.
    return value if type(value) is dict or isinstance(value, Mapping) else {}


def _list(value: object) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


@dataclass(frozen=True, slots=True)
class Condition:
    """One condition of a pod, job, Workload or PodGroup: only those that explain something."""

    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    since: datetime | None = None


@dataclass(frozen=True, slots=True)
class ContainerEvidence:
    """One container that is not simply running or done: waiting, failed, or restarted."""

    name: str
    init: bool = False
    restarts: int = 0
    state: str = ""  # "waiting" | "running" | "terminated" | ""
    reason: str | None = None  # of the current state (waiting or terminated)
    message: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    last_reason: str | None = None  # lastState.terminated
    last_exit_code: int | None = None
    last_signal: int | None = None
    last_finished_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class PodEvidence:
    name: str
    role: str | None = None
    index: int | None = None
    node: str | None = None
    phase: str = ""
    reason: str | None = None  # status.reason: Evicted, NodeLost, DeadlineExceeded, OutOf<res>...
    message: str | None = None
    created_at: datetime | None = None
    deleting: bool = False
    # PodScheduled when not True, DisruptionTarget when True; nothing else explains a failure.
    conditions: tuple[Condition, ...] = ()
    # The resources the scheduler's message (or a kubelet OutOf<res> rejection) found short.
    insufficient: tuple[str, ...] = ()
    containers: tuple[ContainerEvidence, ...] = ()

    def condition(self, type_: str) -> Condition | None:
        for condition in self.conditions:
            if condition.type == type_:
                return condition
        return None


@dataclass(frozen=True, slots=True)
class WarningEvent:
    """One Event (core/v1 or events.k8s.io/v1), deduplicated by the apiserver's count/series."""

    reason: str
    message: str | None = None
    type: str = "Warning"
    count: int = 1
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    object_kind: str | None = None
    object_name: str | None = None


@dataclass(frozen=True, slots=True)
class KueueWorkload:
    name: str
    queue: str | None = None  # spec.queueName (the LocalQueue)
    cluster_queue: str | None = None  # status.admission.clusterQueue
    created_at: datetime | None = None
    # QuotaReserved, Admitted, Evicted, Preempted, PodsReady, Finished, as written.
    conditions: tuple[Condition, ...] = ()
    # From the visibility API (pendingworkloads), when it answered; 0-based.
    position_in_local_queue: int | None = None
    position_in_cluster_queue: int | None = None

    def condition(self, type_: str) -> Condition | None:
        for condition in self.conditions:
            if condition.type == type_:
                return condition
        return None


@dataclass(frozen=True, slots=True)
class PodGroupEvidence:
    name: str
    flavor: str  # "volcano" | "scheduler-plugins"
    phase: str = ""
    min_member: int | None = None
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    queue: str | None = None
    created_at: datetime | None = None
    conditions: tuple[Condition, ...] = ()  # Volcano only: Unschedulable / Scheduled

    def condition(self, type_: str) -> Condition | None:
        for condition in self.conditions:
            if condition.type == type_:
                return condition
        return None


@dataclass(frozen=True, slots=True)
class JobEvidence:
    """The job's normalized status plus the conditions diagnosis reads reasons from: its true
    ``Failed`` and ``FailureTarget`` (the others explain nothing the status does not say)."""

    kind: str  # Trainwatch kind key
    name: str
    phase: Phase
    sub_phase: SubPhase | None = None
    terminal: bool = False
    reason: str | None = None
    message: str | None = None
    conditions: tuple[Condition, ...] = ()
    created_at: datetime | None = None
    api_version: str | None = None


def _conditions(
    items: object, keep: Any = None, limit: int = MAX_OBJECT_MESSAGE, types: frozenset[str] | None = None
) -> tuple[Condition, ...]:
    """``types``: the only condition types ``keep`` may keep, checked first (a Running job's
    conditions are then skipped without reading them: this runs on every job event)."""
    out = []
    for item in _list(items):
        if type(item) is not dict and not isinstance(item, Mapping):
            continue
        if types is not None and item.get("type") not in types:
            continue
        type_ = _word(item.get("type"))
        status = _word(item.get("status"))
        if type_ is None or status is None or (keep is not None and not keep(type_, status)):
            continue
        out.append(
            Condition(
                type=type_,
                status=status,
                reason=_word(item.get("reason"), 256),
                message=_msg(item.get("message"), limit),
                since=parse_time(item.get("lastTransitionTime")),
            )
        )
    return tuple(out)


_JOB_EXPLAINING = frozenset({"Failed", "FailureTarget"})
_POD_EXPLAINING = frozenset({"PodScheduled", "DisruptionTarget"})


def _explains_job(type_: str, status: str) -> bool:
    return type_ in _JOB_EXPLAINING and status == "True"


def _explains_pod(type_: str, status: str) -> bool:
    return (type_ == "PodScheduled" and status != "True") or (
        type_ == "DisruptionTarget" and status == "True"
    )


def insufficient_resources(message: str | None) -> tuple[str, ...]:
    """``Insufficient nvidia.com/gpu`` (scheduler FitError) -> ("nvidia.com/gpu",), in message order."""
    if not message:
        return ()
    seen: dict[str, None] = {}
    for match in _INSUFFICIENT.finditer(message):
        seen.setdefault(sys.intern(match.group(1)), None)
    return tuple(seen)


# Waiting reasons whose message says nothing a reason does not (kept without it).
_QUIET_WAITING = frozenset({"CrashLoopBackOff", "ContainerCreating", "PodInitializing"})
MAX_CONTAINERS = 2
# Characters of messages one pod may keep in all, the most telling first (see trim_pod).
MESSAGE_BUDGET = 200


def _container(status: Mapping[str, Any], init: bool) -> tuple[int, ContainerEvidence] | None:
    """(how telling, evidence) of one container status; None for a healthy one."""
    name = _word(status.get("name"))
    if name is None:
        return None
    restarts = max(_int(status.get("restartCount")) or 0, 0)
    state = _map(status.get("state"))
    last = _map(_map(status.get("lastState")).get("terminated"))
    kind, current = "", {}
    for candidate in ("waiting", "terminated", "running"):
        if isinstance(state.get(candidate), Mapping):
            kind, current = candidate, state[candidate]
            break
    exit_code = _int(current.get("exitCode")) if kind == "terminated" else None
    reason = _word(current.get("reason"))
    failed_exit = kind == "terminated" and exit_code not in (None, 0)
    quiet_wait = kind == "waiting" and reason in _QUIET_WAITING and reason != "CrashLoopBackOff"
    if (
        not last
        and restarts == 0
        and (kind == "running" or (kind == "terminated" and not failed_exit) or quiet_wait)
    ):
        return None
    telling = 0 if failed_exit or (kind == "waiting" and not quiet_wait) else 1 if last else 2
    message = None
    if failed_exit:
        message = _msg(current.get("message"), tail=True)
    elif kind == "waiting" and reason not in _QUIET_WAITING:
        message = _msg(current.get("message"))
    evidence = ContainerEvidence(
        name=name,
        init=init,
        restarts=restarts,
        state=kind,
        reason=reason,
        message=message,
        exit_code=exit_code,
        signal=_int(current.get("signal")) or None,
        started_at=parse_time(current.get("startedAt")),
        finished_at=parse_time(current.get("finishedAt")),
        last_reason=_word(last.get("reason")),
        last_exit_code=_int(last.get("exitCode")),
        last_signal=_int(last.get("signal")) or None,
        last_finished_at=parse_time(last.get("finishedAt")),
    )
    return telling, evidence


def _within_budget(messages: list[str | None]) -> list[str | None]:
    """Keep messages in order while the budget lasts; the rest become None."""
    left = MESSAGE_BUDGET
    kept: list[str | None] = []
    for message in messages:
        if message is not None and len(message) <= left:
            kept.append(message)
            left -= len(message)
        else:
            kept.append(None)
    return kept


def trim_pod(pod: Mapping[str, Any]) -> PodEvidence | None:
    """What diagnosis needs of one pod, or None if it has no name.

    At most :data:`MAX_CONTAINERS` containers (the most telling: failed or waiting, then restarted)
    and :data:`MESSAGE_BUDGET` characters of messages in all, given in this order: the containers'
    (termination messages keep their end), the scheduler's, the pod's. The scheduler's message is
    read for ``Insufficient <resource>`` and an eviction's for its resource before anything is cut;
    a disruption keeps its reason (its message is fixed per reason). Under 1 KB (tests measure it).
    """
    if not isinstance(pod, Mapping):
        return None
    metadata = _map(pod.get("metadata"))
    name = _s(metadata.get("name"))
    if name is None:
        return None
    spec, status = _map(pod.get("spec")), _map(pod.get("status"))
    raw_conditions = _list(status.get("conditions"))
    conditions = _conditions(raw_conditions, _explains_pod, MAX_EVIDENCE_MESSAGE, _POD_EXPLAINING)
    reason = _word(status.get("reason"))
    insufficient: tuple[str, ...] = ()
    scheduled_message: object = None
    for item in raw_conditions:
        if isinstance(item, Mapping) and item.get("type") == "PodScheduled" and item.get("status") != "True":
            scheduled_message = item.get("message")
            insufficient = insufficient_resources(
                scheduled_message if isinstance(scheduled_message, str) else None
            )
    pod_message = status.get("message")
    short = None
    if reason and reason.startswith("OutOf"):
        short = _OUT_OF.match(reason)
    elif reason == "Evicted" and isinstance(pod_message, str):
        short = _LOW_ON.search(pod_message)
    if short is not None:
        insufficient = (sys.intern(short.group(1)),)
    ranked = []
    for key, init in (("initContainerStatuses", True), ("containerStatuses", False)):
        for item in _list(status.get(key)):
            if isinstance(item, Mapping) and (found := _container(item, init)) is not None:
                ranked.append(found)
    ranked.sort(key=lambda pair: pair[0])
    containers = [evidence for _, evidence in ranked[:MAX_CONTAINERS]]
    messages = _within_budget(
        [c.message for c in containers] + [_msg(scheduled_message), _msg(pod_message)],
    )
    containers = [
        c if c.message == kept else dataclasses.replace(c, message=kept)
        for c, kept in zip(containers, messages, strict=False)
    ]
    scheduled_kept, pod_kept = messages[-2], messages[-1]
    conditions = tuple(
        dataclasses.replace(c, message=scheduled_kept if c.type == "PodScheduled" else None)
        for c in conditions
    )
    return PodEvidence(
        name=name,
        role=_word(role_of(pod)),
        index=index_of(pod),
        node=_word(spec.get("nodeName")),
        phase=_word(status.get("phase")) or "",
        reason=reason,
        message=pod_kept,
        created_at=parse_time(metadata.get("creationTimestamp")),
        deleting=metadata.get("deletionTimestamp") is not None,
        conditions=conditions,
        insufficient=insufficient,
        containers=tuple(containers),
    )


def trim_event(event: Mapping[str, Any]) -> WarningEvent | None:
    """One Event in either API group (reference §5.1): core/v1 ``involvedObject``/``message``/``count``
    or events.k8s.io/v1 ``regarding``/``note``/``series``; None when it has no reason."""
    if not isinstance(event, Mapping):
        return None
    reason = _word(event.get("reason"))
    if reason is None:
        return None
    regarding = _map(event.get("involvedObject")) or _map(event.get("regarding"))
    series = _map(event.get("series"))
    count = _int(series.get("count")) or _int(event.get("count")) or _int(event.get("deprecatedCount")) or 1
    first = (
        parse_time(event.get("firstTimestamp"))
        or parse_time(event.get("deprecatedFirstTimestamp"))
        or parse_time(event.get("eventTime"))
    )
    last = (
        parse_time(series.get("lastObservedTime"))
        or parse_time(event.get("lastTimestamp"))
        or parse_time(event.get("deprecatedLastTimestamp"))
        or parse_time(event.get("eventTime"))
        or first
    )
    message = event.get("message") if isinstance(event.get("message"), str) else event.get("note")
    if isinstance(message, str) and len(message) > MAX_EVIDENCE_MESSAGE and (at := message.find(_QUOTA)) > 0:
        # A ResourceQuota refusal names the resource after a long pod name: keep what it says.
        message = "... " + message[at:]
    return WarningEvent(
        reason=reason,
        message=_msg(message),
        type=_word(event.get("type"), 32) or "Normal",
        count=max(count, 1),
        first_seen=first or last,
        last_seen=last,
        object_kind=_word(regarding.get("kind"), 64),
        object_name=_s(regarding.get("name")),
    )


def trim_workload(
    workload: Mapping[str, Any], pending: Mapping[str, Any] | None = None
) -> KueueWorkload | None:
    """A Kueue Workload (reference §4.1); ``pending`` is its item of the visibility API's
    ``pendingworkloads`` answer, when the caller asked it (positions are 0-based)."""
    if not isinstance(workload, Mapping):
        return None
    metadata = _map(workload.get("metadata"))
    name = _s(metadata.get("name"))
    if name is None:
        return None
    spec, status = _map(workload.get("spec")), _map(workload.get("status"))
    pending = _map(pending)
    local = _int(pending.get("positionInLocalQueue"))
    cluster = _int(pending.get("positionInClusterQueue"))
    return KueueWorkload(
        name=name,
        queue=_s(spec.get("queueName")) or _s(pending.get("localQueueName")),
        cluster_queue=_s(_map(status.get("admission")).get("clusterQueue")),
        created_at=parse_time(metadata.get("creationTimestamp")),
        conditions=_conditions(status.get("conditions")),
        position_in_local_queue=local if local is not None and local >= 0 else None,
        position_in_cluster_queue=cluster if cluster is not None and cluster >= 0 else None,
    )


def trim_podgroup(podgroup: Mapping[str, Any]) -> PodGroupEvidence | None:
    """A Volcano (scheduling.volcano.sh) or scheduler-plugins (scheduling.x-k8s.io) PodGroup."""
    if not isinstance(podgroup, Mapping):
        return None
    metadata = _map(podgroup.get("metadata"))
    name = _s(metadata.get("name"))
    if name is None:
        return None
    api_version = podgroup.get("apiVersion")
    flavor = (
        "scheduler-plugins"
        if isinstance(api_version, str) and api_version.startswith("scheduling.x-k8s.io/")
        else "volcano"
    )
    spec, status = _map(podgroup.get("spec")), _map(podgroup.get("status"))
    return PodGroupEvidence(
        name=name,
        flavor=flavor,
        phase=_word(status.get("phase"), 32) or "",
        min_member=_int(spec.get("minMember")),
        running=max(_int(status.get("running")) or 0, 0),
        succeeded=max(_int(status.get("succeeded")) or 0, 0),
        failed=max(_int(status.get("failed")) or 0, 0),
        queue=_s(spec.get("queue")),
        created_at=parse_time(metadata.get("creationTimestamp")),
        conditions=_conditions(status.get("conditions")),
    )


def job_evidence(
    kind: str,
    job: Mapping[str, Any],
    *,
    phase: Phase,
    sub_phase: SubPhase | None = None,
    terminal: bool = False,
    reason: str | None = None,
    message: str | None = None,
) -> JobEvidence:
    """The job's side: its normalized status (from the kind's normalizer) and its raw conditions.

    RayJob has no conditions; its ``status.reason``/``message`` become one ``Failed`` condition.
    Volcano conditions carry a phase in ``status`` and no type; they explain nothing and are left out.
    """
    metadata, status = _map(job.get("metadata")), _map(job.get("status"))
    # Only these are read (engine._failed_condition); leaving the rest out keeps a Running job's
    # event from parsing conditions nobody reads.
    conditions = _conditions(status.get("conditions"), _explains_job, types=_JOB_EXPLAINING)
    ray_reason = _s(status.get("reason"), 256)
    if kind == "rayjob" and ray_reason:
        conditions += (
            Condition("Failed", "True", ray_reason, _msg(status.get("message"), MAX_OBJECT_MESSAGE)),
        )
    return JobEvidence(
        kind=kind,
        name=_s(metadata.get("name")) or "",
        phase=phase,
        sub_phase=sub_phase,
        terminal=terminal,
        reason=reason,
        message=message,
        conditions=conditions,
        created_at=parse_time(metadata.get("creationTimestamp")),
        api_version=_s(job.get("apiVersion"), 128),
    )
