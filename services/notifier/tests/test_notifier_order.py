"""A job's notifications arrive in its sequence order, even when an older event comes back late:
after a notifier is killed holding it, or after Redis was away when it was fetched."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import pytest
from nats.js import JetStreamContext
from notifier_support import (
    all_acked,
    consumer_with_ack_wait,
    consuming,
    delivery_marker,
    feishu_rules,
    kill,
    make_event,
    notifier_process,
    publish,
    running,
    settings_for,
)
from redis.asyncio import Redis

from trainwatch_common import JobStatusEvent, Phase
from trainwatch_common.testing import RedisServer, eventually
from trainwatch_notifier import app as app_module
from trainwatch_notifier import consumer as consumer_module
from trainwatch_notifier.app import Notifier
from trainwatch_notifier.order import JobOrder, Place
from trainwatch_notifier.sink import FeishuSink


def titles(sink: FeishuSink) -> list[str]:
    return [r.body["card"]["header"]["title"]["content"] for r in sink.received]


async def settle_first_event(js: JetStreamContext, name: str = "train-9") -> None:
    """The job's first event (a Running: no card), settled: the job order knows the job."""
    await publish(js, make_event(name=name, phase=Phase.RUNNING, sequence=0))
    await eventually(lambda: all_acked(js), message="the job's first event is settled")


RESTARTING = "🔁 PyTorchJob team-a/train-9 Restarting"
SUCCEEDED = "✅ PyTorchJob team-a/train-9 Succeeded"
SUSPENDED = "⏸️ PyTorchJob team-a/train-9 Suspended"


async def test_a_jobs_events_keep_their_order_when_a_killed_notifier_held_the_older(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    redis: Redis,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    await consumer_with_ack_wait(js, 3.0)  # a killed notifier's messages come back after 3 s
    # one message per 10 s: the Restarting waits for its token, and the kill lands in that wait
    # (with 4 s, a loaded machine let the token come first: the Restarting went out before the
    # kill, and its successor's resend made two cards, as promised for a send whose outcome is lost)
    limits = "    rate_limits: [{count: 1, per_seconds: 10}]\n    digest: {enabled: false}"
    rules = rules_path(feishu_rules(feishu_sink.url("ml"), channel_extra=limits))
    restarting = make_event(name="train-9", phase=Phase.RESTARTING, sequence=1)
    succeeded = make_event(name="train-9", phase=Phase.SUCCEEDED, sequence=2)
    env = {
        "TRAINWATCH_NATS_URL": nats_url,
        "TRAINWATCH_REDIS_URL": redis_url,
        "TRAINWATCH_RULES_FILE": str(rules),
        "TRAINWATCH_HTTP_PORT": "0",
        "TRAINWATCH_UNCONFIRMED_AFTER_SECONDS": "1",
        "TRAINWATCH_LOG_FORMAT": "text",
    }
    process = notifier_process(env, tmp_path / "notifier.log")
    try:
        await eventually(
            lambda: consuming(tmp_path / "notifier.log"), timeout=60, message="the subprocess is consuming"
        )
        # Without it the Restarting (sequence 1) of a job the order does not know waits the ack wait
        # plus 5 s for its elder, longer than the token takes, and the kill lands after its send.
        await settle_first_event(js)
        await publish(js, make_event(name="other-job"))
        await eventually(lambda: len(feishu_sink.received) == 1, timeout=20, message="the bot's token spent")
        await publish(js, restarting)
        await eventually(
            lambda: delivery_marker(js, restarting.event_id),
            timeout=10,
            message="the Restarting is taken and waits for a token",
        )
        kill(process)
    finally:
        if process.poll() is None:
            kill(process)
    await publish(js, succeeded)  # the job goes on while its Restarting is held by a dead process

    settings = settings_for(
        nats_url=nats_url, redis_url=redis_url, rules_file=rules, unconfirmed_after_seconds=1.0
    )
    async with running(Notifier(settings)):
        await eventually(lambda: len(feishu_sink.received) == 3, timeout=30, message="both told")
        await eventually(lambda: all_acked(js), timeout=10, message="and acked")
    assert titles(feishu_sink)[1:] == [RESTARTING, SUCCEEDED]


async def test_a_jobs_events_keep_their_order_across_a_redis_outage(
    nats_url: str,
    redis_process: RedisServer,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    rules = rules_path(feishu_rules(feishu_sink.url("ml")))
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_process.url, rules_file=rules))
    async with running(notifier):
        await settle_first_event(js)
        await publish(js, make_event(name="other-job"))
        await eventually(lambda: len(feishu_sink.received) == 1, message="the notifier works")
        await eventually(lambda: all_acked(js), message="and has acked it")
        redis_process.stop()
        await publish(js, make_event(name="train-9", phase=Phase.RESTARTING, sequence=1))

        async def fetched() -> bool:
            info = await js.consumer_info("JOBS", "notifier")
            return info.num_pending == 0 and info.num_ack_pending == 1

        await eventually(fetched, message="the Restarting is fetched while Redis is away")
        redis_process.start()
        await publish(js, make_event(name="train-9", phase=Phase.SUCCEEDED, sequence=2))
        await eventually(lambda: len(feishu_sink.received) == 3, timeout=20, message="both told")
        await eventually(lambda: all_acked(js), timeout=10, message="and acked")
    assert titles(feishu_sink)[1:] == [RESTARTING, SUCCEEDED]


