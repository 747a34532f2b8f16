"""The desired cluster set read from a real nats-server: a failed read never removes clusters.

Only a bucket read successfully (an empty one included) or a removed event changes the set; a
read that fails is retried with back-off while the previous set stays in force.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import nats
from nats.aio.client import Client as NatsClient
from nats.js.kv import KeyValue

from trainwatch_common.events.clusters import ClusterSpec
from trainwatch_common.streams import CLUSTERS_BUCKET, ensure_clusters_bucket, ensure_streams
from trainwatch_common.testing import eventually
from trainwatch_common.testing.servers import NatsServer
from trainwatch_watcher.cluster_feed import NatsClusterFeed

BUCKET_STREAM = f"KV_{CLUSTERS_BUCKET.bucket}"


def spec(cluster_id: str) -> ClusterSpec:
    return ClusterSpec(id=cluster_id, name=cluster_id, revision=1, connection_fingerprint=f"fp-{cluster_id}")


async def put(kv: KeyValue, cluster_id: str) -> None:
    """Straight into the bucket, with no event: only a snapshot read can see it."""
    await kv.put(cluster_id, spec(cluster_id).model_dump_json().encode())


class Applied:
    """Every desired set the feed applied, in order."""

    def __init__(self) -> None:
        self.sets: list[set[str]] = []

    async def __call__(self, desired: dict[str, ClusterSpec]) -> None:
        self.sets.append(set(desired))

    @property
    def last(self) -> set[str] | None:
        return self.sets[-1] if self.sets else None


@asynccontextmanager
async def running_feed(feed: NatsClusterFeed, applied: Applied) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(feed.run(applied), name="test cluster feed")
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@asynccontextmanager
async def consumers_refused(nc: NatsClient, kv: KeyValue) -> AsyncIterator[None]:
    """Make every new consumer on the bucket's stream fail for real ("maximum consumers limit
    reached"), which is how ``kv.keys()`` reads, while stream info and ``kv.get`` still work."""
    js = nc.jetstream()
    held = await kv.watchall()  # one consumer that certainly exists while the limit is 1
    config = (await js.stream_info(BUCKET_STREAM)).config
    await js.update_stream(dataclasses.replace(config, max_consumers=1))
    try:
        yield
    finally:
        await js.update_stream(dataclasses.replace(config, max_consumers=-1))
        await held.stop()


async def test_a_failed_resync_keeps_the_clusters_and_retries_until_it_reads_the_bucket(
    nc: NatsClient,
) -> None:
    kv = await ensure_clusters_bucket(nc.jetstream())
    await put(kv, "gpu-a")
    await put(kv, "gpu-b")
    feed = NatsClusterFeed(nc, resync_interval=0.2)
    applied = Applied()
    async with running_feed(feed, applied) as feed_task:
        await eventually(lambda: applied.last == {"gpu-a", "gpu-b"}, message="the first snapshot applied")
        seen = len(applied.sets)
        async with consumers_refused(nc, kv):
            await put(kv, "gpu-c")  # visible only once a read succeeds again

            def failed_or_applied() -> bool:
                return len(applied.sets) > seen or getattr(feed, "read_failures", 0) >= 2

            await eventually(failed_or_applied, message="resyncs attempted while reads fail")
            assert applied.last == {"gpu-a", "gpu-b"}, "a failed read was taken as the clusters' removal"
            assert not feed_task.done(), "the feed stopped on a failed read"
            assert feed.read_failures >= 2
        # Reads work again: the next retry (back-off, at most a resync interval) sees the bucket.
        await eventually(
            lambda: applied.last == {"gpu-a", "gpu-b", "gpu-c"}, message="recovered read applied"
        )
        assert all(s >= {"gpu-a", "gpu-b"} for s in applied.sets), applied.sets


async def test_a_bucket_read_empty_removes_every_cluster(nc: NatsClient) -> None:
    kv = await ensure_clusters_bucket(nc.jetstream())
    await put(kv, "gpu-a")
    applied = Applied()
    async with running_feed(NatsClusterFeed(nc, resync_interval=0.2), applied):
        await eventually(lambda: applied.last == {"gpu-a"}, message="the first snapshot applied")
        await kv.delete("gpu-a")  # an explicit delete, read back as an empty bucket (NoKeysError)
        await eventually(lambda: applied.last == set(), message="the empty bucket applied")


async def test_an_unreadable_entry_keeps_its_cluster_while_the_rest_resyncs(nc: NatsClient) -> None:
    kv = await ensure_clusters_bucket(nc.jetstream())
    await put(kv, "gpu-a")
    await put(kv, "gpu-b")
    applied = Applied()
    async with running_feed(NatsClusterFeed(nc, resync_interval=0.2), applied):
        await eventually(lambda: applied.last == {"gpu-a", "gpu-b"}, message="the first snapshot applied")
        await kv.put("gpu-b", b"{written by a registry this replica cannot read")
        await put(kv, "gpu-c")
        await eventually(
            lambda: applied.last is not None and "gpu-c" in applied.last, message="resync applied"
        )
        assert applied.last == {"gpu-a", "gpu-b", "gpu-c"}, "an unreadable entry was taken as a removal"


async def test_the_clusters_outlive_a_nats_restart_during_a_resync(nats_process: NatsServer) -> None:
    nc = await nats.connect(nats_process.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        await ensure_streams(nc.jetstream())
        kv = await ensure_clusters_bucket(nc.jetstream())
        await put(kv, "gpu-a")
        feed = NatsClusterFeed(nc, resync_interval=0.2)
        applied = Applied()
        async with running_feed(feed, applied) as feed_task:
            await eventually(lambda: applied.last == {"gpu-a"}, message="the first snapshot applied")
            nats_process.stop()

            def failed_or_gone() -> bool:
                return feed_task.done() or applied.last != {"gpu-a"} or getattr(feed, "read_failures", 0) >= 1

            await eventually(failed_or_gone, timeout=30, message="a resync attempted while NATS is down")
            assert not feed_task.done(), "the feed stopped while NATS was down"
            assert applied.last == {"gpu-a"}, "a read during the outage was taken as the clusters' removal"
            nats_process.start()
            await eventually(lambda: nc.is_connected, timeout=30, message="reconnected")
            await put(kv, "gpu-b")
            await eventually(lambda: applied.last == {"gpu-a", "gpu-b"}, timeout=30, message="resynced")
    finally:
        await nc.close()
