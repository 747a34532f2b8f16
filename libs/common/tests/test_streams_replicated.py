"""Streams and the KV bucket on a real three-node JetStream cluster (issue 17).

``TRAINWATCH_STREAM_REPLICAS`` (StreamSettings.stream_replicas) gives every stream and the
clusters bucket that many copies; with 3, killing one node (the JOBS leader, the worst case)
neither loses an acked message nor stops publishing for long.
"""

from __future__ import annotations

import asyncio
import time

import nats
import pytest
from nats.js import JetStreamContext

from trainwatch_common.streams import (
    CLUSTERS_BUCKET,
    JOBS_STREAM,
    StreamSettings,
    ensure_streams,
    stream_configs,
)
from trainwatch_common.testing import NatsCluster


def test_replicas_come_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    assert {config.num_replicas for config in stream_configs(StreamSettings())} == {1}
    monkeypatch.setenv("TRAINWATCH_STREAM_REPLICAS", "3")
    assert {config.num_replicas for config in stream_configs()} == {3}


async def _publish_acked(js: JetStreamContext, index: int) -> float:
    """Publish message ``index`` until JetStream acks it; returns how long that took."""
    started = time.monotonic()
    while True:
        try:
            await js.publish(
                f"jobs.v1.c.ns.job.j{index}", b"{}", headers={"Nats-Msg-Id": f"m{index}"}, timeout=2
            )
            return time.monotonic() - started
        except (TimeoutError, nats.errors.Error):  # no leader for a moment: same id, again
            await asyncio.sleep(0.1)


async def test_streams_are_replicated_and_survive_the_leader_killed(nats_cluster: NatsCluster) -> None:
    settings = StreamSettings(stream_replicas=3)
    client = await nats.connect(
        nats_cluster.url.split(","), max_reconnect_attempts=-1, reconnect_time_wait=0.1
    )
    try:
        js = client.jetstream(timeout=5)
        await ensure_streams(js, settings)
        for config in stream_configs(settings):
            info = await js.stream_info(config.name or "")
            assert info.config.num_replicas == 3, config.name
            assert info.cluster is not None
            assert len(info.cluster.replicas or []) == 2, config.name
        bucket = await js.stream_info(f"KV_{CLUSTERS_BUCKET.bucket}")
        assert bucket.config.num_replicas == 3

        total = 300
        for index in range(total // 2):
            await _publish_acked(js, index)
        leader = (await js.stream_info(JOBS_STREAM.name or "")).cluster.leader  # type: ignore[union-attr]
        assert leader is not None
        killed_at = time.monotonic()
        nats_cluster.node(leader).kill()
        waits = [await _publish_acked(js, index) for index in range(total // 2, total)]
        print(
            f"JOBS leader {leader} killed: publishing resumed after {max(waits):.2f}s, "
            f"all {total - total // 2} later messages acked "
            f"{time.monotonic() - killed_at:.2f}s after the kill"
        )
        info = await js.stream_info(JOBS_STREAM.name or "")
        assert info.cluster is not None
        assert info.cluster.leader != leader
        assert info.state.messages == total, "every acked message kept once (no loss, no duplicate)"

        await asyncio.get_running_loop().run_in_executor(None, nats_cluster.node(leader).start)
        for index in range(total):  # a publish again after the node is back is still a duplicate
            await _publish_acked(js, index)
        assert (await js.stream_info(JOBS_STREAM.name or "")).state.messages == total
    finally:
        await client.close()


async def test_the_owner_moves_existing_streams_to_the_configured_replicas(nats_cluster: NatsCluster) -> None:
    """A deploy that started with one replica and is moved to three: the owner's next start
    brings every stream there (what docs/deploy.md tells an operator to do)."""
    client = await nats.connect(nats_cluster.url.split(","))
    try:
        js = client.jetstream(timeout=10)
        await ensure_streams(js, StreamSettings(stream_replicas=1))
        assert (await js.stream_info(JOBS_STREAM.name or "")).config.num_replicas == 1
        await ensure_streams(js, StreamSettings(stream_replicas=3))
        for config in stream_configs(StreamSettings(stream_replicas=3)):
            assert (await js.stream_info(config.name or "")).config.num_replicas == 3, config.name
        assert (await js.stream_info(f"KV_{CLUSTERS_BUCKET.bucket}")).config.num_replicas == 3
    finally:
        await client.close()
