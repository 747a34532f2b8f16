"""The notifier on a Sentinel-managed Redis while the master fails over (issue 17).

What the notifier keeps in Redis: each job's order hash (``order.py``: who holds which of its
events, the highest one settled) and the bots' shared token buckets (``limits.py``). Its delivery
markers and its record of recent sends are in NATS, so a Redis failover cannot make it send a
card twice. Real processes on loopback: nats-server, a Redis master with two replicas and three
sentinels (``redis_sentinel_group``, the master down after 1 s of silence), the notifier (in this
process) finding the master through the sentinels, sending to a Feishu-compatible sink that
counts 5/s and 100/min per bot as Feishu does.

Two failovers, while a backlog of job events is being notified:

- ``kill``: kill -9 of the master; the replicas were in sync, so the new master has (almost)
  everything;
- ``lost-writes``: the replicas are stopped (SIGSTOP) and the master drops their links first, so
  every order entry and spent token written while 5 more cards go out exists only on the master,
  which is then killed; the sentinels promote a replica without them, as asynchronous
  replication loses the last writes (a probe key written then is checked gone).

Either way: every card once (no idempotency key twice, no resend), none missing, each job's cards
in its events' order, nothing dead-lettered, everything acknowledged. What a lost order entry
costs is a wait: a job whose hash is gone gives a possibly missing elder its grace (the ack wait
plus 5 s; 65 s with production's ack wait) before its next event goes. What lost spent tokens
cost is at most a refusal by the bot (11232), retried. Both are printed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from nats.js import JetStreamContext
from notifier_support import (
    all_acked,
    consumer_with_ack_wait,
    feishu_rules,
    make_event,
    publish,
    running,
    settings_for,
)
from pydantic import SecretStr
from redis.asyncio import Redis

from trainwatch_common import Phase
from trainwatch_common.testing import RedisSentinelGroup, eventually
from trainwatch_notifier.app import Notifier
from trainwatch_notifier.consumer import ORDER_GRACE_MARGIN_SECONDS
from trainwatch_notifier.sink import FeishuSink

NODE_SECRET = "node-secret-7d1a"
SENTINEL_SECRET = "sentinel-secret-2c9e"
GROUP = {"replicas": 2, "password": NODE_SECRET, "sentinel_password": SENTINEL_SECRET}
JOBS = 8
# Each job's events, in sequence; every phase is one the default rules notify.
LIFECYCLE = [Phase.RESTARTING, Phase.SUSPENDED, Phase.RESTARTING, Phase.SUSPENDED, Phase.FAILED]
# The consumer's redelivery delay, shortened from production's 60 s: a job whose order Redis lost
# waits this plus ORDER_GRACE_MARGIN_SECONDS before its next event goes (an elder may be out for
# redelivery), and the test should not take minutes.
ACK_WAIT = 10.0


async def writable_master(group: RedisSentinelGroup, old_port: int) -> bool:
    port = await asyncio.to_thread(group.master_port)
    if port is None or port == old_port:
        return False
    client = Redis(port=port, password=NODE_SECRET, socket_timeout=1)
    try:
        await client.set("trainwatch:test:probe", "1")
        return True
    finally:
        await client.aclose()


def card_sequences(sink: FeishuSink) -> dict[str, list[int]]:
    """Per job, the sequences of its cards in the order the sink accepted them (from the
    idempotency key ``ml-feishu.<event id>``, the event id ending in ``.<sequence>``)."""
    out: dict[str, list[int]] = {}
    for received in sink.received:
        event_id = (received.idempotency_key or "").removeprefix("ml-feishu.")
        job, _, sequence = event_id.rpartition(".")
        out.setdefault(job, []).append(int(sequence))
    return out


@pytest.mark.parametrize("redis_sentinel_group", [GROUP], indirect=True, ids=["2-replicas"])
@pytest.mark.parametrize("failover", ["kill", "lost-writes"])
async def test_a_sentinel_failover_while_notifying_loses_repeats_and_reorders_no_card(
    js: JetStreamContext,
    nats_url: str,
    redis_sentinel_group: RedisSentinelGroup,
    tmp_path: Path,
    failover: str,
) -> None:
    group = redis_sentinel_group
    sink = FeishuSink(secret="demo")  # Feishu's 5/s and 100/min per bot
    await sink.start()
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        feishu_rules(sink.url(), channel_extra="    digest: {enabled: false}")
    )  # a card per event
    settings = settings_for(
        nats_url=nats_url,
        redis_url="redis://127.0.0.1:1/0",  # not used: the sentinels name the master
        rules_file=rules,
        redis_sentinels=group.sentinels,
        redis_password=SecretStr(NODE_SECRET),
        redis_sentinel_password=SecretStr(SENTINEL_SECRET),
        retry_max_seconds=60.0,  # the failover must cost time, never a card
    )
    events = [
        make_event(name=f"job-{j}", phase=phase, sequence=seq, terminal=phase is Phase.FAILED)
        for seq, phase in enumerate(LIFECYCLE)
        for j in range(JOBS)
    ]
    await consumer_with_ack_wait(js, ACK_WAIT)
    try:
        async with running(Notifier(settings)):
            for event in events:  # a backlog: at 5 cards/s the notifier works on it for ~8 s
                await publish(js, event)
            await eventually(lambda: len(sink.received) >= 8, timeout=20, message="notifying")
            old = group.master()
            if failover == "lost-writes":
                # The replicas stop, and the master drops their links while they cannot
                # reconnect: what it takes from now on (order entries, spent tokens, this probe)
                # reaches no replica and dies with it.
                for replica in group.replicas:
                    assert replica.pid is not None
                    os.kill(replica.pid, signal.SIGSTOP)
                probe = Redis(port=old.port, password=NODE_SECRET, socket_timeout=1)
                await probe.client_kill_filter(_type="replica")
                await probe.set("trainwatch:test:lost", "1")
                await probe.aclose()
                sent = len(sink.received)
                await eventually(lambda: len(sink.received) >= sent + 5, timeout=10, message="notifying on")
            await asyncio.to_thread(old.kill)
            killed = time.monotonic()
            for replica in group.replicas:
                if replica.pid is not None:
                    os.kill(replica.pid, signal.SIGCONT)
            await eventually(
                lambda: writable_master(group, old.port), timeout=30, interval=0.05, message="a new master"
            )
            failover_seconds = time.monotonic() - killed
            if failover == "lost-writes":
                new = Redis(port=group.master().port, password=NODE_SECRET, socket_timeout=1)
                assert await new.get("trainwatch:test:lost") is None  # the last writes are gone
                await new.aclose()
            grace = ACK_WAIT + ORDER_GRACE_MARGIN_SECONDS
            await eventually(
                lambda: len(sink.received) >= len(events), timeout=grace + 40, message="every card"
            )
            await eventually(lambda: all_acked(js), timeout=20, message="everything acknowledged")
            all_told = time.monotonic() - killed
        keys = [r.idempotency_key for r in sink.received]
        print(
            f"notifier, Sentinel failover ({failover}): new master after {failover_seconds:.2f}s, "
            f"every card out {all_told:.1f}s after the kill; {len(keys)} cards for {len(events)} events, "
            f"sink answers {dict(sink.answers)} (11232: over the bot's rate limit)"
        )
        assert len(keys) == len(set(keys)) == len(events)  # none twice, none missing
        assert not any(r.resend for r in sink.received)
        assert card_sequences(sink) == {
            event_id.rpartition(".")[0]: list(range(len(LIFECYCLE)))
            for event_id in {e.event_id for e in events if e.sequence == 0}
        }
        assert (await js.stream_info("DEADLETTER")).state.messages == 0
    finally:
        await sink.stop()
