"""`trainwatch jobs list / get / timeline` against the persister's query API: the persister served by
uvicorn on loopback (SQLite), consuming job events published on a real nats-server as a watcher does."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import nats
import pytest
import uvicorn
import yaml
from conftest import TOKENS
from typer.testing import CliRunner, Result

from trainwatch_common import Phase, ensure_streams
from trainwatch_common.testing import eventually, free_port
from trainwatch_common.testing.events import job_event, publish_job_event
from trainwatch_persister.app import create_app
from trainwatch_persister.settings import PersisterSettings
from trainwatch_registry.cli import app as cli

NOW = datetime.now(UTC).replace(microsecond=0)

# (cluster, namespace, name, uid, kind, [(phase, minutes ago, reason)])
JOBS: list[tuple[str, str, str, str, str, list[tuple[Phase, int, str | None]]]] = [
    ("sim-1", "team-a", "resnet", "u1", "pytorchjob",
     [(Phase.PENDING, 180, None), (Phase.RUNNING, 170, None), (Phase.FAILED, 120, "OOMKilled")]),
    ("sim-1", "team-b", "bert", "u2", "mpijob", [(Phase.PENDING, 20, None), (Phase.RUNNING, 10, None)]),
    ("sim-2", "team-a", "resnet", "u3", "pytorchjob", [(Phase.RUNNING, 5, None)]),
    ("sim-1", "team-c", "resnet", "u4", "job", [(Phase.RUNNING, 300, None), (Phase.SUCCEEDED, 240, None)]),
]  # fmt: skip


@pytest.fixture
async def query_url(sqlite_url: str, nats_url: str) -> AsyncIterator[str]:
    settings = PersisterSettings(
        database_url=sqlite_url, nats_url=nats_url, batch_max_wait_ms=20, retention_days=0
    )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings, tokens=TOKENS), host="127.0.0.1", port=port, log_config=None)
    )
    task = asyncio.create_task(server.serve(), name="persister-uvicorn")
    while not server.started:
        if task.done():
            await task
        await asyncio.sleep(0.01)  # polling uvicorn's start flag, not standing in for a result
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _invoke(*args: str, url: str, token: str = "viewer-token") -> Result:
    env = {"TRAINWATCH_QUERY_URL": url, "TRAINWATCH_API_TOKEN": token, "COLUMNS": "200"}
    return await asyncio.to_thread(CliRunner().invoke, cli, list(args), env=env)


async def _run(*args: str, url: str, token: str = "viewer-token") -> tuple[int, str]:
    result = await _invoke(*args, url=url, token=token)
    return result.exit_code, result.output


async def _json(*args: str, url: str) -> Any:
    result = await _invoke(*args, "-o", "json", url=url)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
async def seeded(query_url: str, nats_url: str) -> str:
    """The query URL once the persister has written every job's last event."""
    client = await nats.connect(nats_url)
    try:
        js = client.jetstream()
        await ensure_streams(js)
        for cluster, namespace, name, uid, kind, history in JOBS:
            for sequence, (phase, minutes_ago, reason) in enumerate(history):
                event = job_event(
                    cluster_id=cluster, namespace=namespace, name=name, uid=uid, kind_key=kind,
                    sequence=sequence, phase=phase, reason=reason, resource_version=str(100 + sequence),
                    observed_at=NOW - timedelta(minutes=minutes_ago), owner="alice" if uid == "u1" else None,
                )  # fmt: skip
                await publish_job_event(js, event)
    finally:
        await client.close()

    async def all_written() -> bool:
        result = await _invoke("jobs", "list", "-o", "json", url=query_url)
        if result.exit_code != 0:
            return False
        jobs = {job["uid"]: job["sequence"] for job in json.loads(result.stdout)}
        return jobs == {uid: len(history) - 1 for _, _, _, uid, _, history in JOBS}

    await eventually(all_written, message="the persister wrote every job's last event")
    return query_url


def _uids(jobs: list[dict[str, Any]]) -> list[str]:
    return sorted(job["uid"] for job in jobs)


