"""A Redis lease with a fencing token.

Acquiring a lease and taking the next fencing token happen in one Lua script, so every
owner of a name gets a strictly larger ``epoch`` than the one before it. Renew and release
compare the stored value first, so an owner whose lease expired and was taken by another can
never extend or delete the new owner's lease.

**Replicated Redis (Sentinel).** Redis replicates asynchronously: a master that dies right after
it acquired or renewed a lease may take that write with it, and the replica the sentinels
promote then holds an older epoch counter (the next owner would get an epoch some replica
already used) and no lease (the next owner would acquire while the last one still emits). With
``replicas`` set, an acquisition or a renewal is followed on the same connection by ``WAIT
replicas timeout``, and counts only once that many replicas confirmed it; otherwise it raises
``LeaseNotReplicated`` (an acquisition is then released again, best effort). So every lease an
owner acts on, and every epoch it stamps, is on a replica before it is used, and the replica a
failover promotes (the one furthest along) has it. The watcher README ("Redis Sentinel") has the
whole argument and its limits.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.exceptions import RedisError

_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local epoch = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], ARGV[1] .. '|' .. epoch, 'PX', ARGV[2])
  return epoch
end
return false
"""

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


@dataclass(frozen=True, slots=True)
class Lease:
    name: str
    holder: str = field(repr=False)  # may carry a secret nonce (``new_holder``): never logged
    epoch: int

    @property
    def value(self) -> str:
        """What Redis stores; with a ``new_holder`` holder, also the proof that one holds it."""
        return f"{self.holder}|{self.epoch}"


# The HTTP header in which a watcher shows the registry its lease's value.
LEASE_PROOF_HEADER = "X-Trainwatch-Lease"
# Separates a replica's id from the nonce in a lease holder.
NONCE_SEPARATOR = "#"


def new_holder(replica_id: str) -> str:
    """A holder for one acquisition: the replica's id and a random nonce.

    The replica id and the epoch are public (health events name the owner, job events carry the
    epoch), so "replica|epoch" proves nothing; with the nonce, the lease value is known only to
    its holder and to Redis, and the registry can ask a watcher for it as proof of ownership.
    """
    return f"{replica_id}{NONCE_SEPARATOR}{secrets.token_urlsafe(18)}"


def replica_of(holder: str) -> str:
    """The replica id in a holder written by ``new_holder`` (a plain holder is returned as is)."""
    replica, separator, _ = holder.rpartition(NONCE_SEPARATOR)
    return replica if separator else holder


class LeaseNotReplicated(RedisError):
    """The master took the write but fewer replicas than required confirmed it in time: a
    failover now could lose it, so it proves nothing."""


class LeaseManager:
    """Acquire, renew and release leases named ``<prefix>:lease:<name>``.

    ``replicas``: how many Redis replicas must confirm an acquisition or renewal (``WAIT``) within
    ``replication_timeout_ms`` (default TTL/10) before it counts; 0 (one Redis) waits for none.
    """

    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str = "trainwatch",
        ttl_ms: int = 10_000,
        replicas: int = 0,
        replication_timeout_ms: int | None = None,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self.ttl_ms = ttl_ms
        self.replicas = replicas
        self.replication_timeout_ms = max(1, replication_timeout_ms or ttl_ms // 10)
        self._acquire = redis.register_script(_ACQUIRE)
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)

    def lease_key(self, name: str) -> str:
        return f"{self._prefix}:lease:{name}"

    def epoch_key(self, name: str) -> str:
        return f"{self._prefix}:epoch:{name}"

    async def acquire(self, name: str, holder: str) -> Lease | None:
        """The lease with a new epoch, or None if someone else holds it.

        Raises ``LeaseNotReplicated`` if the replicas did not confirm it (see the module doc)."""
        keys = [self.lease_key(name), self.epoch_key(name)]
        args: list[str | int] = [holder, self.ttl_ms]
        if not self.replicas:
            epoch = await self._acquire(keys=keys, args=args)
            return Lease(name, holder, int(epoch)) if epoch else None
        async with self._redis.pipeline(transaction=False) as pipe:
            await self._acquire(keys=keys, args=args, client=pipe)
            pipe.execute_command("WAIT", self.replicas, self.replication_timeout_ms)
            epoch, confirmed = await pipe.execute()
        if not epoch:
            return None
        lease = Lease(name, holder, int(epoch))
        if int(confirmed) < self.replicas:
            # Nobody may use it: give it back now rather than block the cluster for a TTL.
            with contextlib.suppress(RedisError):  # else it expires by itself
                await self.release(lease)
            raise LeaseNotReplicated(
                f"lease {name}: {confirmed} of {self.replicas} replicas confirmed the acquisition"
            )
        return lease

    async def renew(self, lease: Lease) -> bool:
        """True if we still held the lease and extended it by the TTL."""
        return (await self.renew_many([lease]))[0]

    async def renew_many(self, leases: Sequence[Lease]) -> list[bool]:
        """``renew`` for several leases in one round trip (a pipeline; each is its own compare-and-set).

        Raises ``LeaseNotReplicated`` if the replicas did not confirm the renewals: none of them
        counts then (the leases stay proven only as long as the last confirmed renewal says)."""
        if not leases:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for lease in leases:
                await self._renew(
                    keys=[self.lease_key(lease.name)], args=[lease.value, self.ttl_ms], client=pipe
                )
            if self.replicas:
                pipe.execute_command("WAIT", self.replicas, self.replication_timeout_ms)
            results = await pipe.execute()
        if self.replicas:
            confirmed = int(results.pop())
            if confirmed < self.replicas:
                raise LeaseNotReplicated(
                    f"{len(leases)} lease renewals: {confirmed} of {self.replicas} replicas confirmed them"
                )
        return [bool(result) for result in results]

    async def release(self, lease: Lease) -> bool:
        return bool(await self._release(keys=[self.lease_key(lease.name)], args=[lease.value]))

    async def holder_of(self, name: str) -> tuple[str, int] | None:
        raw = await self._redis.get(self.lease_key(name))
        if raw is None:
            return None
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        holder, _, epoch = text.rpartition("|")
        return holder, int(epoch)

    async def current_epoch(self, name: str) -> int:
        """The latest fencing token handed out for ``name`` (0 if never acquired)."""
        raw = await self._redis.get(self.epoch_key(name))
        return int(raw) if raw is not None else 0
