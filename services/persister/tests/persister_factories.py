"""Builders of job-status events and a migrated engine for the persister's tests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import nats
from fastapi import FastAPI
from nats.js import JetStreamContext
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_common import (
    JobRef,
    JobStatusEvent,
    Phase,
    ensure_streams,
    job_event_id,
)
from trainwatch_common.auth import ApiTokens
from trainwatch_common.events.diagnosis import Blame, Diagnosis, DiagnosisCategory, DiagnosisWarning, LogTail
from trainwatch_common.testing.events import publish_job_event
from trainwatch_persister.app import create_app
from trainwatch_persister.database import make_engine
from trainwatch_persister.migrate import upgrade
from trainwatch_persister.settings import PersisterSettings

BASE_TIME = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)

KINDS = {
    "pytorchjob": ("kubeflow.org/v1", "PyTorchJob"),
    "mpijob": ("kubeflow.org/v2beta1", "MPIJob"),
    "job": ("batch/v1", "Job"),
}


def oom_diagnosis(**overrides: Any) -> Diagnosis:
    """A worker OOMKilled on a GPU node, with its events and log tail."""
    values: dict[str, Any] = {
        "category": DiagnosisCategory.OOM_KILLED,
        "blame": Blame.USER_CONFIG,
        "summary": "Worker-3 (pytorch) exit 137 on node gpu-7: memory limit reached",
        "reason": "OOMKilled",
        "role": "worker",
        "replica_index": 3,
        "pod": "train-worker-3",
        "container": "pytorch",
        "exit_code": 137,
        "signal": 9,
        "node": "gpu-7",
        "since": BASE_TIME,
        "events": [DiagnosisWarning(reason="BackOff", message="Back-off restarting failed container",
                                    count=4, object="Pod/train-worker-3")],
        "log_tail": LogTail(container="pytorch", lines=["step 90 loss 0.12", "CUDA out of memory"]),
        **overrides,
    }  # fmt: skip
    return Diagnosis(**values)


def make_event(
    *,
    cluster: str = "alpha",
    uid: str = "uid-1",
    sequence: int = 0,
    epoch: int = 1,
    rv: str | None = None,
    phase: Phase = Phase.PENDING,
    change: str | None = None,
    namespace: str = "team-a",
    kind_key: str = "pytorchjob",
    name: str | None = None,
    labels: dict[str, str] | None = None,
    owner: str | None = None,
    terminal: bool | None = None,
    observed_at: datetime | None = None,
    created_at: datetime | None = None,
    event_id: str | None = None,
    **extra: Any,
) -> JobStatusEvent:
    api_version, kind = KINDS[kind_key]
    observed = observed_at or BASE_TIME + timedelta(minutes=sequence)
    return JobStatusEvent(
        event_id=event_id or job_event_id(cluster, uid, sequence),
        change=change or ("created" if sequence == 0 else "transition"),  # type: ignore[arg-type]
        sequence=sequence,
        epoch=epoch,
        watcher_id=f"watcher-{epoch}",
        job=JobRef(
            cluster_id=cluster, api_version=api_version, kind=kind, kind_key=kind_key, namespace=namespace,
            name=name or f"job-{uid}", uid=uid, resource_version=rv or str(100 + sequence),
        ),
        phase=phase,
        terminal=phase in (Phase.SUCCEEDED, Phase.FAILED) if terminal is None else terminal,
        observed_at=observed,
        created_at=created_at or BASE_TIME,
        labels=labels or {},
        owner=owner,
        **extra,
    )  # fmt: skip


async def publish(js: JetStreamContext, event: JobStatusEvent, *, msg_id: str | None = None) -> None:
    await publish_job_event(js, event, msg_id=msg_id)


async def migrated_engine(url: str) -> AsyncEngine:
    engine = make_engine(url)
    async with engine.begin() as conn:
        await upgrade(conn)
    return engine


@contextlib.asynccontextmanager
async def running_persister(*, database_url: str, nats_url: str, **overrides: Any) -> AsyncIterator[FastAPI]:
    """The whole service (migrations, consumer, API) for the duration of the block."""
    values: dict[str, Any] = {
        "database_url": database_url,
        "nats_url": nats_url,
        "batch_size": 50,
        "batch_max_wait_ms": 50,
        "retry_initial_seconds": 0.05,
        "retry_max_seconds": 0.5,
        "retention_days": 0,
        **overrides,
    }
    app = create_app(PersisterSettings(**values), tokens=ApiTokens(viewer_tokens=SecretStr("viewer-token")))
    async with app.router.lifespan_context(app):
        yield app


@contextlib.asynccontextmanager
async def jetstream(nats_url: str) -> AsyncIterator[JetStreamContext]:
    client = await nats.connect(nats_url)
    try:
        js = client.jetstream()
        await ensure_streams(js)
        yield js
    finally:
        await client.close()
