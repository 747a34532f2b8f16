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
from typing import cast

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from trainwatch_watcher.errors import CheckpointFenced
from trainwatch_watcher.records import Checkpoint, StateWrite, decode_record, encode_record

PREFIX = "trainwatch:watcher:v1"


def state_key(cluster_id: str, kind_key: str) -> str:
    return f"{PREFIX}:{cluster_id}:{kind_key}"


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
        raw = cast(dict[bytes, bytes], await self._redis.hgetall(state_key(cluster_id, kind_key)))
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
