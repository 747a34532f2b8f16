"""Pure: a checkpoint set right by what the JOBS stream already holds.

The stream is the record of what was emitted; the Redis checkpoint is a cache of it that can be
lost (Redis without its data), left behind (Redis restored from an older snapshot, a crash
between an acknowledgement and its checkpoint write) or deleted (the cluster was removed and
added again). Continuing a job from a cache that is behind would reuse its sequence numbers, and
so its event ids: JetStream drops the new event as a duplicate within its window, and after it
two different events share one id. So an informer starts from whichever of the two is further
along for each job, and relists whenever the cache was behind, because its resourceVersion is
then behind too and a resumed watch would replay changes older than what the stream holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from trainwatch_watcher.records import JobRecord


@dataclass(frozen=True, slots=True)
class StreamHead:
    """The last event the stream holds for one uid: its sequence, and the job's record after it
    (None when that event was the job's deletion)."""

    sequence: int
    record: JobRecord | None
    resource_version: str | None = None  # the job's, when that event was emitted


@dataclass(slots=True)
class Recovered:
    records: dict[str, JobRecord] = field(default_factory=dict)
    # The checkpoint was behind the stream for some job (or lost): its resourceVersion cannot
    # be resumed from, a relist is needed.
    behind: bool = False
    corrected: int = 0  # jobs whose record came from the stream
    # uid -> the sequence of its deletion, for jobs the stream holds as deleted. Kubernetes never
    # reuses a uid, but an etcd restored from a backup brings a deleted job back: its events
    # continue after its deletion, or they would reuse its first ids.
    closed: dict[str, int] = field(default_factory=dict)
    # The newest resourceVersion the stream's events were emitted at: everything the informer
    # had handled up to there is in the stream, so a checkpoint that lost its own resourceVersion
    # can resume the watch from it (and see what happened since, terminal states included)
    # instead of relisting, which shows only the jobs that still exist.
    resource_version: str | None = None
    # Jobs of the checkpoint whose stream holds newer events (their checkpoint record is stale):
    # nothing may be emitted from their checkpoint record before the replay sets it right.
    ahead: frozenset[str] = frozenset()


def recover(checkpoint: dict[str, JobRecord], stream: dict[str, StreamHead]) -> Recovered:
    """Per uid, the record of whichever of checkpoint and stream saw the later sequence."""
    result = Recovered()
    ahead: set[str] = set()
    for uid, record in checkpoint.items():
        head = stream.get(uid)
        if head is None or head.sequence <= record.slot.sequence:
            result.records[uid] = record  # the stream holds nothing newer for this job
            continue
        result.behind = True
        result.corrected += 1
        ahead.add(uid)
        if head.record is not None:
            result.records[uid] = head.record
        # else: the stream holds its deletion: the job is closed, nothing to remember
    for uid, head in stream.items():
        if head.record is None and uid not in result.records:
            result.closed[uid] = head.sequence
        if uid in checkpoint or head.record is None:
            continue
        # Emitted and still open, but unknown to the checkpoint: lost or never written.
        result.behind = True
        result.corrected += 1
        result.records[uid] = head.record
    result.resource_version = newest_resource_version(stream.values())
    result.ahead = frozenset(ahead)
    return result


def newest_resource_version(heads: Iterable[StreamHead]) -> str | None:
    """The highest resourceVersion among the heads; None unless every one is a plain integer (the
    API calls them opaque: only etcd-backed servers' integers can be compared)."""
    newest: int | None = None
    for head in heads:
        rv = head.resource_version
        if not (rv and rv.isascii() and rv.isdigit()):
            return None
        newest = max(newest or 0, int(rv))
    return None if newest is None else str(newest)
