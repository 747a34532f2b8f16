"""Idempotency keys against a real Redis, with an injected clock."""

from __future__ import annotations

from redis.asyncio import Redis

from trainwatch_notifier.dedupe import IdempotencyKeys


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_claim_send_mark_and_what_other_copies_see(redis: Redis) -> None:
    clock = Clock()
    first = IdempotencyKeys(redis, instance="replica-a", clock=clock, ttl_seconds=3600)
    second = IdempotencyKeys(redis, instance="replica-b", clock=clock, ttl_seconds=3600)
    key = first.key("job.alpha.uid.3", "ml-feishu")
    assert key == "trainwatch:notified:ml-feishu:job.alpha.uid.3"

    [claim] = await first.claim([key])
    assert claim.state == "claimed"
    clock.now += 5
    [seen] = await second.claim([key])
    assert seen.state == "sending"
    assert seen.age == 5.0
    assert seen.marker.startswith("sending|replica-a|")

    await first.mark_sent([key])
    [after] = await second.claim([key])
    assert after.state == "sent"
    assert 3590 < await redis.ttl(key) <= 3600


async def test_an_abandoned_claim_can_be_taken_over_once(redis: Redis) -> None:
    clock = Clock()
    crashed = IdempotencyKeys(redis, instance="crashed", clock=clock)
    keys = IdempotencyKeys(redis, instance="survivor", clock=clock)
    key = keys.key("e1", "c")
    await crashed.claim([key])
    clock.now += 300
    [found] = await keys.claim([key])
    assert found.state == "sending"
    assert found.age == 300.0
    taken = await keys.take_over(found)
    assert taken is not None
    assert taken.state == "claimed"
    assert await keys.take_over(found) is None  # the marker changed: someone else has it now


async def test_release_gives_back_only_our_own_claim(redis: Redis) -> None:
    keys = IdempotencyKeys(redis, instance="a", clock=Clock())
    other = IdempotencyKeys(redis, instance="b", clock=Clock())
    mine, theirs = keys.key("e1", "c"), keys.key("e2", "c")
    [my_claim] = await keys.claim([mine])
    await other.claim([theirs])
    [their_claim_seen] = await keys.claim([theirs])
    await keys.release([my_claim, their_claim_seen])
    assert await redis.get(mine) is None
    assert await redis.get(theirs) is not None  # a marker we only found is not ours to delete


async def test_a_digest_claims_many_keys_in_one_call_and_marks_dead(redis: Redis) -> None:
    keys = IdempotencyKeys(redis, instance="a", clock=Clock())
    names = [keys.key(f"e{i}", "c") for i in range(50)]
    await keys.mark_sent(names[:10])
    claims = await keys.claim(names)
    assert [c.state for c in claims] == ["sent"] * 10 + ["claimed"] * 40
    await keys.mark_dead(names[10:], "feishu-bad-signature")
    assert [c.state for c in await keys.claim(names)] == ["sent"] * 10 + ["dead"] * 40
