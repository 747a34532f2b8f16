"""/readyz names what is not ready (issue 17): NATS stopped and back, the database fine."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx
from persister_factories import running_persister

from trainwatch_common.testing import NatsServer, eventually


async def test_readyz_says_nats_is_down_and_the_database_is_not(
    postgres_url: str, nats_process: NatsServer
) -> None:
    async with running_persister(database_url=postgres_url, nats_url=nats_process.url) as app:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://persister") as client:

            async def answer() -> httpx.Response:
                return await client.get("/readyz")

            await eventually(lambda: _status(answer, 200), timeout=15, message="ready")
            nats_process.stop()
            await eventually(lambda: _status(answer, 503), timeout=15, message="not ready without NATS")
            body = (await answer()).json()
            assert body["ready"] is False
            assert body["checks"]["consumer"] in {"disconnected, reconnecting", "connecting"}, body
            assert body["checks"]["database"] == "ok", body
            nats_process.start()
            await eventually(lambda: _status(answer, 200), timeout=30, message="ready again")
            assert (await answer()).json()["checks"]["consumer"] == "ok"


async def _status(answer: Callable[[], Awaitable[httpx.Response]], code: int) -> bool:
    return bool((await answer()).status_code == code)
