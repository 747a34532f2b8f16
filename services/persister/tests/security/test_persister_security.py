"""Issue 15's cases against the persister's query API (real PostgreSQL and SQLite)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from persister_factories import BASE_TIME, make_event
from pydantic import SecretStr

from trainwatch_common.auth import ApiTokens
from trainwatch_persister import repository
from trainwatch_persister.app import create_app
from trainwatch_persister.settings import PersisterSettings

VIEWER = {"Authorization": "Bearer viewer-token"}


@pytest.fixture
async def client(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = PersisterSettings(database_url=database_url, consume=False, retention_days=0)
    app = create_app(settings, tokens=ApiTokens(viewer_tokens=SecretStr("viewer-token")))
    async with app.router.lifespan_context(app):
        async with app.state.engine.begin() as conn:
            await repository.write_events(conn, [make_event(uid="u1", name="resnet", created_at=BASE_TIME)])
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://persister") as http:
            yield http


@pytest.mark.parametrize(
    ("params", "names"),
    [
        ({"created_after": "0001-01-01T00:00:00+14:00"}, ["resnet"]),
        ({"created_before": "0001-01-01T00:00:00+14:00"}, []),
        ({"updated_after": "0001-01-01T00:00:00+14:00"}, ["resnet"]),
        ({"created_before": "9999-12-31T23:59:59-12:00"}, ["resnet"]),
        ({"updated_after": "9999-12-31T23:59:59-12:00"}, []),
    ],
    ids=["year 1 +14:00 after", "year 1 +14:00 before", "updated year 1", "year 9999 -12:00", "updated 9999"],
)
async def test_bug_times_outside_utc_range_answer_not_500(
    client: httpx.AsyncClient, params: dict[str, str], names: list[str]
) -> None:
    response = await client.get("/v1/jobs", params=params, headers=VIEWER)
    assert response.status_code == 200, response.text
    assert [job["name"] for job in response.json()["data"]] == names
