"""Test helpers for the notifier: job events, publishing, rules, settings, a running notifier."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import KeyDeletedError, KeyNotFoundError

from trainwatch_common import (
    JobRef,
    JobStatusEvent,
    Phase,
    ReplicaCounts,
    ensure_streams,
    job_event_id,
)
from trainwatch_common.streams import NOTIFIER_DELIVERIES_BUCKET, ensure_bucket
from trainwatch_common.testing.events import publish_job_event
from trainwatch_notifier.app import Notifier
from trainwatch_notifier.dedupe import IdempotencyKeys
from trainwatch_notifier.settings import NotifierSettings
from trainwatch_notifier.sink import FeishuSink

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def make_event(
    *,
    cluster_id: str = "alpha",
    namespace: str = "team-a",
    name: str = "train-1",
    uid: str | None = None,
    kind: str = "PyTorchJob",
    kind_key: str = "pytorchjob",
    phase: Phase = Phase.FAILED,
    terminal: bool | None = None,
    sequence: int = 0,  # a job's first event: a later one waits for its elders (order.py)
    epoch: int = 1,
    owner: str | None = None,
    labels: dict[str, str] | None = None,
    message: str | None = "Job train-1 has failed because it has reached the specified backoff limit",
    reason: str | None = "BackoffLimitExceeded",
    change: str = "transition",
) -> JobStatusEvent:
    uid = uid or f"uid-{name}"
    if terminal is None:
        terminal = phase in (Phase.FAILED, Phase.SUCCEEDED)
    return JobStatusEvent(
        event_id=job_event_id(cluster_id, uid, sequence),
        change=change,  # type: ignore[arg-type]
        sequence=sequence,
        epoch=epoch,
        job=JobRef(
            cluster_id=cluster_id, api_version="kubeflow.org/v1", kind=kind, kind_key=kind_key,
            namespace=namespace, name=name, uid=uid, resource_version="42",
        ),
        phase=phase,
        terminal=terminal,
        reason=reason,
        message=message,
        replicas={
            "Master": ReplicaCounts(desired=1, active=0, failed=1),
            "Worker": ReplicaCounts(desired=3, active=3),
        },
        started_at=T0,
        finished_at=T0 + timedelta(hours=1, minutes=2, seconds=3),
        observed_at=T0 + timedelta(hours=1, minutes=2, seconds=4),
        labels=labels or {},
        owner=owner,
    )  # fmt: skip


async def publish(js: JetStreamContext, event: JobStatusEvent, *, msg_id: str | None = None) -> None:
    await publish_job_event(js, event, msg_id=msg_id)


def feishu_rules(url: str, *, extra: str = "", channel_extra: str = "", secret: str = "demo") -> str:
    """A ruleset with one Feishu card channel and a rule sending every default phase to it."""
    return f"""
channels:
  ml-feishu:
    type: feishu
    url: {url}
    secret: {secret}
    format: card
{channel_extra}
owners:
  alice: {{feishu: ou_alice, slack: U_ALICE, name: Alice}}
rules:
  - name: everything
    channels: [ml-feishu]
{extra}
"""


def settings_for(*, nats_url: str, redis_url: str, rules_file: Path, **overrides: Any) -> NotifierSettings:
    values: dict[str, Any] = {
        "nats_url": nats_url,
        "redis_url": redis_url,
        "rules_file": rules_file,
        "rules_poll_seconds": 0.05,
        "http_port": 0,
        "dashboard_url": "https://dash.example.com",
        "retry_base_seconds": 0.05,
        "retry_cap_seconds": 0.2,
        "retry_max_seconds": 2.0,
        "shutdown_grace_seconds": 2.0,
        "instance_id": "test-notifier",
        # A database of the test's own: silences must not leak from one test into the next.
        "notifier_database_url": f"sqlite+aiosqlite:///{tempfile.mkdtemp(prefix='notifier-db-')}/notifier.db",
    }
    values.update(overrides)
    return NotifierSettings(**values)


@contextlib.asynccontextmanager
async def running(notifier: Notifier) -> AsyncIterator[Notifier]:
    """Run a notifier as a named task until the block ends (then stop it gracefully)."""
    stop = asyncio.Event()
    task = asyncio.create_task(notifier.run(stop), name="test-notifier")
    ready = asyncio.create_task(notifier.ready.wait(), name="test-notifier-ready")
    done, _ = await asyncio.wait({task, ready}, timeout=20, return_when=asyncio.FIRST_COMPLETED)
    if ready not in done:
        ready.cancel()
        if task in done:
            task.result()  # surface the start-up error
        raise AssertionError("notifier not ready in 20 s")
    try:
        yield notifier
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


async def consumer_with_ack_wait(js: JetStreamContext, ack_wait: float) -> None:
    """The durable consumer as production has it, but redelivering after ``ack_wait`` seconds."""
    await ensure_streams(js)
    await js.add_consumer(
        "JOBS",
        config=ConsumerConfig(
            durable_name="notifier",
            deliver_policy=DeliverPolicy.NEW,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=ack_wait,
            max_ack_pending=1000,
        ),
    )


async def all_acked(js: JetStreamContext) -> bool:
    info = await js.consumer_info("JOBS", "notifier")
    return info.num_ack_pending == 0 and info.num_pending == 0


def notifier_process(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """``python -m trainwatch_notifier`` with these TRAINWATCH_* settings, logging to a file."""
    log = log_path.open("ab")
    command = [sys.executable, "-m", "trainwatch_notifier"]
    # The processes of one test share a database (as replicas do), and no test shares the cwd's.
    database = f"sqlite+aiosqlite:///{log_path.parent / 'notifier.db'}"
    env = {"TRAINWATCH_NOTIFIER_DATABASE_URL": database, **env}
    try:
        return subprocess.Popen(command, env={**os.environ, **env}, stdout=log, stderr=log)
    finally:
        log.close()  # the child has its own copy


def consuming(log_path: Path) -> bool:
    """Whether the subprocess logging to ``log_path`` has started consuming (its start-up, with
    imports and migrations, takes seconds on a loaded machine: a fixed allowance ran out)."""
    return log_path.exists() and b"notifier consuming" in log_path.read_bytes()


def kill(process: subprocess.Popen[bytes]) -> None:
    """kill -9: no shutdown, no put-back; what the process held comes back after the ack wait."""
    process.send_signal(signal.SIGKILL)
    process.wait(10)


async def delivery_marker(js: JetStreamContext, event_id: str, channel: str = "ml-feishu") -> bytes | None:
    """The notifier's marker for (event, channel) in its KV bucket, or None if there is none."""
    kv = await ensure_bucket(js, NOTIFIER_DELIVERIES_BUCKET)
    try:
        entry = await kv.get(IdempotencyKeys(kv).key(event_id, channel))
    except (KeyNotFoundError, KeyDeletedError):
        return None
    return entry.value


def covered(sink: FeishuSink) -> int:
    """How many events the cards the sink received tell of: a digest's title counts its jobs."""
    total = 0
    for received in sink.received:
        match = re.match(r"(\d+) job updates", received.body["card"]["header"]["title"]["content"])
        total += int(match.group(1)) if match else 1
    return total
