"""MPI Operator ``kubeflow.org/v2beta1`` MPIJob (reference §2.3; mapping §3.3 "MPIJob v2beta1").

Same conditions as Kubeflow v1, but the operator never sets ``Restarting``: the launcher is a
batch/v1 Job that retries its pod itself, and the only trace on the MPIJob is
``replicaStatuses.Launcher.failed`` (copied from the launcher Job's ``status.failed``) going up.
``Running=True`` is not withdrawn while the launcher pod is re-created, so the counter row comes
before the Running row; ``Launcher.active`` counts *running* launcher pods (not pending ones), which
makes it the sign that the restart is over.

``restart_count`` is the launcher's failed-pod count, like a batch Job's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainwatch_common.events.jobs import Phase
from trainwatch_watcher.kinds.common_rules import make_status, restart_in_progress
from trainwatch_watcher.kinds.kubeflow_v1 import outcome_or_hold, read_view, running_or_pending
from trainwatch_watcher.kinds.model import HEURISTIC_SOURCE_PREFIX, NormalizedStatus
from trainwatch_watcher.kinds.objects import read_object, true_condition

LAUNCHER = "Launcher"
RESTART_SOURCE = HEURISTIC_SOURCE_PREFIX + "replicaStatuses.Launcher.failed"


def normalize(
    obj: Mapping[str, Any],
    previous: NormalizedStatus | None,
    related: Mapping[str, Any] | None = None,
) -> NormalizedStatus:
    """Normalize an MPIJob v2beta1. ``related`` may be the job's Volcano PodGroup, if known."""
    view = read_view(read_object(obj))
    launcher = view.replicas.get(LAUNCHER)
    launcher_failed = launcher.failed if launcher is not None else 0
    launcher_running = launcher is not None and launcher.active > 0
    held = outcome_or_hold(view, launcher_failed, launcher_failed)
    if held is not None:
        return held

    # Not written by mpi-operator; honoured in case a fork or a future release does.
    restarting = true_condition(view.conditions, "Restarting")
    if restarting is not None or restart_in_progress(launcher_failed, previous, launcher_running):
        return make_status(
            view.job,
            Phase.RESTARTING,
            condition=restarting,
            source=None if restarting is not None else RESTART_SOURCE,
            message=None if restarting is not None else f"launcher pod failures: {launcher_failed}",
            started_at=view.started_at,
            replicas=view.replicas,
            restart_count=launcher_failed,
            restart_counter=launcher_failed,
            queue=view.queue,
        )
    return running_or_pending(view, related, launcher_failed, launcher_failed)
