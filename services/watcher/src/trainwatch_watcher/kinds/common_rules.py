"""Rules shared by the kind families: building a result, and the counter-based restart heuristic."""

from __future__ import annotations

from datetime import datetime

from trainwatch_common.events.jobs import Phase, ReplicaCounts, SubPhase
from trainwatch_watcher.kinds.fields import trim_message, trim_reason
from trainwatch_watcher.kinds.model import NormalizedStatus
from trainwatch_watcher.kinds.objects import Condition, JobObject

_OUTCOME_PHASES = (Phase.SUCCEEDED, Phase.FAILED)


def make_status(
    job: JobObject,
    phase: Phase,
    *,
    sub_phase: SubPhase | None = None,
    terminal: bool = False,
    condition: Condition | None = None,
    reason: str | None = None,
    message: str | None = None,
    source: str | None = None,
    source_transition_time: datetime | None = None,
    started_at: datetime | None = None,
    finished_at: datetime | None = None,
    replicas: dict[str, ReplicaCounts] | None = None,
    restart_count: int = 0,
    restart_counter: int = 0,
    queue: str | None = None,
) -> NormalizedStatus:
    """One NormalizedStatus; ``condition`` supplies reason, message, source and time unless given.

    ``finished_at`` is kept only for Succeeded/Failed: a completion time left over from an earlier
    attempt (RayJob endTime before a retry, a Job that was resumed) must not make a live job look
    finished.
    """
    if condition is not None:
        reason = reason if reason is not None else condition.reason
        message = message if message is not None else condition.message
        source = source if source is not None else f"condition:{condition.type}"
        if source_transition_time is None:
            source_transition_time = condition.last_transition_time
    return NormalizedStatus(
        phase=phase,
        sub_phase=sub_phase,
        terminal=terminal,
        reason=trim_reason(reason),
        message=trim_message(message),
        source=source,
        source_transition_time=source_transition_time,
        created_at=job.created_at,
        started_at=started_at,
        finished_at=finished_at if phase in _OUTCOME_PHASES else None,
        replicas=replicas or {},
        restart_count=max(restart_count, 0),
        restart_counter=max(restart_counter, 0),
        queue=queue,
    )


def restart_in_progress(counter: int, previous: NormalizedStatus | None, back_up: bool) -> bool:
    """Whether a restart inferred from a raw failure/restart counter is still under way.

    Used only after every terminal, finishing and suspended row has been ruled out. The rule:

    - ``back_up`` (the kind's own sign that the workload runs again, e.g. every active Job pod
      ready, a running MPI launcher) ends a restart. It wins even over a counter that went up in
      the same observation: that happens when observations were coalesced (a re-list, a watcher
      restart), and a healthy job would otherwise be reported Restarting until its next status
      write, which may be hours away;
    - otherwise the counter going up since ``previous`` starts (or continues) a restart;
    - an unchanged counter keeps a Restarting that ``previous`` inferred the same way, so a job
      whose replacement pods are still pending does not flicker back to Pending;
    - on first sight (no ``previous``) a counter above zero on a job that is not back up is taken
      as a restart in progress: a job with failures that is neither finished nor running again is
      retrying.
    """
    if back_up:
        return False
    if previous is None:
        return counter > 0
    if counter > previous.restart_counter:
        return True
    return previous.restarting_by_heuristic and counter >= previous.restart_counter


def queue_name(job: JobObject, spec_queue: object = None) -> str | None:
    """The Kueue queue-name label if set, else the kind's own spec queue (Volcano, Kubeflow gang)."""
    if job.kueue_queue is not None:
        return job.kueue_queue
    return spec_queue if isinstance(spec_queue, str) and spec_queue else None
