"""Token buckets and burst detection with an injected clock."""

from __future__ import annotations

import asyncio
import sys
import time

from redis.asyncio import Redis

from trainwatch_notifier.digest import BurstDetector
from trainwatch_notifier.limits import BotLimits, TokenBucket


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


def max_in_window(times: list[float], window: float) -> int:
    return max(sum(1 for t in times if start <= t < start + window) for start in times)


async def test_feishu_limits_hold_in_any_window() -> None:
    clock = FakeClock()
    bucket = TokenBucket([(5, 1.0), (100, 60.0)], clock=clock, sleep=clock.sleep, margin=0.0)
    sent = []
    for _ in range(300):
        await bucket.acquire()
        sent.append(clock.now)
    assert max_in_window(sent, 1.0) == 5
    assert max_in_window(sent, 60.0) == 100
    # 300 sends at 100/min: about three minutes, no faster
    assert 120.0 <= sent[-1] - sent[0] < 180.0


def test_try_acquire_says_how_long_to_wait() -> None:
    clock = FakeClock()
    bucket = TokenBucket([(2, 1.0)], clock=clock, margin=0.1)
    assert bucket.try_acquire() == 0.0
    clock.now += 0.3
    assert bucket.try_acquire() == 0.0
    wait = bucket.try_acquire()
    assert abs(wait - 0.8) < 1e-9  # the first token comes back 1.1 s after it was spent
    clock.now += wait
    assert bucket.try_acquire() == 0.0


async def test_no_limits_means_no_waiting() -> None:
    bucket = TokenBucket([])
    for _ in range(1000):
        assert (await bucket.acquire()).waited == 0.0


def test_burst_detector_counts_sends_in_its_window() -> None:
    clock = FakeClock()
    burst = BurstDetector(threshold=3, window_seconds=60.0, clock=clock)
    assert not burst.in_burst(waiting=1)
    assert not burst.in_burst(waiting=3)
    assert burst.in_burst(waiting=4)  # four queued at once: one digest, not four messages
    burst.record(3)
    assert burst.in_burst(waiting=1)
    clock.now += 60.0
    assert not burst.in_burst(waiting=1)


async def test_replicas_share_a_bots_budget_through_redis(redis_url: str) -> None:
    clients = [Redis.from_url(redis_url), Redis.from_url(redis_url)]
    try:
        replicas = [BotLimits(redis=client) for client in clients]
        buckets = [limits.bucket("feishu:https://bot", [(3, 0.5)]) for limits in replicas]
        taken: list[float] = []

        async def send(bucket_index: int) -> None:
            for _ in range(5):
                await buckets[bucket_index].acquire()
                taken.append(time.monotonic())

        async with asyncio.TaskGroup() as group:
            group.create_task(send(0), name="replica-0-sends")
            group.create_task(send(1), name="replica-1-sends")
        assert len(taken) == 10
        # each replica alone would allow 3 per 0.5 s; together they still get 3 per 0.5 s
        # (checked over 0.4 s, so scheduling jitter on a busy machine cannot fail it)
        assert max_in_window(sorted(taken), 0.4) <= 3
        assert taken[-1] - taken[0] >= 1.0
    finally:
        for client in clients:
            await client.aclose()


INCARNATION = """
import asyncio, sys
from redis.asyncio import Redis
from trainwatch_notifier.limits import BotLimits

async def main(url: str, tokens: int) -> None:
    redis = Redis.from_url(url)
    # A restarted process: the same settings, the same bot, a fresh start.
    bucket = BotLimits(redis=redis).bucket("feishu:https://bot", [(3, 30.0)])
    for _ in range(tokens):
        try:
            await asyncio.wait_for(bucket.acquire(), 1.0)
            print("taken", flush=True)
        except TimeoutError:
            print("waiting", flush=True)
    await redis.aclose()

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


async def incarnation(redis_url: str, tokens: int) -> list[str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", INCARNATION, redis_url, str(tokens), stdout=asyncio.subprocess.PIPE
    )
    output, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0
    return output.decode().split()


async def test_a_restarted_process_with_the_same_instance_id_still_respects_the_budget(
    redis_url: str, redis: Redis
) -> None:
    assert await incarnation(redis_url, 2) == ["taken"] * 2  # 2 of the 3 per 30 s are spent
    # its successor gets the one left, then waits: it must not overwrite the spent tokens
    assert await incarnation(redis_url, 3) == ["taken", "waiting", "waiting"]
    [key] = [key async for key in redis.scan_iter("trainwatch:ratelimit:*")]
    assert await redis.zcard(key) == 3