async def test_the_job_order_in_redis(redis: Redis) -> None:
    order = JobOrder(redis, stale_after_seconds=1.0)
    first, second, third = (make_event(name="train-9", sequence=n) for n in (0, 1, 2))
    other_job = make_event(name="train-10", sequence=0)

    places = await order.take_places([second, first, other_job])
    assert [p.older_held for p in places] == [True, False, False]  # the 2nd waits for the 1st
    assert places[1].ready(waited_seconds=0, grace_seconds=1)
    assert places[2].ready(waited_seconds=0, grace_seconds=1)  # other jobs never wait for it

    await order.finish([first])
    await order.refresh([first, second])  # a late heartbeat must not bring the 1st back
    [place] = await order.take_places([second])
    assert (place.older_held, place.done) == (False, 0)
    assert place.ready(waited_seconds=0, grace_seconds=1)

    # the 3rd's predecessor is neither settled nor held: it may be on its way to a replica
    [place] = await order.take_places([third])
    assert place.older_held  # the 2nd is still held (not finished)
    await order.finish([second, third])
    gap = make_event(name="train-9", sequence=4)
    [place] = await order.take_places([gap])
    assert not place.ready(waited_seconds=0, grace_seconds=1)
    assert place.ready(waited_seconds=1, grace_seconds=1)

    # an event that comes after a newer one of its job was settled: late, and still routed
    [place] = await order.take_places([make_event(name="train-9", sequence=1)])
    assert place.late
    assert place.ready(waited_seconds=0, grace_seconds=1)

    # a job the order knows nothing of (never seen, or Redis lost it): its first event goes at
    # once, a later one gives its elders the grace, since one may be out for redelivery
    [place] = await order.take_places([make_event(name="train-11", sequence=3)])
    assert (place.older_held, place.done) == (False, None)
    assert not place.ready(waited_seconds=0, grace_seconds=1)
    assert place.ready(waited_seconds=1, grace_seconds=1)


async def test_an_elder_nobody_keeps_alive_stops_holding_its_job_back(redis: Redis) -> None:
    order = JobOrder(redis, stale_after_seconds=0.5)
    await order.take_places([make_event(name="train-9", sequence=1)])  # its holder dies now
    newer = make_event(name="train-9", sequence=2)
    [place] = await order.take_places([newer])
    assert place.older_held

    async def free() -> bool:
        [again] = await order.take_places([newer])
        return not again.older_held

    await eventually(free, timeout=5, message="the dead holder's entry goes stale")


async def test_a_jobs_events_keep_their_order_when_redis_loses_its_data_mid_send(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    redis: Redis,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    """FLUSHALL while a Restarting waits for its token: its claim and its job's order entry are
    gone. The Restarting must still go first; put back, its Succeeded overtook it."""
    limits = "    rate_limits: [{count: 1, per_seconds: 2}]\n    digest: {enabled: false}"
    rules = rules_path(feishu_rules(feishu_sink.url("ml"), channel_extra=limits))
    restarting = make_event(name="train-9", phase=Phase.RESTARTING, sequence=1)
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))
    async with running(notifier):
        await settle_first_event(js)
        await publish(js, make_event(name="other-job"))
        await eventually(lambda: len(feishu_sink.received) == 1, message="the bot's token spent")
        await publish(js, restarting)
        await eventually(
            lambda: delivery_marker(js, restarting.event_id),
            message="the Restarting is taken and waits for a token",
        )
        await redis.flushall()
        await publish(js, make_event(name="train-9", phase=Phase.SUCCEEDED, sequence=2))
        await eventually(lambda: len(feishu_sink.received) == 3, timeout=20, message="both told")
        await eventually(lambda: all_acked(js), timeout=10, message="and acked")
    assert titles(feishu_sink)[1:] == [RESTARTING, SUCCEEDED]


