"""Helpers: a dashboard served by a real uvicorn on a free port, and contract-shaped job events."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import uvicorn
from fastapi import FastAPI

from trainwatch_common import JobRef, JobStatusEvent, Phase, ReplicaCounts, job_event_id


@contextlib.asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[str]:
    """Run ``app`` (lifespan included) under uvicorn on 127.0.0.1:<free port>; yield its base URL."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_config=None, access_log=False, timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(), name="test dashboard server")
    try:
        while not server.started:
            if task.done():
                await task
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def job_event(
    *,
    name: str = "train-resnet",
    cluster_id: str = "sim-a",
    uid: str = "uid-1",
    phase: Phase = Phase.RUNNING,
    previous: Phase | None = Phase.PENDING,
    sequence: int = 1,
    namespace: str = "team-a",
    kind_key: str = "pytorchjob",
    owner: str | None = "alice",
) -> JobStatusEvent:
    return JobStatusEvent(
        event_id=job_event_id(cluster_id, uid, sequence),
        change="created" if sequence == 0 else "transition",
        sequence=sequence,
        epoch=1,
        job=JobRef(
            cluster_id=cluster_id,
            api_version="kubeflow.org/v1",
            kind="PyTorchJob",
            kind_key=kind_key,
            namespace=namespace,
            name=name,
            uid=uid,
            resource_version=str(100 + sequence),
        ),
        phase=phase,
        previous_phase=previous,
        reason="PyTorchJobRunning",
        message="PyTorchJob train-resnet is running.",
        replicas={"Master": ReplicaCounts(desired=1, active=1), "Worker": ReplicaCounts(desired=2, active=2)},
        observed_at=datetime(2026, 11, 29, 15, 0, sequence, tzinfo=UTC),
        owner=owner,
    )