async def test_jobs_list_filters_and_formats(seeded: str) -> None:
    url = seeded
    assert _uids(await _json("jobs", "list", "--cluster", "sim-1", url=url)) == ["u1", "u2", "u4"]
    assert _uids(await _json("jobs", "list", "--kind", "mpijob", url=url)) == ["u2"]
    assert _uids(await _json("jobs", "list", "--phase", "failed", "--phase", "Succeeded", url=url)) == [
        "u1",
        "u4",
    ]
    assert _uids(await _json("jobs", "list", "--since", "1h", url=url)) == ["u2", "u3"]
    since = (NOW - timedelta(minutes=150)).replace(tzinfo=None).isoformat()  # a time, UTC without a zone
    assert _uids(await _json("jobs", "list", "--since", since, url=url)) == ["u1", "u2", "u3"]
    assert _uids(await _json("jobs", "list", "-c", "sim-1", "--phase", "running", url=url)) == ["u2"]
    assert _uids(await _json("jobs", "list", "--owner", "alice", url=url)) == ["u1"]

    result = await _invoke("jobs", "list", "-o", "yaml", "--cluster", "sim-2", url=url)
    assert result.exit_code == 0, result.output
    assert [job["name"] for job in yaml.safe_load(result.stdout)] == ["resnet"]

    code, output = await _run("jobs", "list", url=url)
    assert code == 0, output
    assert "CLUSTER" in output
    assert "PHASE" in output
    assert "4 job(s)" in output
    failed = next(line for line in output.splitlines() if " u1 " in line)
    assert "sim-1" in failed
    assert "team-a" in failed
    assert "Failed" in failed
    assert "alice" in failed
    code, output = await _run("jobs", "list", "--limit", "2", url=url)
    assert code == 0, output
    assert "2 of 4 job(s)" in output
    assert " u3 " in output
    assert " u2 " in output


async def test_jobs_get_by_name_or_uid(seeded: str) -> None:
    url = seeded
    code, output = await _run("jobs", "get", "sim-1", "bert", url=url)
    assert code == 0, output
    assert "Running" in output
    assert "u2" in output
    assert "trainwatch jobs timeline sim-1 bert" in output

    code, output = await _run("jobs", "get", "sim-1", "resnet", url=url)
    assert code == 1
    assert "2 jobs are named 'resnet' in sim-1" in output
    assert "team-a (uid u1)" in output
    assert "team-c (uid u4)" in output
    assert "--namespace" in output

    got = await _json("jobs", "get", "sim-1", "resnet", "-n", "team-a", url=url)
    assert (got["uid"], got["phase"], got["reason"]) == ("u1", "Failed", "OOMKilled")
    assert "transitions" not in got  # that is the timeline's
    assert (await _json("jobs", "get", "sim-1", "u4", url=url))["name"] == "resnet"  # a uid works too

    code, output = await _run("jobs", "get", "sim-1", "nope", url=url)
    assert code == 1
    assert "no job named 'nope' (nor with that uid) in cluster 'sim-1'" in output
    code, output = await _run("jobs", "get", "sim-3", "bert", url=url)
    assert code == 1
    assert "in cluster 'sim-3'" in output


async def test_jobs_timeline(seeded: str) -> None:
    url = seeded
    timeline = await _json("jobs", "timeline", "sim-1", "resnet", "--namespace", "team-a", url=url)
    assert timeline["uid"] == "u1"
    assert [(t["sequence"], t["phase"], t["change"]) for t in timeline["transitions"]] == [
        (0, "Pending", "created"),
        (1, "Running", "transition"),
        (2, "Failed", "transition"),
    ]
    code, output = await _run("jobs", "timeline", "sim-1", "resnet", "-n", "team-a", url=url)
    assert code == 0, output
    assert "team-a/resnet in sim-1" in output
    lines = [line for line in output.splitlines() if "created" in line or "transition" in line]
    assert ["Pending" in lines[0], "Running" in lines[1], "Failed" in lines[2]] == [True, True, True]
    assert "OOMKilled" in lines[2]


async def test_jobs_commands_say_what_is_wrong(query_url: str) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    for args in (("jobs", "list"), ("jobs", "get", "sim-1", "bert"), ("jobs", "timeline", "sim-1", "bert")):
        code, output = await _run(*args, url=closed)
        assert code == 1, output
        assert (
            f"cannot reach the query API (the persister; --query-url or TRAINWATCH_QUERY_URL) at {closed}"
            in output
        )
        assert "Traceback" not in output

    code, output = await _run("jobs", "list", url=query_url, token="nope")
    assert code == 1
    assert "401" in output
    assert "TRAINWATCH_API_TOKEN" in output

    code, output = await _run("jobs", "list", "--phase", "runing", url=query_url)
    assert code == 2
    assert "'runing' is not a phase: Pending, Running" in output
    code, output = await _run("jobs", "list", "--since", "yesterday", url=query_url)
    assert code == 2
    assert "neither a duration (30m, 2h, 7d) nor a time" in output
    code, output = await _run("jobs", "list", "-o", "json", url=query_url)
    assert code == 0, output
    assert json.loads(output) == []
