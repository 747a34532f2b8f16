"""Pure: the previous slot of a uid and its new status → the event to emit, or nothing.

An event is emitted when a job is first seen (``created``, sequence 0), when its
(phase, sub_phase, terminal) changes (``transition``) and when it is gone (``deleted``); each
takes the next per-uid sequence, which makes its id (``job_event_id``) deterministic: the
same observation after a crash or a relist yields the same id, and JetStream drops the copy.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainwatch_common.events.jobs import JobChange, Phase, SubPhase
from trainwatch_watcher.kinds.model import NormalizedStatus

StatusKey = tuple[Phase, SubPhase | None, bool]


def status_key(status: NormalizedStatus) -> StatusKey:
    return (status.phase, status.sub_phase, status.terminal)


@dataclass(frozen=True, slots=True)
class Slot:
    """What was last emitted for one uid."""

    namespace: str
    name: str
    sequence: int
    phase: Phase
    sub_phase: SubPhase | None
    terminal: bool

    @property
    def key(self) -> StatusKey:
        return (self.phase, self.sub_phase, self.terminal)


@dataclass(frozen=True, slots=True)
class Emission:
    change: JobChange
    sequence: int
    previous_phase: Phase | None
    status: NormalizedStatus
    slot: Slot  # the slot once this emission is acknowledged


def observe(
    previous: Slot | None,
    status: NormalizedStatus,
    *,
    namespace: str,
    name: str,
    closed_at: int | None = None,
) -> Emission | None:
    """A live object was seen with ``status``.

    ``closed_at``: the sequence of this uid's deletion, when an object already reported deleted
    is back (an etcd restored from a backup): it is created again after its deletion.
    """
    if previous is None:
        sequence = 0 if closed_at is None else closed_at + 1
        slot = _slot(namespace, name, sequence, status)
        return Emission("created", sequence, None, status, slot)
    if previous.key == status_key(status):
        return None
    sequence = previous.sequence + 1
    return Emission("transition", sequence, previous.phase, status, _slot(namespace, name, sequence, status))


# The ``source`` of a deletion found by a relist: the job was gone when the list came, so its
# last states (between the last one emitted and the deletion) were never seen by anyone. After a
# 410 (history compacted) they cannot be: consumers should not read its phase as its final one.
DELETED_UNSEEN_SOURCE = "relist:absent"


def deleted(
    previous: Slot | None, status: NormalizedStatus | None, *, unseen: bool = False
) -> Emission | None:
    """The object is gone; ``status`` is its last state when the deletion carried one. ``unseen``:
    a relist found it gone, so its final states were not seen (``DELETED_UNSEEN_SOURCE``).

    A uid never emitted (never seen, or skipped as malformed) has nothing to close.
    """
    if previous is None:
        return None
    # The deleted event keeps the last emitted state: a deletion is not a phase change, and the
    # final object (when there is one) only contributes its reason, message and counters.
    final = status or NormalizedStatus(
        phase=previous.phase,
        sub_phase=previous.sub_phase,
        terminal=previous.terminal,
        source=DELETED_UNSEEN_SOURCE if unseen else None,
    )
    sequence = previous.sequence + 1
    slot = Slot(
        previous.namespace, previous.name, sequence, previous.phase, previous.sub_phase, previous.terminal
    )
    return Emission("deleted", sequence, previous.phase, final, slot)


def _slot(namespace: str, name: str, sequence: int, status: NormalizedStatus) -> Slot:
    return Slot(namespace, name, sequence, status.phase, status.sub_phase, status.terminal)
