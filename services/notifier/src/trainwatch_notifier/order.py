"""Per-job order across replicas, restarts, redeliveries and Redis outages.

Within one process a channel's sender keeps its queue's order, but an older event of a job can
come back later than a newer one: a killed notifier's messages return only after the ack wait, a
message put back (Redis away, a live sender's marker found) returns after a delay, and replicas
fetch from the same consumer. So a job's event is routed only once no older event of the same job
is still being worked on anywhere.

Each job (cluster id, uid) has a Redis hash ``<prefix>:order:<cluster_id>:<uid>``:

- field ``<sequence>``: when (Redis clock, ms) a notifier last said it holds that event: taken at
  fetch, refreshed with the JetStream in-progress heartbeats, deleted once the event is settled.
  An entry older than ``stale_after`` belongs to an event nobody holds any more (its holder died
  and it was never redelivered): it no longer holds the job back, so nothing waits forever.
- field ``done``: the highest sequence settled. A job whose ``done`` is below ``sequence - 1``
  while nobody holds the event in between may have that event on its way to another replica
  (fetched, not yet registered), or with a notifier that died before registering it (it comes
  back after the consumer's ack wait); it is given ``grace`` to appear before the newer one goes.
  A job with no ``done`` at all is given the same grace unless the event is its first (sequence
  0) or the order has been kept longer than the grace: Redis may have lost the job's order (a
  wipe, a failover) while an elder was out for redelivery, held by nobody, and without the grace
  the newer event would overtake it. An elder out for redelivery comes back within the grace, so
  once the order has been kept that long, a job it knows nothing of (a notifier deployed onto a
  running stream, a job quiet for longer than ``ttl_seconds``) has no elder to wait for.

``<prefix>:order:since`` says since when (Redis clock, ms) the order has been kept: written by
the first call that finds it missing, so a Redis that lost its data says so at the next call.

An event that arrives after a newer one of its job was settled is not dropped: it may be the only
copy of a transition that was never notified. It is routed (its idempotency key still stops a
true duplicate) and counted as out of order.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from trainwatch_common import JobStatusEvent

# KEYS: the "since" key, then one job hash per event (repeats allowed). ARGV: stale_ms,
# ttl_seconds, then one sequence per job hash. Registers every event first, then returns how long
# (ms) the order has been kept, and per event: 1 if an older event of its job is held (fresh
# entry), else 0; and the job's "done" (-1 if none).
_TAKE_PLACES = """
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local stale, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local since = tonumber(redis.call('GET', KEYS[1]) or '-1')
if since < 0 then
  redis.call('SET', KEYS[1], now)
  since = now
end
for i = 2, #KEYS do
  redis.call('HSET', KEYS[i], ARGV[i + 1], now)
  redis.call('EXPIRE', KEYS[i], ttl)
end
local result = {now - since}
for i = 2, #KEYS do
  local key = KEYS[i]
  local sequence = tonumber(ARGV[i + 1])
  local blocked = 0
  local fields = redis.call('HGETALL', key)
  local done = -1
  for j = 1, #fields, 2 do
    if fields[j] == 'done' then
      done = tonumber(fields[j + 1])
    elseif tonumber(fields[j]) < sequence and tonumber(fields[j + 1]) > now - stale then
      blocked = 1
    end
  end
  result[2 * i - 2] = blocked
  result[2 * i - 1] = done
end
return result
"""

# KEYS: job hashes; ARGV: one sequence per key. Refreshes entries that still exist (a settled
# event's entry must not come back).
_REFRESH = """
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
for i, key in ipairs(KEYS) do
  if redis.call('HEXISTS', key, ARGV[i]) == 1 then
    redis.call('HSET', key, ARGV[i], now)
  end
end
return #KEYS
"""

# KEYS: job hashes (repeats allowed); ARGV: ttl_seconds, then one sequence per key.
_FINISH = """
local ttl = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  local sequence = ARGV[i + 1]
  redis.call('HDEL', key, sequence)
  local done = tonumber(redis.call('HGET', key, 'done') or '-1')
  if tonumber(sequence) > done then
    redis.call('HSET', key, 'done', sequence)
  end
  redis.call('EXPIRE', key, ttl)
end
return #KEYS
"""


@dataclass(frozen=True, slots=True)
class Place:
    """Where an event stands in its job's order, as Redis saw it just now."""

    sequence: int
    older_held: bool  # an older event of the job is held by someone (maybe us)
    done: int | None  # the highest sequence of the job settled so far
    kept_seconds: float = float("inf")  # how long Redis has kept the job order (since a loss)

    def ready(self, waited_seconds: float, grace_seconds: float) -> bool:
        if self.older_held:
            return False
        if self.done is None:
            # The job's first event, or one of a job whose order Redis no longer has: then an
            # elder may be out for redelivery, held by nobody, if the order was lost recently.
            return self.sequence == 0 or waited_seconds >= grace_seconds or self.kept_seconds >= grace_seconds
        if self.done >= self.sequence - 1:
            return True  # its predecessor is settled
        return waited_seconds >= grace_seconds  # the predecessor may be on its way to a replica

    @property
    def late(self) -> bool:
        """A newer event of the job was settled before this one arrived."""
        return self.done is not None and self.done > self.sequence


JobKey = tuple[str, str]


def job_key(event: JobStatusEvent) -> JobKey:
    return (event.job.cluster_id, event.job.uid)


class JobOrder:
    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str = "trainwatch",
        stale_after_seconds: float = 125.0,
        ttl_seconds: int = 8 * 24 * 3600,  # JOBS keeps events 7 days: elders older than that are gone
    ) -> None:
        self._prefix = prefix
        self._stale_ms = round(stale_after_seconds * 1000)
        self._ttl = ttl_seconds
        self._take_places = redis.register_script(_TAKE_PLACES)
        self._refresh = redis.register_script(_REFRESH)
        self._finish = redis.register_script(_FINISH)

    def key(self, event: JobStatusEvent) -> str:
        return f"{self._prefix}:order:{event.job.cluster_id}:{event.job.uid}"

    async def take_places(self, events: list[JobStatusEvent]) -> list[Place]:
        """Register events as held (in the order given) and say whether each may go now."""
        if not events:
            return []
        keys = [f"{self._prefix}:order:since", *(self.key(event) for event in events)]
        result = await self._take_places(
            keys=keys, args=[self._stale_ms, self._ttl, *(event.sequence for event in events)]
        )
        kept = int(result[0]) / 1000
        places = []
        for i, event in enumerate(events):
            done = int(result[2 * i + 2])
            places.append(Place(event.sequence, bool(result[2 * i + 1]), None if done < 0 else done, kept))
        return places

    async def refresh(self, events: list[JobStatusEvent]) -> None:
        """The heartbeat of held events: they are still being worked on."""
        if events:
            await self._refresh(keys=[self.key(event) for event in events], args=[e.sequence for e in events])

    async def finish(self, events: list[JobStatusEvent]) -> None:
        """These events are settled (sent, skipped, dead-lettered): newer ones of their jobs may go."""
        if events:
            keys = [self.key(event) for event in events]
            await self._finish(keys=keys, args=[self._ttl, *(event.sequence for event in events)])
