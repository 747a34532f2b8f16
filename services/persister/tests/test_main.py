"""``python -m trainwatch_persister`` as an operator runs it: serves, and stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import httpx
from persister_factories import jetstream, make_event, publish

from trainwatch_common.testing import eventually, free_port


async def test_serves_and_stops_on_sigterm(tmp_path: Path, nats_url: str) -> None:
    port = free_port()
    env = {
        **os.environ,
        "TRAINWATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'jobs.db'}",
        "TRAINWATCH_NATS_URL": nats_url,
        "TRAINWATCH_HTTP_PORT": str(port),
        "TRAINWATCH_VIEWER_TOKENS": "secret-viewer-token",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "trainwatch_persister", env=env, stderr=asyncio.subprocess.PIPE
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:

            async def ready() -> bool:
                return (await client.get("/readyz")).status_code == 200

            await eventually(ready, timeout=30, message="persister ready")
            async with jetstream(nats_url) as js:
                await publish(js, make_event(uid="u-main"))

            async def listed() -> bool:
                headers = {"Authorization": "Bearer secret-viewer-token"}
                return (await client.get("/v1/jobs", headers=headers)).json()["total"] == 1

            await eventually(listed, timeout=10, message="event persisted and listed")
        process.send_signal(signal.SIGTERM)
        _, output = await asyncio.wait_for(process.communicate(), timeout=15)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    stderr = output.decode()
    # uvicorn shuts down cleanly, then re-raises SIGTERM so the exit status tells how it ended.
    assert process.returncode in (0, -signal.SIGTERM), stderr
    assert '"persister stopped"' in stderr
    assert "secret-viewer-token" not in stderr
