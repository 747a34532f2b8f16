"""One owner creates and updates the streams (issue 17); every other service only waits for them.

Before, every service updated every stream at start-up to what its own environment said, so two
services with different values (a rollout half done, one ConfigMap edited) rewrote the JOBS
stream's configuration back and forth.
"""

from __future__ import annotations

import asyncio
import logging

import nats
import pytest

from trainwatch_common.streams import JOBS_STREAM, StreamSettings, ensure_clusters_bucket, ensure_streams


async def test_a_service_that_does_not_manage_streams_waits_and_never_changes_them(
    nats_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    owner = StreamSettings(manage_streams=True, jobs_duplicate_window_seconds=900)
    follower = StreamSettings(manage_streams=False, jobs_duplicate_window_seconds=60)  # a drift
    client = await nats.connect(nats_url)
    try:
        js = client.jetstream()
        caplog.set_level(logging.WARNING, logger="trainwatch_common.streams")
        waiting = asyncio.create_task(ensure_streams(js, follower), name="test-follower")
        await asyncio.sleep(1.5)
        assert not waiting.done(), "a follower must not create the streams"
        assert (await js.streams_info()) == []
        assert "waiting for JetStream streams to be created by their owner" in caplog.text

        await ensure_streams(js, owner)
        await asyncio.wait_for(waiting, timeout=5)
        assert (await js.stream_info(JOBS_STREAM.name or "")).config.duplicate_window == 900, (
            "the follower's different window is not applied"
        )
        assert "stream configuration differs" in caplog.text
        await ensure_clusters_bucket(js, follower)  # exists now: the follower gets it
    finally:
        await client.close()


def test_manage_streams_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert StreamSettings().manage_streams is True
    monkeypatch.setenv("TRAINWATCH_MANAGE_STREAMS", "false")
    assert StreamSettings().manage_streams is False
