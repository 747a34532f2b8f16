"""Idempotency keys in a real JetStream KV bucket, with an injected clock."""

from __future__ import annotations

import nats.errors
import pytest
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from trainwatch_common.streams import NOTIFIER_DELIVERIES_BUCKET, ensure_bucket
from trainwatch_notifier.dedupe import IdempotencyKeys, MarkersUnavailable


@pytest.fixture
async def kv(js: JetStreamContext) -> KeyValue:
    return await ensure_bucket(js, NOTIFIER_DELIVERIES_BUCKET)


async def state_of(kv: KeyValue, key: str) -> bytes | None:
    try:
        entry = await kv.get(key)
    except Exception:
        return None
    return (entry.value or b"").split(b"|")[0]


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_claim_send_mark_and_what_other_copies_see(kv: KeyValue) -> None:
    clock = Clock()
    first = IdempotencyKeys(kv, instance="replica-a", clock=clock)
    second = IdempotencyKeys(kv, instance="replica-b", clock=clock)
    key = first.key("job.alpha.uid.3", "ml-feishu")
    assert key == "ml-feishu.job.alpha.uid.3"
    assert first.key("a b", "ch:1") == "ch=3a1.a=20b"

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


async def test_an_abandoned_claim_can_be_taken_over_once(kv: KeyValue) -> None:
    clock = Clock()
    crashed = IdempotencyKeys(kv, instance="crashed", clock=clock)
    keys = IdempotencyKeys(kv, instance="survivor", clock=clock)
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
    assert await crashed.begin_request([crashed_claim]) is None
    assert (await keys.claim([key]))[0].marker == taken.marker


async def test_a_refused_attempt_goes_back_to_held(kv: KeyValue) -> None:
    clock = Clock()
    keys = IdempotencyKeys(kv, instance="a", clock=clock)
    names = [keys.key(f"e{i}", "c") for i in range(3)]
    claims = await keys.claim(names)
    sending = await keys.begin_request(claims)
    assert sending is not None
    assert {await state_of(kv, name) for name in names} == {b"sending"}
    held = await keys.end_request(sending)
    assert held is not None
    assert {await state_of(kv, name) for name in names} == {b"held"}
    assert await keys.end_request(sending) is None  # stale markers: nothing changes
    await keys.release(held)
    assert {await state_of(kv, name) for name in names} == {None}
    assert all(claim.mine for claim in await keys.claim(names))  # released: claimable again


async def test_release_gives_back_only_our_own_claim(kv: KeyValue) -> None:
    keys = IdempotencyKeys(kv, instance="a", clock=Clock())
    other = IdempotencyKeys(kv, instance="b", clock=Clock())
    mine, theirs = keys.key("e1", "c"), keys.key("e2", "c")
    [my_claim] = await keys.claim([mine])
    await other.claim([theirs])
    [their_claim_seen] = await keys.claim([theirs])
    await keys.release([my_claim, their_claim_seen])
    assert await state_of(kv, mine) is None
    assert await state_of(kv, theirs) == b"held"  # a marker we only found is not ours to delete


async def test_a_digest_claims_many_keys_and_marks_dead(kv: KeyValue) -> None:
    keys = IdempotencyKeys(kv, instance="a", clock=Clock())
    names = [keys.key(f"e{i}", "c") for i in range(50)]
    await keys.mark_sent(names[:10])
    claims = await keys.claim(names)
    assert [c.state for c in claims] == ["sent"] * 10 + ["held"] * 40
    await keys.mark_dead(names[10:], "feishu-bad-signature")
    assert [c.state for c in await keys.claim(names)] == ["sent"] * 10 + ["dead"] * 40


async def test_a_claim_cut_short_by_nats_gives_back_what_it_took(kv: KeyValue) -> None:
    """A digest's keys are claimed together; should NATS fail for one of them, the others are
    released, so the retry claims them again instead of finding our own markers as someone else's."""

    class Flaky:
        def __getattr__(self, name: str) -> object:
            return getattr(kv, name)

        async def create(self, key: str, value: bytes) -> int:
            if key.endswith(".e1"):
                raise nats.errors.TimeoutError
            return await kv.create(key, value)

    flaky = IdempotencyKeys(Flaky(), instance="a", clock=Clock())  # type: ignore[arg-type]
    names = [flaky.key(f"e{i}", "c") for i in range(3)]
    with pytest.raises(MarkersUnavailable):
        await flaky.claim(names)
    assert {await state_of(kv, name) for name in names} == {None}
    keys = IdempotencyKeys(kv, instance="a", clock=Clock())
    assert all(claim.mine for claim in await keys.claim(names))
