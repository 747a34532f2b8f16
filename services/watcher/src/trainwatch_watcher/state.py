"""Per (cluster, kind) checkpoint in Redis: each uid's last-emitted slot, and the resourceVersion.

One hash per (cluster, kind): ``trainwatch:watcher:v1:{cluster}:{kind}``, with fields
``u:<uid>`` (the slot plus the few fields of the last computed status that the normalizers
need back, as JSON), ``rv:<scope>`` (the resourceVersion every earlier event was handled up
to; scope is a namespace, or ``*`` for a cluster-wide watch) and ``js:<scope>`` (the JOBS stream
sequence of the last acknowledged publish: when it is still the stream's last message of the
scope, the checkpoint holds everything the stream does, and an informer start skips reading it).
The informer writes only after JetStream acknowledged what it published, so the checkpoint never
runs ahead of the stream.

**Fenced writes.** A store bound to a lease (``fenced(epoch_key, epoch)``) writes only while the
cluster's fencing epoch in Redis is still the writer's: one Lua script compares and writes, in
one round trip. A replica paused past its TTL (SIGSTOP, a long GC) whose acknowledgements arrive
after a new owner took the cluster (which takes the next epoch *before* it loads the
checkpoint) is refused with ``CheckpointFenced``, so it can never overwrite the new owner's
checkpoint. The epoch only has to be unchanged, not the lease live: an owner whose lease lapsed
with nobody taking over writes nothing anyone has read yet.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import orjson
from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from trainwatch_common.events.jobs import Phase, SubPhase
from trainwatch_watcher.errors import LeaseNotProven
from trainwatch_watcher.kinds.model import NormalizedStatus
from trainwatch_watcher.transitions import Slot

PREFIX = "trainwatch:watcher:v1"
ALL_NAMESPACES = "*"


def state_key(cluster_id: str, kind_key: str) -> str:
    return f"{PREFIX}:{cluster_id}:{kind_key}"


class CheckpointFenced(LeaseNotProven):
    """A newer owner holds the cluster (its epoch moved on): this checkpoint write was refused."""


# KEYS: the checkpoint hash, the cluster's epoch counter. ARGV: my epoch, the number of fields to
# set, then field/value pairs, then the fields to delete. HSET/HDEL in chunks: Lua's unpack has
# a stack limit, and a batch may carry a thousand commits.
_FENCED_APPLY = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return 0
end
local puts = tonumber(ARGV[2])
local first, last = 3, 2 + 2 * puts
for i = first, last, 200 do
  redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 199, last)))
end
for i = last + 1, #ARGV, 200 do
  redis.call('HDEL', KEYS[1], unpack(ARGV, i, math.min(i + 199, #ARGV)))
end
return 1
"""


@dataclass(slots=True)
class JobRecord:
    """A uid's checkpoint: the last emitted slot and the last computed status (trimmed)."""

    slot: Slot
    last: NormalizedStatus
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


def encode_record(record: JobRecord) -> bytes:
    slot, last = record.slot, record.last
    return orjson.dumps(
        {
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
    return JobRecord(slot=slot, last=status)


class StateStore:
    """Reads and writes checkpoints. Writes are idempotent, so a retried batch is harmless.

    Unfenced as constructed; ``fenced`` gives the view an owner of a cluster lease writes through.
    """

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._fence: tuple[str, int] | None = None  # (epoch key, epoch) of a fenced view
        self._fenced_apply: AsyncScript | None = None

    def fenced(self, epoch_key: str, epoch: int) -> StateStore:
        """The same store, writing only while the counter at ``epoch_key`` still equals ``epoch``."""
        store = StateStore(self._redis)
        store._fence = (epoch_key, epoch)
        store._fenced_apply = self._script()  # registered once, shared by every view
        return store

    def _script(self) -> AsyncScript:
        if self._fenced_apply is None:
            self._fenced_apply = self._redis.register_script(_FENCED_APPLY)
        return self._fenced_apply

    async def load(self, cluster_id: str, kind_key: str) -> Checkpoint:
        raw = cast(dict[bytes, bytes], await self._redis.hgetall(state_key(cluster_id, kind_key)))  # type: ignore[misc]
        checkpoint = Checkpoint()
        for name, value in raw.items():
            field_name = name.decode()
            if field_name.startswith("u:"):
                checkpoint.records[field_name[2:]] = decode_record(value)
            elif field_name.startswith("rv:"):
                checkpoint.resource_versions[field_name[3:]] = value.decode()
            elif field_name.startswith("js:"):
                checkpoint.stream_marks[field_name[3:]] = int(value)
        return checkpoint

    async def apply(self, cluster_id: str, kind_key: str, write: StateWrite) -> None:
        if not write:
            return
        key = state_key(cluster_id, kind_key)
        mapping: dict[str, bytes] = {f"u:{uid}": encode_record(record) for uid, record in write.put.items()}
        mapping.update({f"rv:{scope}": rv.encode() for scope, rv in write.resource_versions.items()})
        mapping.update({f"js:{scope}": str(mark).encode() for scope, mark in write.stream_marks.items()})
        if self._fence is not None:
            await self._apply_fenced(cluster_id, key, mapping, write.delete)
            return
        async with self._redis.pipeline(transaction=True) as pipe:
            if mapping:
                pipe.hset(key, mapping=mapping)  # type: ignore[arg-type]
            if write.delete:
                pipe.hdel(key, *(f"u:{uid}" for uid in write.delete))
            await pipe.execute()

    async def _apply_fenced(
        self, cluster_id: str, key: str, mapping: dict[str, bytes], delete: set[str]
    ) -> None:
        assert self._fence is not None
        epoch_key, epoch = self._fence
        args: list[str | bytes | int] = [str(epoch), len(mapping)]
        for name, value in mapping.items():
            args += (name, value)
        args += (f"u:{uid}" for uid in delete)
        if not await self._script()(keys=[key, epoch_key], args=args):
            raise CheckpointFenced(f"checkpoint of {cluster_id} refused: epoch {epoch} is no longer current")

    async def forget_scope(self, cluster_id: str, kind_key: str, uids: Iterable[str], scope: str) -> None:
        """Drop records (e.g. of namespaces no longer watched) without emitting anything."""
        key = state_key(cluster_id, kind_key)
        fields = [f"u:{uid}" for uid in uids]
        async with self._redis.pipeline(transaction=True) as pipe:
            if fields:
                pipe.hdel(key, *fields)
            pipe.hdel(key, f"rv:{scope}", f"js:{scope}")
            await pipe.execute()

    async def delete_cluster(self, cluster_id: str) -> int:
        """Remove every checkpoint of a cluster (it was removed from the registry)."""
        deleted = 0
        async for key in self._redis.scan_iter(match=f"{PREFIX}:{cluster_id}:*", count=500):
            deleted += int(await self._redis.delete(key))
        return deleted
