"""What a checkpoint holds (pure: no I/O): each uid's record, and its encoding in Redis.

``state.StateStore`` reads and writes these in Redis; recovery and history build them from the
JOBS stream. A record keeps the last emitted slot and only the fields of the last computed
status that the next normalization needs back (``trim``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from trainwatch_common.events.diagnosis import Diagnosis
from trainwatch_common.events.jobs import Phase, SubPhase
from trainwatch_watcher.kinds.model import NormalizedStatus
from trainwatch_watcher.transitions import Slot

# The scope of a cluster-wide watch (a namespaced one's scope is its namespace).
ALL_NAMESPACES = "*"


@dataclass(slots=True)
class JobRecord:
    """A uid's checkpoint: the last emitted slot and the last computed status (trimmed)."""

    slot: Slot
    last: NormalizedStatus
    # The diagnosis last emitted (so a restart does not emit the same one again), without its
    # events and log tail (``diagnosis_changed`` reads neither), and when the job first ran.
    diagnosis: Diagnosis | None = None
    first_running_at: datetime | None = None
    # In memory only: the raw inputs ``last`` was computed from (catalog.decision_inputs_for), so
    # an update that changed none of them skips normalization. None: normalize the next update.
    inputs: object = field(default=None, compare=False)


@dataclass(slots=True)
class Checkpoint:
    records: dict[str, JobRecord] = field(default_factory=dict)
    resource_versions: dict[str, str] = field(default_factory=dict)
    stream_marks: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class StateWrite:
    """One batch of checkpoint changes, applied atomically."""

    put: dict[str, JobRecord] = field(default_factory=dict)
    delete: set[str] = field(default_factory=set)
    resource_versions: dict[str, str] = field(default_factory=dict)
    stream_marks: dict[str, int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.put or self.delete or self.resource_versions or self.stream_marks)

    def merge(self, other: StateWrite) -> None:
        for uid in other.delete:
            self.put.pop(uid, None)
        for uid in other.put:
            self.delete.discard(uid)
        self.put.update(other.put)
        self.delete |= other.delete
        self.resource_versions.update(other.resource_versions)
        for scope, mark in other.stream_marks.items():
            self.stream_marks[scope] = max(mark, self.stream_marks.get(scope, 0))


def trim(status: NormalizedStatus) -> NormalizedStatus:
    """Only what the next normalization needs: no message, no replica table."""
    return NormalizedStatus(
        phase=status.phase,
        sub_phase=status.sub_phase,
        terminal=status.terminal,
        reason=status.reason,
        source=status.source,
        restart_count=status.restart_count,
        restart_counter=status.restart_counter,
        queue=status.queue,
    )


def checkpointed(diagnosis: Diagnosis | None) -> Diagnosis | None:
    """What a record keeps of a diagnosis: all but its events and log lines (whether a tail was
    sent is kept: it is sent once)."""
    if diagnosis is None or (
        not diagnosis.events and (diagnosis.log_tail is None or not diagnosis.log_tail.lines)
    ):
        return diagnosis
    tail = diagnosis.log_tail.model_copy(update={"lines": []}) if diagnosis.log_tail is not None else None
    return diagnosis.model_copy(update={"events": [], "log_tail": tail})


def encode_record(record: JobRecord) -> bytes:
    slot, last = record.slot, record.last
    extra: dict[str, Any] = {}
    if record.diagnosis is not None:
        extra["dg"] = checkpointed(record.diagnosis).model_dump(mode="json", exclude_none=True)  # type: ignore[union-attr]
    if record.first_running_at is not None:
        extra["fr"] = record.first_running_at.isoformat()
    return orjson.dumps(
        {
            **extra,
            "ns": slot.namespace,
            "n": slot.name,
            "seq": slot.sequence,
            "p": slot.phase.value,
            "sp": slot.sub_phase.value if slot.sub_phase else None,
            "t": slot.terminal,
            "last": {
                "p": last.phase.value,
                "sp": last.sub_phase.value if last.sub_phase else None,
                "t": last.terminal,
                "r": last.reason,
                "src": last.source,
                "rc": last.restart_count,
                "rcc": last.restart_counter,
                "q": last.queue,
            },
        }
    )


def decode_record(raw: bytes) -> JobRecord:
    data: dict[str, Any] = orjson.loads(raw)
    slot = Slot(
        namespace=data["ns"],
        name=data["n"],
        sequence=int(data["seq"]),
        phase=Phase(data["p"]),
        sub_phase=SubPhase(data["sp"]) if data.get("sp") else None,
        terminal=bool(data["t"]),
    )
    last = data.get("last") or {}
    status = NormalizedStatus(
        phase=Phase(last.get("p", data["p"])),
        sub_phase=SubPhase(last["sp"]) if last.get("sp") else None,
        terminal=bool(last.get("t", data["t"])),
        reason=last.get("r"),
        source=last.get("src"),
        restart_count=int(last.get("rc") or 0),
        restart_counter=int(last.get("rcc") or 0),
        queue=last.get("q"),
    )
    diagnosis = Diagnosis.model_validate(data["dg"]) if data.get("dg") else None
    first_running_at = datetime.fromisoformat(data["fr"]) if data.get("fr") else None
    return JobRecord(slot=slot, last=status, diagnosis=diagnosis, first_running_at=first_running_at)
