"""Concurrent writers: every change gets its own revision and event, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

from conftest import Harness
from registry_kubeconfigs import ADMIN, VIEWER, create_body


async def test_concurrent_creates_and_updates_all_land(registry_on: Harness) -> None:
    client = registry_on.client
    created = await asyncio.gather(
        *(client.post("/v1/clusters", json=create_body(f"c{i:02d}"), headers=ADMIN) for i in range(20))
    )
    assert [r.status_code for r in created] == [201] * 20
    updates = await asyncio.gather(
        *(client.patch("/v1/clusters/c00", json={"labels": {"n": str(i)}}, headers=ADMIN) for i in range(10))
    )
    codes = sorted(r.status_code for r in updates)
    assert set(codes) <= {200, 409}, codes  # lost races are retried; an exhausted one is a 409, never a 500
    landed = len({r.json()["revision"] for r in updates if r.status_code == 200})
    final = (await client.get("/v1/clusters/c00", headers=VIEWER)).json()
    assert final["revision"] == 1 + landed
    msg_ids = [row.msg_id for row in await registry_on.outbox_rows()]
    assert len(msg_ids) == len(set(msg_ids)) == 20 + landed


async def test_racing_creates_of_one_id_give_one_winner(registry_on: Harness) -> None:
    responses = await asyncio.gather(
        *(registry_on.client.post("/v1/clusters", json=create_body("same"), headers=ADMIN) for _ in range(8))
    )
    codes = sorted(r.status_code for r in responses)
    assert codes == [201] + [409] * 7, codes
    assert len(await registry_on.outbox_rows()) == 1