async def test_an_event_held_back_here_keeps_its_place_when_redis_loses_the_job_order(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    redis: Redis,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Suspended held back behind its Restarting (which waits for a token) when Redis loses the
    job order: the Succeeded fetched next must wait for both, though Redis no longer says so."""
    # the held-back Suspended looks again only when its job has news, not on its own timer (which
    # would write its entry back into Redis before the Succeeded is fetched)
    monkeypatch.setattr(consumer_module, "ORDER_POLL_SECONDS", 60.0)
    limits = "    rate_limits: [{count: 1, per_seconds: 2}]\n    digest: {enabled: false}"
    rules = rules_path(feishu_rules(feishu_sink.url("ml"), channel_extra=limits))
    restarting = make_event(name="train-9", phase=Phase.RESTARTING, sequence=1)
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))
    async with running(notifier):
        await settle_first_event(js)
        await publish(js, make_event(name="other-job"))
        await eventually(lambda: len(feishu_sink.received) == 1, message="the bot's token spent")
        await publish(js, restarting)
        await eventually(
            lambda: delivery_marker(js, restarting.event_id),
            message="the Restarting is taken and waits for a token",
        )
        await publish(js, make_event(name="train-9", phase=Phase.SUSPENDED, sequence=2))
        await eventually(
            lambda: redis.hexists(f"trainwatch:order:alpha:{restarting.job.uid}", "2"),
            message="the Suspended is held back behind the Restarting",
        )
        await redis.flushall()
        await publish(js, make_event(name="train-9", phase=Phase.SUCCEEDED, sequence=3))
        await eventually(lambda: len(feishu_sink.received) == 4, timeout=20, message="all three told")
        await eventually(lambda: all_acked(js), timeout=10, message="and acked")
    assert titles(feishu_sink)[1:] == [RESTARTING, SUSPENDED, SUCCEEDED]


async def test_an_elder_delivered_to_a_notifier_that_died_before_registering_it_still_goes_first(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    """Issue 13 (cards out of order in full chaos seed 23, after kill -9 of notifiers during a
    burst): JetStream delivered a job's Restarting to a notifier that was killed before it took
    its place in the job order, so nobody holds it and it comes back only after the ack wait.
    Its Succeeded, fetched meanwhile, must wait for it (not 1 s, as for an elder on its way to a
    replica), or the Restarting card comes after the Succeeded one."""
    await consumer_with_ack_wait(js, 3.0)
    rules = rules_path(feishu_rules(feishu_sink.url("ml")))
    settings = settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules)
    async with running(Notifier(settings)):
        await publish(js, make_event(name="train-9", phase=Phase.RUNNING, sequence=0))
        await eventually(lambda: all_acked(js), message="the job's first event is settled")
    await publish(js, make_event(name="train-9", phase=Phase.RESTARTING, sequence=1))
    doomed = await js.pull_subscribe_bind("notifier", stream="JOBS")  # the notifier that dies
    [taken] = await doomed.fetch(1, timeout=5)
    assert taken.metadata.sequence.stream == 2  # delivered, never acked nor registered
    await doomed.unsubscribe()
    async with running(Notifier(settings)):
        await publish(js, make_event(name="train-9", phase=Phase.SUCCEEDED, sequence=2))
        await eventually(lambda: len(feishu_sink.received) == 2, timeout=20, message="both told")
        await eventually(lambda: all_acked(js), timeout=10, message="and acked")
    assert titles(feishu_sink) == [RESTARTING, SUCCEEDED]


async def test_an_elder_out_for_redelivery_when_redis_lost_the_job_order_still_goes_first(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    redis: Redis,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    """Issue 13 (full chaos seed 7: a Suspended card after the job's Succeeded one): Redis lost
    its data (FLUSHALL) while a job's Suspended was out for redelivery, held by nobody. With the
    job's order gone, its Succeeded looked like the first event of a job never seen and went at
    once. An event of a job the order knows nothing of, other than its first, must give its
    elders the time a redelivery takes."""
    await consumer_with_ack_wait(js, 3.0)
    rules = rules_path(feishu_rules(feishu_sink.url("ml")))
    settings = settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules)
    async with running(Notifier(settings)):
        await publish(js, make_event(name="train-9", phase=Phase.RUNNING, sequence=0))
        await eventually(lambda: all_acked(js), message="the job's first event is settled")
    await publish(js, make_event(name="train-9", phase=Phase.SUSPENDED, sequence=1))
    doomed = await js.pull_subscribe_bind("notifier", stream="JOBS")  # the notifier that dies
    [taken] = await doomed.fetch(1, timeout=5)
    assert taken.metadata.sequence.stream == 2  # delivered, never acked nor registered
    await doomed.unsubscribe()
    await redis.flushall()
    async with running(Notifier(settings)):
        await publish(js, make_event(name="train-9", phase=Phase.SUCCEEDED, sequence=2))
        await eventually(lambda: len(feishu_sink.received) == 2, timeout=30, message="both told")
        await eventually(lambda: all_acked(js), timeout=10, message="and acked")
    assert titles(feishu_sink) == [SUSPENDED, SUCCEEDED]


class _CountingJobOrder(JobOrder):
    """The real job order in Redis, counting for which events it is asked."""

    asked: ClassVar[Counter[str]] = Counter()

    async def take_places(self, events: list[JobStatusEvent]) -> list[Place]:
        self.asked.update(event.event_id for event in events)
        return await super().take_places(events)


async def test_events_held_back_behind_an_elder_held_here_wait_without_asking_redis(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Chaos seed 41 (the machine loaded): after the notifier's SIGSTOP, ~700 held-back events each
    asked Redis for their place every 0.5 s, queued on the connection pool, and starved the sends
    and acks: 5,576 events unsent after 240 s. An event whose elder is held in this process waits
    for that elder's news, not on a timer."""
    monkeypatch.setattr(consumer_module, "ORDER_POLL_SECONDS", 0.05)
    monkeypatch.setattr(app_module, "JobOrder", _CountingJobOrder)
    _CountingJobOrder.asked.clear()
    limits = "    rate_limits: [{count: 1, per_seconds: 60}]\n    digest: {enabled: false}"
    rules = rules_path(feishu_rules(feishu_sink.url("ml"), channel_extra=limits))
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))
    async with running(notifier):
        await settle_first_event(js)
        await publish(js, make_event(name="other-job"))
        await eventually(lambda: len(feishu_sink.received) == 1, message="the bot's token spent")
        restarting = make_event(name="train-9", phase=Phase.RESTARTING, sequence=1)
        await publish(js, restarting)
        await eventually(
            lambda: delivery_marker(js, restarting.event_id),
            message="the Restarting is taken and waits for a token",
        )
        behind = [
            make_event(name="train-9", phase=Phase.RUNNING if n % 2 else Phase.RESTARTING, sequence=n)
            for n in range(2, 42)
        ]
        for event in behind:
            await publish(js, event)
        # An event whose elder nobody holds (never settled, not registered) looks again on the
        # timer until its grace ends: the clock of this test.
        clock = make_event(name="clock-job", phase=Phase.RUNNING, sequence=3)
        await publish(js, clock)
        await eventually(
            lambda: _CountingJobOrder.asked[clock.event_id] >= 20, message="the clock event looked 20 times"
        )
        # Once when fetched (taking its place), and not again while its elder is held here.
        assert {event.event_id: _CountingJobOrder.asked[event.event_id] for event in behind} == {
            event.event_id: 1 for event in behind
        }


async def test_a_job_first_seen_mid_life_waits_no_redelivery_grace_when_redis_kept_the_order(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    redis: Redis,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    """Found by bench/notify/burst.py: every event of a job the job order knew nothing of (a
    notifier deployed onto a running stream, a job quiet for longer than the order's TTL) waited
    the redelivery grace, the consumer's ack wait plus 5 s (65 s by default), though Redis had
    lost nothing and no elder could be out for redelivery. The grace is for an order Redis may
    have lost, recently."""
    rules = rules_path(feishu_rules(feishu_sink.url("ml")))
    settings = settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules)
    async with running(Notifier(settings)):
        await publish(js, make_event(name="other-job", phase=Phase.RUNNING, sequence=0))
        await eventually(lambda: all_acked(js), message="the order in Redis is in use")
        # As if the order had been kept for a day: no redelivery from before it can be pending.
        await redis.set("trainwatch:order:since", 0)
        await publish(js, make_event(name="train-9", phase=Phase.SUCCEEDED, sequence=4))
        await eventually(
            lambda: len(feishu_sink.received) == 1, timeout=10, message="told well before the 65 s grace"
        )
    assert titles(feishu_sink) == [SUCCEEDED]
