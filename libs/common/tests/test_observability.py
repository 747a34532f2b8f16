import asyncio
import json
import logging

import httpx

from trainwatch_common.observability.health import HealthServer, health_app
from trainwatch_common.observability.logging import JsonFormatter, scrub


def test_logs_are_json_and_scrubbed() -> None:
    record = logging.makeLogRecord(
        {"name": "t", "levelname": "INFO", "msg": "got Bearer abc.def token: xyz", "cluster_id": "c1"}
    )
    line = json.loads(JsonFormatter("svc").format(record))
    assert line["service"] == "svc"
    assert line["cluster_id"] == "c1"
    assert "abc.def" not in line["message"]
    assert "xyz" not in line["message"]


def test_scrub_keeps_ordinary_text() -> None:
    assert scrub("cluster c1 is reachable") == "cluster c1 is reachable"


async def test_health_endpoints() -> None:
    ready = {"value": False}
    app = health_app({"nats": lambda: ready["value"]})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        assert (await client.get("/healthz")).status_code == 200
        not_ready = await client.get("/readyz")
        assert not_ready.status_code == 503
        assert not_ready.json() == {"ready": False, "checks": {"nats": "not ready"}}
        ready["value"] = True
        assert (await client.get("/readyz")).status_code == 200
        metrics = await client.get("/metrics")
        assert metrics.status_code == 200
        assert "python_info" in metrics.text


async def test_health_server_serves_on_a_real_port() -> None:
    server = HealthServer(health_app(), host="127.0.0.1", port=0)
    started = asyncio.Event()
    task = asyncio.create_task(server.serve(started), name="health-under-test")
    try:
        await asyncio.wait_for(started.wait(), 10)
        async with httpx.AsyncClient() as client:
            response = await client.get(f"http://127.0.0.1:{server.port}/healthz")
        assert response.json() == {"status": "ok"}
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
