"""The publisher's own acknowledgement inbox, against a real nats-server: acks matched to their
messages, a missing stream retried until it exists, the same Nats-Msg-Id stored once."""

from __future__ import annotations

import asyncio

import nats
import pytest

from trainwatch_common.streams import ensure_streams
from trainwatch_common.testing import eventually
from trainwatch_watcher.errors import LeaseNotProven
from trainwatch_watcher.metrics import WatcherMetrics
from trainwatch_watcher.publishing import Publisher

SUBJECT = "jobs.v1.c1.default.pytorchjob.job-{i}"


async def test_many_in_flight_are_each_acknowledged_in_their_own_order(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        await ensure_streams(nc.jetstream())
        publisher = Publisher(nc, ack_timeout=5.0)
        pending = [
            await publisher.submit(
                subject=SUBJECT.format(i=i), payload=b"{}", msg_id=f"job.c1.u{i}.0", kind_key="pytorchjob"
            )
            for i in range(300)
        ]
        acks = [await publisher.confirm(p) for p in pending]
        assert [a.seq for a in acks] == sorted(a.seq for a in acks)
        assert len({a.seq for a in acks}) == 300
        assert not any(a.duplicate for a in acks)
        again = await publisher.publish(
            subject=SUBJECT.format(i=7), payload=b"{}", msg_id="job.c1.u7.0", kind_key="pytorchjob"
        )
        assert again.duplicate
        assert again.seq == acks[7].seq
    finally:
        await nc.close()


async def test_a_missing_stream_is_retried_until_it_exists(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    metrics = WatcherMetrics()
    try:
        publisher = Publisher(nc, ack_timeout=1.0, metrics=metrics, retry_max=0.2)
        pending = await publisher.submit(
            subject=SUBJECT.format(i=1), payload=b"{}", msg_id="job.c1.u1.0", kind_key="pytorchjob"
        )
        confirming = asyncio.create_task(publisher.confirm(pending), name="confirm")
        try:
            # No stream: nats-server answers "no responders", which is no acknowledgement.
            await eventually(
                lambda: metrics.publish_retries._value.get() >= 2, timeout=5, message="no retries"
            )
            assert not confirming.done()
            await ensure_streams(nc.jetstream())
            ack = await asyncio.wait_for(confirming, 5)
        finally:
            confirming.cancel()
        assert ack.seq == 1
        assert not ack.duplicate
    finally:
        await nc.close()


async def test_a_message_is_not_sent_again_once_its_lease_is_no_longer_proven(nats_url: str) -> None:
    """A replica paused past its TTL wakes with unacknowledged publishes: it must not resend them."""
    nc = await nats.connect(nats_url)
    metrics = WatcherMetrics()
    proven = True
    try:
        publisher = Publisher(nc, ack_timeout=1.0, metrics=metrics, retry_max=0.2)
        pending = await publisher.submit(
            subject=SUBJECT.format(i=1), payload=b"{}", msg_id="job.c1.u1.0", kind_key="pytorchjob"
        )  # no stream yet: no acknowledgement, so confirm() resends
        confirming = asyncio.create_task(
            publisher.confirm(pending, may_resend=lambda: proven), name="confirm"
        )
        try:
            await eventually(
                lambda: metrics.publish_retries._value.get() >= 1, timeout=5, message="no retries"
            )
            proven = False
            with pytest.raises(LeaseNotProven):
                await asyncio.wait_for(confirming, 5)
        finally:
            confirming.cancel()
        await ensure_streams(nc.jetstream())
        info = await nc.jetstream().stream_info("JOBS")
        assert info.state.messages == 0  # nothing resent after the lease lapsed
    finally:
        await nc.close()
