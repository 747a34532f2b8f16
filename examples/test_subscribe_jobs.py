"""The example other teams copy runs against a real JetStream server."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from pathlib import Path

import nats
import pytest

from trainwatch_common import JobStatusEvent, Phase, SubPhase, ensure_streams
from trainwatch_common.testing import eventually, free_port
from trainwatch_common.testing.events import job_event, publish_job_event

_spec = importlib.util.spec_from_file_location(
    "subscribe_jobs", Path(__file__).with_name("subscribe_jobs.py")
)
assert _spec is not None
assert _spec.loader is not None
subscribe_jobs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(subscribe_jobs)


async def publish(nats_url: str, events: list[JobStatusEvent]) -> None:
    client = await nats.connect(nats_url)
    try:
        js = client.jetstream()
        await ensure_streams(js)
        for event in events:
            await publish_job_event(js, event)
    finally:
        await client.close()


async def test_example_consumer_filters_by_namespace_and_resumes(nats_url: str) -> None:
    wanted = [job_event(sequence=s, namespace="team-a") for s in range(3)]
    other = job_event(sequence=9, namespace="team-b")
    await publish(nats_url, [wanted[0], other, wanted[1]])

    received: list[JobStatusEvent] = []

    async def handle(event: JobStatusEvent) -> None:
        received.append(event)

    stop = asyncio.Event()
    run = dict(
        nats_url=nats_url, durable="example", handle=handle, stop=stop, cluster_id="alpha", namespace="team-a"
    )
    task = asyncio.create_task(subscribe_jobs.consume(**run), name="example-consumer")
    await eventually(lambda: len(received) == 2, timeout=10, message="two team-a events")
    stop.set()
    await task

    # Restarted, the durable consumer resumes after what was acked.
    await publish(nats_url, [wanted[2]])
    stop = asyncio.Event()
    run["stop"] = stop
    task = asyncio.create_task(subscribe_jobs.consume(**run), name="example-consumer")
    await eventually(lambda: len(received) == 3, timeout=10, message="the third event")
    stop.set()
    await task
    assert [e.sequence for e in received] == [0, 1, 2]
    assert all(e.job.namespace == "team-a" for e in received)


async def _received_by(nats_url: str, durable: str, cluster_id: str, count: int) -> list[JobStatusEvent]:
    received: list[JobStatusEvent] = []

    async def handle(event: JobStatusEvent) -> None:
        received.append(event)

    stop = asyncio.Event()
    run = dict(nats_url=nats_url, durable=durable, handle=handle, stop=stop, cluster_id=cluster_id)
    task = asyncio.create_task(subscribe_jobs.consume(**run), name="example-consumer")
    try:
        await eventually(lambda: len(received) >= count or task.done(), timeout=10, message=f"{count} events")
    finally:
        stop.set()
        await task
    return received


async def test_the_default_durable_follows_the_filter(nats_url: str) -> None:
    await publish(nats_url, [job_event(cluster_id="sim-1", uid="a"), job_event(cluster_id="sim-2", uid="b")])
    first = subscribe_jobs.durable_name("example-team", cluster_id="sim-1", namespace=None)
    second = subscribe_jobs.durable_name("example-team", cluster_id="sim-2", namespace=None)
    assert first != second
    assert [e.job.cluster_id for e in await _received_by(nats_url, first, "sim-1", 1)] == ["sim-1"]
    # Rerun with --cluster sim-2: its own durable, so sim-2's events and only those.
    assert [e.job.cluster_id for e in await _received_by(nats_url, second, "sim-2", 1)] == ["sim-2"]
    assert subscribe_jobs.durable_name("team a.b", cluster_id=None, namespace="ns.x") == "team_a_b-all-ns_x"


async def test_an_explicit_durable_with_another_filter_is_refused(nats_url: str) -> None:
    await publish(nats_url, [job_event(cluster_id="sim-1", uid="a")])
    await _received_by(nats_url, "mine", "sim-1", 1)
    refused = r"the durable consumer 'mine' filters jobs\.v1\.sim-1\.\*\.\*\.\*, not jobs\.v1\.sim-2\."
    with pytest.raises(subscribe_jobs.ConsumerProblem, match=refused):
        await subscribe_jobs.consume(
            nats_url=nats_url, durable="mine", handle=print, stop=asyncio.Event(), cluster_id="sim-2"
        )


def test_the_printed_line_has_change_and_sub_phase(capsys: pytest.CaptureFixture[str]) -> None:
    event = job_event(cluster_id="sim-1", sequence=1, phase=Phase.PENDING, sub_phase=SubPhase.QUEUED)
    asyncio.run(subscribe_jobs.print_event(event))
    line = capsys.readouterr().out
    assert "transition" in line
    assert "Pending/Queued" in line


def test_a_wrong_url_fails_cleanly() -> None:
    closed = f"nats://127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("subscribe_jobs.py")), "--nats", closed],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert f"cannot connect to NATS at {closed}" in done.stderr
    assert "Traceback" not in done.stderr


async def test_a_server_without_trainwatch_streams_fails_cleanly(nats_url: str) -> None:
    client = await nats.connect(nats_url)
    try:
        await client.jetstream().delete_stream("JOBS")
    except Exception:  # no stream yet: nothing to delete
        pass
    finally:
        await client.close()
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(Path(__file__).with_name("subscribe_jobs.py")), "--nats", nats_url],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert "no JOBS stream" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_url_defaults_to_trainwatch_nats_url() -> None:
    closed = f"nats://127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("subscribe_jobs.py"))],
        capture_output=True, text=True, timeout=60,
        env={"TRAINWATCH_NATS_URL": closed, "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 1
    assert f"cannot connect to NATS at {closed}" in done.stderr
