"""Compare what happened (kubesim's ground truth) with what each consumer got, per job. Pure.

Three surfaces are compared with the truth, job by job:

- **stream**: the events stored on JOBS, in stream order;
- **sql**: the persister's ``job_transitions`` rows of the job in ``sequence`` order, and its
  ``jobs`` row for the final state;
- **cards**: the Feishu cards the sink accepted, in the order it accepted them.

The promise (docs/contracts.md) decides what counts:

- A job's observed states must be a *subsequence* of its true states (the key of a state is
  ``(deleted, phase, sub_phase, terminal)``; for cards, what a card shows: phase and whether it
  is terminal). A true state that is missing is **lost** when it is *required* (a terminal
  state, or the deletion) and **collapsed** otherwise: a relist after a 410 or a dropped watch
  legitimately shows only the state the job has reached, skipping intermediate ones.
- An observed state that repeats one already delivered is **duplicated**: the same state right
  after itself (the watcher emits only changes) or under an event id already used for another
  state (an id must name one event forever). The same id with the same state again is a
  **replay**: every consumer recognises it by its id (contracts: "a replay is recognised as
  such"), so it is reported in its own column and not failed on. Cards carry the notifier's
  idempotency key per (event, channel): a card again under its key is **duplicated**, unless
  the notifier marked it as the resend of a send whose outcome it could not know (its sender
  killed with the request out): that is what it promises then (docs/contracts.md, "never lost;
  a repeat only when a send's outcome was lost, and marked"), counted as **resent**, not failed on.
- An observed state that comes after a later one, i.e. one that matches a true state the job
  had already passed, is **out of order**; one the job never had is **never true** (reported,
  and counted with out of order in the summary line: both break the per-job history).
- A job whose last observed state is not its last true state has a **wrong final** state.

Diagnosis updates (``change == "diagnosis"``: the reason moved, the state did not) are no
state: they are checked for event ids used twice like any event, on the stream for a job's
sequence going back (**out of order**), and the diagnosis a job ends with on the stream (its
last event's) and in SQL (its ``jobs`` row) must be the category of kubesim's
``DiagnosisTruth`` for the jobs a diagnosis scenario drove: a different one is a **wrong
diagnosis**, counted with wrong final in the summary line.

States that nobody could have seen are **unobservable**, counted apart and not failed on: a job
that ended and was deleted while its cluster's history was gone (the chaos run's "410
everywhere": history compacted, watches dropped) is absent from the relist, and no client of the
API can learn its last states. A required state is unobservable only when all of these hold: the
stream's deletion of the job says a relist found it gone (``source == "relist:absent"``), and the
job's true deletion and the state were both written inside a window the runner passes in (from
1 s before the compaction, what the watches may not have delivered yet, to every cluster
streaming again). Its surfaces' final state then differs from the
truth's by those states only, which is not counted as a wrong final state either.

Cards follow the notifier's routing rules (``CARD_PHASES``): the chaos rules route the default
phases, outcomes once terminal only, creations and transitions but not deletions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

Key = tuple[Any, ...]

ABSENT: Key = ("absent",)  # a surface that holds no final state for the job at all
CARD_PHASES = frozenset({"Failed", "Succeeded", "Restarting", "Suspended"})
OUTCOMES = frozenset({"Failed", "Succeeded"})
SURFACES = ("stream", "sql", "cards")


@dataclass(frozen=True, slots=True)
class TruthRow:
    cluster: str
    uid: str
    kind: str
    namespace: str
    name: str
    change: str  # created | transition | deleted
    phase: str
    sub_phase: str | None
    terminal: bool
    position: int = -1  # where it is in the whole truth log (the order of the writes)

    @classmethod
    def from_dict(cls, d: dict[str, Any], position: int = -1) -> TruthRow:
        return cls(
            d["cluster"], d["uid"], d["kind"], d["namespace"], d["name"],
            d["change"], d["phase"], d["sub_phase"], bool(d["terminal"]), position,
        )  # fmt: skip

    @property
    def required(self) -> bool:
        """Never allowed to collapse: a terminal state and a deletion."""
        return self.terminal or self.change == "deleted"


@dataclass(frozen=True, slots=True)
class Seen:
    """One observed state of a job on a surface. ``ident`` is the event id where there is one."""

    change: str
    phase: str
    sub_phase: str | None
    terminal: bool
    ident: str | None = None
    detail: str = ""  # what to print about it (stream seq, sequence, epoch...)
    resend: bool = False  # a card the notifier marked as the resend of a send whose outcome it lost
    sequence: int | None = None  # the event's per-job sequence (stream and SQL)
    diagnosis: str | None = None  # the diagnosis category the event carries
    source: str | None = (
        None  # where the watcher read the state ("relist:absent": a deletion it could not see)
    )


DIAGNOSIS_UPDATE = "diagnosis"  # the first item of a diagnosis update's key: no state of its own


def seen_key(seen: Seen) -> Key:
    """A state's key; a diagnosis update's own key (same state, the category it carries)."""
    if seen.change == "diagnosis":
        return (DIAGNOSIS_UPDATE, seen.phase, seen.sub_phase, seen.terminal, seen.diagnosis)
    return state_key(seen.change, seen.phase, seen.sub_phase, seen.terminal)


def state_key(change: str, phase: str, sub_phase: str | None, terminal: bool) -> Key:
    return (change == "deleted", phase, sub_phase, terminal)


def card_key(phase: str, terminal: bool) -> Key:
    return (phase, terminal)


def routed_to_cards(row: TruthRow) -> bool:
    """Whether the chaos rules send a card for this true state (see rules in the runner)."""
    if row.change == "deleted" or row.phase not in CARD_PHASES:
        return False
    return not (row.phase in OUTCOMES and not row.terminal)  # outcomes only once terminal


@dataclass
class JobResult:
    surface: str
    uid: str
    expected: int = 0
    observed: int = 0
    collapsed: int = 0
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    never_true: int = 0
    replayed: int = 0  # the same event id with the same state again (reported, not failed on)
    unobservable: int = 0  # required states no client could see (reported, not failed on)
    resent: int = 0  # a card again under its idempotency key, marked as a resend (not failed on)
    diagnosis_updates: int = 0  # the reason moved, the state did not (reported)
    wrong_final: bool = False
    wrong_diagnosis: bool = False  # for a job a diagnosis scenario drove: another final category
    notes: list[str] = field(default_factory=list)
    lost_at: list[int] = field(default_factory=list)  # indices of the lost states in the job's truth

    @property
    def failed(self) -> bool:
        return bool(
            self.lost
            or self.duplicated
            or self.out_of_order
            or self.never_true
            or self.wrong_final
            or self.wrong_diagnosis
        )


def compare_job(
    surface: str,
    uid: str,
    truth: Sequence[tuple[Key, bool]],
    seen: Sequence[tuple[Key, str | None]],
    *,
    final: Key | None,
    repeats_are_duplicates: bool,
    resends: Sequence[bool] | None = None,
    sequences: Sequence[int | None] | None = None,
    unseen: Sequence[bool] | None = None,
) -> JobResult:
    """``truth``: (key, required) per true state in order; ``seen``: (key, ident) in observed
    order; ``final``: the surface's final state when it keeps one apart (SQL's ``jobs`` row),
    else the last seen key is the final state.

    ``resends`` (cards): per seen item, whether the notifier marked it as the resend of a send
    whose outcome it could not know. Then the same ident with the same state again is what the
    notifier promises in that case (docs/contracts.md), counted as **resent**; unmarked, it is a
    card sent twice (**duplicated**). Without ``resends`` it is a **replay** (stream, SQL).

    ``sequences`` (stream): per seen item, its per-job sequence; one lower than an earlier
    item's is the job stepping back in the stream's order (**out of order**). A diagnosis update
    (key ``(DIAGNOSIS_UPDATE, ...)``) is checked for its id and sequence only.

    ``unseen``: per true state, whether no client could have seen it (the module's
    "unobservable"): missing, it is counted as **unobservable**, not lost."""
    result = JobResult(surface, uid, expected=len(truth), observed=len(seen))
    truth_keys = [matching(key) for key, _ in truth]
    matched = [False] * len(truth)
    cursor = 0
    idents: dict[str, Key] = {}
    previous: Key | None = None
    last_good: Key | None = None
    highest_sequence = -1
    for index, (key, ident) in enumerate(seen):
        if ident is not None:
            if ident in idents and idents[ident] == key:
                if resends is None:
                    result.replayed += 1  # the same event again: consumers recognise it by its id
                elif resends[index]:
                    result.resent += 1
                    result.notes.append(f"{fmt(key)} resent after an unconfirmed send")
                else:
                    result.duplicated += 1
                    result.notes.append(f"{fmt(key)} sent twice under one idempotency key")
                continue
            if ident in idents:
                result.duplicated += 1
                result.notes.append(f"id ...{ident[-40:]} reused: {fmt(idents[ident])}, then {fmt(key)}")
                continue
            idents[ident] = key
        sequence = sequences[index] if sequences is not None else None
        if sequence is not None:
            if sequence < highest_sequence:
                result.out_of_order += 1
                result.notes.append(f"{fmt(key)} (sequence {sequence}) after sequence {highest_sequence}")
            highest_sequence = max(highest_sequence, sequence)
        if key[0] == DIAGNOSIS_UPDATE:
            result.diagnosis_updates += 1
            continue
        if repeats_are_duplicates and key == previous:
            result.duplicated += 1
            result.notes.append(f"{fmt(key)} repeated")
            continue
        previous = key
        wanted = matching(key)
        ahead = next((j for j in range(cursor, len(truth)) if truth_keys[j] == wanted), None)
        if ahead is not None:
            matched[ahead] = True
            cursor = ahead + 1
            last_good = key
            continue
        behind = [j for j in range(cursor) if truth_keys[j] == wanted]
        if any(matched[j] for j in behind):
            result.duplicated += 1
            result.notes.append(f"{fmt(key)} again after {fmt(last_good)}")
        elif behind:
            result.out_of_order += 1
            result.notes.append(f"{fmt(key)} after {fmt(last_good)}")
        else:
            result.never_true += 1
            result.notes.append(f"{fmt(key)} never true")
    for j, (key, required) in enumerate(truth):
        if matched[j]:
            continue
        if required and unseen is not None and unseen[j]:
            result.unobservable += 1
            result.notes.append(f"unobservable {fmt(key)}")
        elif required:
            result.lost += 1
            result.lost_at.append(j)
            result.notes.append(f"lost {fmt(key)}")
        else:
            result.collapsed += 1
    if truth:
        want = truth[-1][0]
        states = [key for key, _ in seen if key[0] != DIAGNOSIS_UPDATE]
        got = final if final is not None else (states[-1] if states else None)
        # Unobservable last states leave as the final state the last one seen: not a wrong one.
        excused = (
            unseen is not None
            and result.unobservable > 0
            and not result.lost
            and (
                unseen[-1]  # the last true state itself could not be seen (cards show no deletion)
                or (got is not None and got[0] is True and want[0] is True)  # deletions both
            )
        )
        if got != want and not excused:
            result.wrong_final = True
            result.notes.append(f"final {fmt(got)}, truth {fmt(want)}")
    return result


def matching(key: Key) -> Key:
    """What must agree for an observed state to *be* a true one: a deletion is a deletion
    whatever phase it carries (a stale phase on it shows as a wrong final state instead)."""
    return ("deleted",) if len(key) == 4 and key[0] is True else key


def fmt(key: Key | None) -> str:
    if key is None:
        return "-"
    if key == ABSENT:
        return "absent"
    if key[0] == DIAGNOSIS_UPDATE:
        return f"diagnosis({key[4]})"
    if len(key) == 2:  # a card
        phase, terminal = key
        return f"{phase}{'*' if terminal else ''}"
    deleted, phase, sub_phase, terminal = key
    text = f"{phase}{'/' + sub_phase if sub_phase else ''}{'*' if terminal else ''}"
    return f"deleted({text})" if deleted else text


@dataclass
class Observations:
    """What each surface holds, per uid, in its order; ``sql_final`` from the ``jobs`` table."""

    stream: dict[str, list[Seen]] = field(default_factory=dict)
    sql: dict[str, list[Seen]] = field(default_factory=dict)
    sql_final: dict[str, Key] = field(default_factory=dict)
    cards: dict[str, list[Seen]] = field(default_factory=dict)
    sql_diagnosis: dict[str, str | None] = field(default_factory=dict)  # the jobs row's category


@dataclass
class Report:
    transitions: int
    jobs: int
    results: dict[str, list[JobResult]]
    unknown_jobs: dict[str, list[str]]  # surface -> uids seen there that the truth does not know
    lost_positions: dict[str, list[int]] = field(default_factory=dict)  # surface -> truth log positions

    def total(self, surface: str, attribute: str) -> int:
        return sum(int(getattr(r, attribute)) for r in self.results[surface])

    def lost(self) -> int:
        return sum(self.total(s, "lost") for s in SURFACES)

    def duplicated(self) -> int:
        return sum(self.total(s, "duplicated") for s in SURFACES)

    def wrong_final(self) -> int:
        """Wrong final states, and wrong final diagnoses (a job's final state includes why)."""
        return sum(self.total(s, "wrong_final") + self.total(s, "wrong_diagnosis") for s in SURFACES)

    def out_of_order(self) -> int:
        return sum(self.total(s, "out_of_order") + self.total(s, "never_true") for s in SURFACES)

    @property
    def failed(self) -> bool:
        return bool(self.lost() or self.duplicated() or self.wrong_final() or self.out_of_order())

    def summary_line(self) -> str:
        return (
            f"chaos: {self.transitions} transitions, {self.lost()} lost, {self.duplicated()} duplicated, "
            f"{self.wrong_final()} wrong final, {self.out_of_order()} out of order"
        )

    def table(self) -> str:
        head = ("surface", "expected", "seen", "diagnosis updates", "replayed", "resent", "collapsed",
                "unobservable", "lost", "duplicated",
                "wrong final", "wrong diagnosis", "out of order", "never true", "jobs failing",
                "unknown jobs")  # fmt: skip
        rows = [head]
        for s in SURFACES:
            rows.append(
                (
                    s,
                    str(self.total(s, "expected")),
                    str(self.total(s, "observed")),
                    str(self.total(s, "diagnosis_updates")),
                    str(self.total(s, "replayed")),
                    str(self.total(s, "resent")),
                    str(self.total(s, "collapsed")),
                    str(self.total(s, "unobservable")),
                    str(self.total(s, "lost")),
                    str(self.total(s, "duplicated")),
                    str(self.total(s, "wrong_final")),
                    str(self.total(s, "wrong_diagnosis")),
                    str(self.total(s, "out_of_order")),
                    str(self.total(s, "never_true")),
                    str(sum(1 for r in self.results[s] if r.failed)),
                    str(len(self.unknown_jobs.get(s, []))),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = []
        for row in rows:
            cells = zip(row, widths, strict=True)
            lines.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(cells)))
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def failing_jobs(self, truth: dict[str, list[TruthRow]], per_surface: int | None = 8) -> list[str]:
        """One line per failing (surface, job): identity and what went wrong; at most
        ``per_surface`` of each surface (None: all)."""
        lines = []
        for s in SURFACES:
            failing = [r for r in self.results[s] if r.failed]
            for r in failing[:per_surface]:
                rows = truth.get(r.uid, [])
                first = rows[0] if rows else None
                who = f"{first.cluster}/{first.namespace}/{first.kind}/{first.name}" if first else "?"
                lines.append(f"{s:6} {r.uid} {who}: {'; '.join(r.notes[:4])}")
            if per_surface is not None and len(failing) > per_surface:
                lines.append(f"{s:6} ... and {len(failing) - per_surface} more jobs (all in report.txt)")
        return lines


UNSEEN_DELETION_SOURCE = "relist:absent"  # the watcher's transitions.DELETED_UNSEEN_SOURCE


def unobservable_states(
    rows: Sequence[TruthRow], stream: Sequence[Seen], blind_windows: Sequence[tuple[int, int]]
) -> list[bool]:
    """Per true state of one job: written, like the job's deletion, inside one blind window, for
    a job whose deletion the watcher found by a relist (see "unobservable" above)."""
    unseen = [False] * len(rows)
    found_gone = any(s.change == "deleted" and s.source == UNSEEN_DELETION_SOURCE for s in stream)
    deletion = next((r.position for r in reversed(rows) if r.change == "deleted"), None)
    if not found_gone or deletion is None:
        return unseen
    for first, last in blind_windows:
        if first <= deletion <= last:
            for j, row in enumerate(rows):
                unseen[j] = first <= row.position < deletion
    return unseen


def by_uid(rows: Iterable[TruthRow]) -> dict[str, list[TruthRow]]:
    out: dict[str, list[TruthRow]] = {}
    for row in rows:
        out.setdefault(row.uid, []).append(row)
    return out


def compare(
    truth_rows: Sequence[TruthRow],
    seen: Observations,
    diagnoses: dict[str, list[str]] | None = None,
    blind_windows: Sequence[tuple[int, int]] = (),
) -> Report:
    """``diagnoses``: uid -> the categories the job's final diagnosis may have (from kubesim's
    ``DiagnosisTruth``: one, or a root cause and CrashLoop for BackoffLimitExceeded).
    ``blind_windows``: (first, last) truth log positions of each time the clusters' history was
    gone (see "unobservable" above)."""
    truth = by_uid(truth_rows)
    diagnoses = diagnoses or {}
    results: dict[str, list[JobResult]] = {s: [] for s in SURFACES}
    lost: dict[str, list[int]] = {s: [] for s in SURFACES}

    def keyed(items: Iterable[Seen], key: Callable[[Seen], Key]) -> list[tuple[Key, str | None]]:
        return [(key(s), s.ident) for s in items]

    def states_of(items: Iterable[Seen]) -> list[tuple[Key, str | None]]:
        return keyed(items, seen_key)

    def check_diagnosis(result: JobResult, uid: str, got: str | None) -> None:
        want = diagnoses.get(uid)
        if want is not None and got not in want:
            result.wrong_diagnosis = True
            result.notes.append(f"diagnosis {got}, truth {' or '.join(want)}")

    for uid, rows in truth.items():
        states = [(state_key(r.change, r.phase, r.sub_phase, r.terminal), r.required) for r in rows]
        stream = seen.stream.get(uid, [])
        unseen = unobservable_states(rows, stream, blind_windows)
        results["stream"].append(
            compare_job(
                "stream", uid, states,
                states_of(stream),
                final=None, repeats_are_duplicates=True,
                sequences=[s.sequence for s in stream], unseen=unseen,
            )
        )  # fmt: skip
        check_diagnosis(results["stream"][-1], uid, stream[-1].diagnosis if stream else None)
        results["sql"].append(
            compare_job(
                "sql", uid, states,
                states_of(seen.sql.get(uid, [])),
                final=seen.sql_final.get(uid, ABSENT), repeats_are_duplicates=True, unseen=unseen,
            )
        )  # fmt: skip
        check_diagnosis(results["sql"][-1], uid, seen.sql_diagnosis.get(uid))
        for surface in ("stream", "sql"):
            lost[surface] += [rows[j].position for j in results[surface][-1].lost_at]
        routed = [r for r in rows if routed_to_cards(r)]
        routed_unseen = [u for r, u in zip(rows, unseen, strict=True) if routed_to_cards(r)]
        cards = [(card_key(r.phase, r.terminal), r.terminal) for r in routed]
        job_cards = seen.cards.get(uid, [])
        results["cards"].append(
            compare_job(
                "cards", uid, cards,
                keyed(job_cards, lambda s: card_key(s.phase, s.terminal)),
                final=None,
                # A card shows no sub-phase: two true states may look alike (Suspended/Aborting,
                # then Suspended), so only a card matching an already delivered one is a repeat.
                repeats_are_duplicates=False,
                resends=[s.resend for s in job_cards], unseen=routed_unseen,
            )
        )  # fmt: skip
        lost["cards"] += [routed[j].position for j in results["cards"][-1].lost_at]
    unknown = {
        "stream": sorted(set(seen.stream) - set(truth)),
        "sql": sorted((set(seen.sql) | set(seen.sql_final)) - set(truth)),
        "cards": sorted(set(seen.cards) - set(truth)),
    }
    return Report(len(truth_rows), len(truth), results, unknown, lost)
