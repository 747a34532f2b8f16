"""Idempotency keys against a real Redis, with an injected clock."""

from __future__ import annotations

from redis.asyncio import Redis

from trainwatch_notifier.dedupe import Claim, IdempotencyKeys


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
    assert (claim.state, claim.mine) == ("held", True)
    clock.now += 5
    [seen] = await second.claim([key])
    assert (seen.state, seen.mine, seen.age) == ("held", False, 5.0)
    assert seen.marker.startswith("held|replica-a|")

    sending = await first.begin_request([claim])
    assert sending is not None
    clock.now += 1
    [seen] = await second.claim([key])
    assert (seen.state, seen.age) == ("sending", 1.0)
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
    [crashed_claim] = await crashed.claim([key])
    assert await crashed.begin_request([crashed_claim]) is not None
    clock.now += 300
    [found] = await keys.claim([key])
    assert found.state == "sending"
    assert found.age == 300.0
    taken = await keys.take_over(found)
    assert taken is not None
    assert (taken.state, taken.mine) == ("held", True)
    assert await keys.take_over(found) is None  # the marker changed: someone else has it now
    # the crashed sender, should it come back, can no longer post: its marker is gone
    assert await crashed.begin_request([Claim(key, "held", found.marker, mine=True)]) is None


async def test_a_refused_attempt_goes_back_to_held(redis: Redis) -> None:
    clock = Clock()
    keys = IdempotencyKeys(redis, instance="a", clock=clock)
    names = [keys.key(f"e{i}", "c") for i in range(3)]
    claims = await keys.claim(names)
    sending = await keys.begin_request(claims)
    assert sending is not None
    assert {(await redis.get(name) or b"").split(b"|")[0] for name in names} == {b"sending"}
    held = await keys.end_request(sending)
    assert held is not None
    assert {(await redis.get(name) or b"").split(b"|")[0] for name in names} == {b"held"}
    assert await keys.end_request(sending) is None  # stale markers: nothing changes
    await keys.release(held)
    assert await redis.exists(*names) == 0


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
    assert [c.state for c in claims] == ["sent"] * 10 + ["held"] * 40
    await keys.mark_dead(names[10:], "feishu-bad-signature")
    assert [c.state for c in await keys.claim(names)] == ["sent"] * 10 + ["dead"] * 40
