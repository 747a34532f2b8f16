"""/readyz names what is not ready (issue 17): Redis stopped under a running watcher shows in
both its uses (checkpoints, leases), NATS stays ok; all ok once Redis is back."""

from __future__ import annotations

import httpx
from watcher_harness import FakeRegistry, RunningWatcher, make_settings

import kubesim
from trainwatch_common.testing import RedisServer, eventually


async def test_readyz_names_redis_down_and_recovers(
    nats_url: str, redis_process: RedisServer, registry: FakeRegistry, sim: kubesim.Simulator
) -> None:
    await registry.add(await sim.add_cluster("alpha"))
    watcher = RunningWatcher(make_settings(nats_url, redis_process.url, lease_ttl_ms=3000), registry)
    app = await watcher.start()
    try:
        assert app.health_server is not None
        await eventually(lambda: app.health_server is not None and app.health_server.port, timeout=10)
        url = f"http://127.0.0.1:{app.health_server.port}/readyz"
        async with httpx.AsyncClient(timeout=5) as http:

            async def status(code: int) -> bool:
                return (await http.get(url)).status_code == code

            await eventually(lambda: status(200), timeout=15, message="ready")
            ready = (await http.get(url)).json()
            assert ready["checks"] == {
                "nats": "ok", "redis": "ok", "leases": "ok", "clusters": "ok", "tasks": "ok"
            }  # fmt: skip

            redis_process.stop()
            await eventually(lambda: status(503), timeout=15, message="not ready without Redis")

            async def both_named() -> bool:
                checks = (await http.get(url)).json()["checks"]
                return checks["redis"] != "ok" and checks["leases"] != "ok"

            await eventually(both_named, timeout=15, message="checkpoints and leases both named")
            down = (await http.get(url)).json()["checks"]
            assert down["nats"] == "ok", down
            assert down["redis"].startswith(("failing (", "no answer within")), down
            assert down["leases"] == "the claim loop's last tick did not reach Redis"

            redis_process.start()
            await eventually(lambda: status(200), timeout=30, message="ready again")
    finally:
        await watcher.stop()
