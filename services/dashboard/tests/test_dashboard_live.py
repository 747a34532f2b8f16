"""The live path against a real nats-server: JetStream → broker → SSE, and the slow-client policy."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import nats
import orjson
from dashboard_support import job_event, serving

from trainwatch_common import JobStatusEvent, Phase, ensure_streams
from trainwatch_common.events.diagnosis import Blame, Diagnosis, DiagnosisCategory
from trainwatch_common.testing import eventually
from trainwatch_common.testing.events import publish_job_event
from trainwatch_dashboard.app import create_app
from trainwatch_dashboard.live import Broker, JobFilter, LiveFeed, job_payload, sse_stream
from trainwatch_dashboard.settings import DashboardSettings


async def publish(nats_url: str, *events: JobStatusEvent) -> None:
    nc = await nats.connect(nats_url)
    try:
        for event in events:
            await publish_job_event(nc.jetstream(), event)
    finally:
        await nc.close()


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, dict[str, object]]]:
    event = "message"
    async for line in lines:
        if line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif line.startswith("data: "):
            yield event, orjson.loads(line.removeprefix("data: "))
            event = "message"


async def test_a_published_job_event_reaches_an_sse_client(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    await ensure_streams(nc.jetstream())
    await nc.close()
    settings = DashboardSettings(  # an open read-only demo: the stream, not the sign-in, is tested here
        nats_url=nats_url,
        registry_url="http://127.0.0.1:9",
        query_url="http://127.0.0.1:9",
        dashboard_public_read=True,
    )
    app = create_app(settings)
    async with serving(app) as base, httpx.AsyncClient(base_url=base, timeout=10) as client:
        await asyncio.wait_for(app.state.live.subscribed.wait(), 10)
        async with client.stream("GET", "/events/jobs", params={"cluster": "sim-a"}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            async with contextlib.aclosing(response.aiter_lines()) as lines:
                assert await anext(lines) == "retry: 2000"  # the stream is open and the subscriber registered
                other_cluster = job_event(cluster_id="sim-b", uid="uid-9")
                await publish(
                    nats_url, other_cluster, job_event(phase=Phase.FAILED, previous=Phase.RUNNING, sequence=2)
                )
                async with asyncio.timeout(10), contextlib.aclosing(sse_events(lines)) as events:
                    event, data = await anext(events)
        assert event == "job"
        assert data["cluster_id"] == "sim-a"  # the other cluster's event was filtered out on the server
        assert data["phase"] == "Failed"
        assert data["previous_phase"] == "Running"
        assert data["name"] == "train-resnet"
        assert data["replicas"]["Worker"]["active"] == 2


async def test_a_slow_client_is_dropped_and_never_holds_back_the_others(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        broker = Broker(queue_size=3)
        feed = LiveFeed(broker)
        await feed.start(nc)
        slow = broker.subscribe("job")  # never read
        fast = broker.subscribe("job")
        received: list[int] = []

        async def read_fast() -> None:
            async for chunk in sse_stream(broker, fast, heartbeat=30):
                if chunk.startswith(b"event: job"):
                    received.append(orjson.loads(chunk.split(b"data: ", 1)[1])["sequence"])

        reader = asyncio.create_task(read_fast(), name="fast sse reader")
        try:
            events = [job_event(sequence=n, phase=Phase.RUNNING) for n in range(1, 21)]
            await publish(nats_url, *events)
            await eventually(
                lambda: received == list(range(1, 21)), timeout=10, message="fast client got all"
            )
            assert slow.dropped.is_set()
            assert broker.subscriber_count == 1  # only the fast client is left
            assert broker.dropped_total == 1
            # The slow client's stream ends with a "dropped" event (the browser then reconnects).
            chunks = [chunk async for chunk in sse_stream(broker, slow, heartbeat=30)]
            assert chunks[-1].startswith(b"event: dropped")
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            await feed.stop()
    finally:
        await nc.close()


async def test_health_reports_reach_the_clusters_stream_with_the_latest_first(nats_url: str) -> None:
    from datetime import UTC, datetime

    from trainwatch_common import ClusterHealth, cluster_health_subject, wrap_cluster_health

    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        for n, reachable in enumerate((False, True)):
            health = ClusterHealth(
                cluster_id="sim-a",
                reachable=reachable,
                kinds_served=["job", "pytorchjob"],
                owner="watcher-1",
                epoch=3,
                watch_lag_seconds=0.2,
                observed_at=datetime(2026, 11, 29, 15, 0, n, tzinfo=UTC),
            )
            await js.publish(
                cluster_health_subject("sim-a"), wrap_cluster_health(health, event_id=f"h{n}").to_json()
            )
        broker = Broker(queue_size=10)
        feed = LiveFeed(broker)
        await feed.start(nc)  # a late joiner still learns each cluster's last report
        try:
            await eventually(lambda: "sim-a" in feed.health, timeout=10, message="health received")
            assert feed.health["sim-a"].reachable is True
            assert feed.health["sim-a"].owner == "watcher-1"
        finally:
            await feed.stop()
    finally:
        await nc.close()


def test_a_job_payload_carries_the_current_diagnosis_category() -> None:
    """A jobs list filtered by category inserts a new job, and marks a shown one, by it."""
    event = job_event(sequence=2)
    assert job_payload(event)["diagnosis_category"] is None
    oom = Diagnosis(
        category=DiagnosisCategory.OOM_KILLED, blame=Blame.USER_CONFIG, summary="worker-1 OOMKilled"
    )
    update = event.model_copy(update={"change": "diagnosis", "diagnosis": oom})
    assert job_payload(update)["diagnosis_category"] == "OOMKilled"


def test_job_filter_lets_through_the_event_that_leaves_a_filtered_phase() -> None:
    payload = {
        "cluster_id": "a",
        "namespace": "n",
        "kind_key": "job",
        "name": "Big-Train",
        "uid": "u",
        "phase": "Failed",
        "previous_phase": "Running",
        "owner": "bob",
    }
    assert JobFilter(phase="Running").matches(payload)
    assert JobFilter(phase="Failed", cluster="a", name="big").matches(payload)
    assert not JobFilter(phase="Pending").matches(payload)
    assert not JobFilter(cluster="b").matches(payload)
    assert not JobFilter(owner="alice").matches(payload)
    assert not JobFilter(uid="other").matches(payload)
    assert not JobFilter(name="small").matches(payload)
    labelled = {**payload, "labels": {"team": "vision"}}
    assert JobFilter(label="team=vision").matches(labelled)
    assert not JobFilter(label="team=nlp").matches(labelled)
    assert not JobFilter(label="team=vision").matches(payload)


async def test_sigterm_ends_open_streams_and_stops_the_process_promptly(nats_url: str) -> None:
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TRAINWATCH_")},
        "TRAINWATCH_NATS_URL": nats_url,
        "TRAINWATCH_HTTP_PORT": str(port),
        "TRAINWATCH_REGISTRY_URL": "http://127.0.0.1:9",
        "TRAINWATCH_QUERY_URL": "http://127.0.0.1:9",
        "TRAINWATCH_DASHBOARD_PUBLIC_READ": "true",  # the stream, not the sign-in, is tested here
    }
    process = subprocess.Popen(  # noqa: ASYNC220 (starting it is instant; waiting is done with eventually)
        [sys.executable, "-m", "trainwatch_dashboard"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:

            async def answers() -> bool:
                try:
                    return (await client.get("/healthz")).status_code == 200
                except httpx.TransportError:
                    return False

            await eventually(answers, timeout=30, message="dashboard answers")
            async with client.stream("GET", "/events/jobs") as response:
                lines = response.aiter_lines()
                assert await anext(lines) == "retry: 2000"
                started = time.monotonic()
                process.send_signal(signal.SIGTERM)
                rest = [line async for line in lines]  # the stream ends instead of holding shutdown up
            assert "event: dropped" in rest
        await eventually(lambda: process.poll() is not None, timeout=5, message="process exited")
        # After its clean shutdown uvicorn re-raises the signal it caught, as supervisors expect.
        assert process.returncode in (0, -signal.SIGTERM)
        assert time.monotonic() - started < 3
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


async def test_readyz_is_ok_once_subscribed_and_says_so(nats_url: str) -> None:
    """Issue 17: the same shape as when not ready (test_backends_down_show_a_banner_not_a_500)."""
    nc = await nats.connect(nats_url)
    await ensure_streams(nc.jetstream())
    await nc.close()
    settings = DashboardSettings(
        nats_url=nats_url,
        registry_url="http://127.0.0.1:9",
        query_url="http://127.0.0.1:9",
        dashboard_public_read=True,
    )
    app = create_app(settings)
    async with serving(app) as base, httpx.AsyncClient(base_url=base, timeout=10) as client:
        await asyncio.wait_for(app.state.live.subscribed.wait(), 10)
        ready = await client.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["ready"] is True
    assert ready.json()["checks"] == {"nats": "ok", "tasks": "ok"}
