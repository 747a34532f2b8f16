"""The ground-truth log: every normalized transition a scenario caused.

The phase of each entry is what the scenario *intended* when it wrote a status, following
the mapping tables of §3 of ``job-status-and-feishu.md`` (it is not computed from the
object by watcher code). Phases: ``Pending Running Restarting Suspended Succeeded Failed
Unknown``. Finishing states are ``Succeeded``/``Failed`` with ``terminal=False`` and
``sub_phase="Finishing"``.

Rule: one ``created`` entry per object (its initial phase), one ``transition`` entry
whenever ``(phase, sub_phase, terminal)`` changes for a uid, one ``deleted`` entry.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = ["PHASES", "NormState", "TruthEntry", "TruthLog"]

PHASES = ("Pending", "Running", "Restarting", "Suspended", "Succeeded", "Failed", "Unknown")

Change = Literal["created", "transition", "deleted"]


@dataclass(frozen=True, slots=True)
class NormState:
    """A normalized state: ``phase``, optional ``sub_phase``, ``terminal``."""

    phase: str
    sub_phase: str | None = None
    terminal: bool = False

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"unknown phase {self.phase!r}")


@dataclass(frozen=True, slots=True)
class TruthEntry:
    cluster: str
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    change: Change
    phase: str
    sub_phase: str | None
    terminal: bool
    resource_version: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def state(self) -> NormState:
        return NormState(self.phase, self.sub_phase, self.terminal)


class TruthLog:
    """An append-only list of :class:`TruthEntry`, in the order the writes happened."""

    def __init__(self) -> None:
        self.entries: list[TruthEntry] = []
        self._last: dict[str, NormState] = {}

    def __iter__(self) -> Iterator[TruthEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def _add(self, cluster: str, obj: dict[str, Any], change: Change, state: NormState) -> TruthEntry:
        meta = obj.get("metadata") or {}
        entry = TruthEntry(
            cluster=cluster,
            api_version=str(obj.get("apiVersion", "")),
            kind=str(obj.get("kind", "")),
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            change=change,
            phase=state.phase,
            sub_phase=state.sub_phase,
            terminal=state.terminal,
            resource_version=str(meta.get("resourceVersion", "")),
        )
        self.entries.append(entry)
        return entry

    def created(self, cluster: str, obj: dict[str, Any], state: NormState) -> TruthEntry:
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        self._last[uid] = state
        return self._add(cluster, obj, "created", state)

    def observe(self, cluster: str, obj: dict[str, Any], state: NormState) -> TruthEntry | None:
        """Record a write; an entry only if the normalized state changed."""
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        if self._last.get(uid) == state:
            return None
        self._last[uid] = state
        return self._add(cluster, obj, "transition", state)

    def deleted(self, cluster: str, obj: dict[str, Any]) -> TruthEntry:
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        state = self._last.pop(uid, NormState("Unknown"))
        return self._add(cluster, obj, "deleted", state)

    def last_state(self, uid: str) -> NormState | None:
        return self._last.get(uid)

    def transitions(self, uid: str | None = None) -> list[TruthEntry]:
        return [e for e in self.entries if uid is None or e.uid == uid]

    def final_states(self) -> dict[str, NormState]:
        """uid -> the last state recorded (including deleted objects)."""
        out: dict[str, NormState] = {}
        for e in self.entries:
            out[e.uid] = e.state
        return out
