"""Cluster events reach JetStream after the commit, through the outbox, and the KV bucket mirrors the set."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
from conftest import Bus, Harness, make_settings, running_registry
from registry_kubeconfigs import ADMIN, as_yaml, create_body, kubeconfig, server_of
from sqlalchemy import update

from trainwatch_common import ClusterSpec, parse_cluster_event
from trainwatch_common.testing import NatsServer, eventually
from trainwatch_registry.tables import outbox


async def _events(bus: Bus, count: int) -> list:  # type: ignore[type-arg]
    await eventually(lambda: _has(bus, count), timeout=10, message=f"{count} cluster events")
    return await bus.cluster_events()


async def _has(bus: Bus, count: int) -> bool:
    return await bus.stream_messages() >= count


async def test_each_change_is_published_once_with_its_revision(registry: Harness, bus: Bus) -> None:
    created = await registry.create(create_body("gpu-east"))
    await registry.client.patch("/v1/clusters/gpu-east", json={"labels": {"team": "vision"}}, headers=ADMIN)
    rotated = as_yaml(kubeconfig(server=server_of("gpu-east"), token="rotated-token-5678"))
    await registry.client.patch("/v1/clusters/gpu-east", json={"kubeconfig": rotated}, headers=ADMIN)
    await registry.client.delete("/v1/clusters/gpu-east", headers=ADMIN)

    messages = await _events(bus, 4)
    assert [m.subject for m in messages] == [
        "clusters.v1.added.gpu-east",
        "clusters.v1.updated.gpu-east",
        "clusters.v1.updated.gpu-east",
        "clusters.v1.removed.gpu-east",
    ]
    assert [m.headers["Nats-Msg-Id"] for m in messages] == [f"cluster.gpu-east.{n}" for n in (1, 2, 3, 4)]
    events = [parse_cluster_event(m.data) for m in messages]
    assert [e.cluster.revision for e in events] == [1, 2, 3, 4]
    assert [e.connection_changed for e in events] == [True, False, True, True]
    assert events[1].cluster.labels == {"team": "vision"}
    assert events[1].cluster.connection_fingerprint == created["connection_fingerprint"]
    assert events[2].cluster.connection_fingerprint != created["connection_fingerprint"]
    envelope = orjson.loads(messages[0].data)
    assert envelope["specversion"] == "1.0"
    assert envelope["type"] == "io.trainwatch.cluster.added.v1"
    for message in messages:  # events never carry credentials
        assert b"sim-token-1234" not in message.data
        assert b"rotated-token" not in message.data
        assert b"certificate-authority-data" not in message.data
    await eventually(lambda: _no_keys(bus), message="KV key deleted on removal")


async def _no_keys(bus: Bus) -> bool:
    return await bus.kv_keys() == []


async def test_kv_bucket_holds_the_current_desired_set(registry: Harness, bus: Bus) -> None:
    await registry.create(create_body("a"))
    await registry.create(create_body("b"))
    await registry.client.patch("/v1/clusters/b", json={"name": "Bee"}, headers=ADMIN)

    async def settled() -> bool:
        if sorted(await bus.kv_keys()) != ["a", "b"]:
            return False
        kv = await bus.js.key_value("trainwatch_clusters")
        spec = ClusterSpec.model_validate_json((await kv.get("b")).value)
        return spec.revision == 2 and spec.name == "Bee"

    await eventually(settled, message="KV holds a and b at their latest revisions")


async def test_an_event_committed_while_nats_is_down_arrives_after_it_returns(
    nats_process: NatsServer, registry: Harness, bus: Bus
) -> None:
    await bus.client.close()
    nats_process.stop()  # the crash window: the commit happens, the publish cannot
    created = await registry.client.post("/v1/clusters", json=create_body("during-outage"), headers=ADMIN)
    assert created.status_code == 201  # the API does not wait for NATS
    rows = await registry.outbox_rows()
    assert [(r.msg_id, r.sent_at) for r in rows] == [("cluster.during-outage.1", None)]

    nats_process.start()
    import nats

    client = await nats.connect(nats_process.url)
    try:
        fresh = Bus(client)
        messages = await _events(fresh, 1)
        assert messages[0].headers["Nats-Msg-Id"] == "cluster.during-outage.1"
    finally:
        await client.close()
    await eventually(lambda: _all_sent(registry), message="outbox row marked sent after the ack")


async def _all_sent(registry: Harness) -> bool:
    return all(row.sent_at is not None for row in await registry.outbox_rows())


async def test_a_registry_that_died_after_commit_publishes_on_restart(
    sqlite_url: str, nats_url: str, encryption_key: str, bus: Bus
) -> None:
    # First life: the relay never runs (as if the process died right after the commit).
    crashed = make_settings(
        database_url=sqlite_url,
        nats_url=nats_url,
        encryption_key=encryption_key,
        registry_outbox_relay_enabled=False,
    )
    async with running_registry(crashed) as first:
        await first.create(create_body("survivor"))
        assert [r.sent_at for r in await first.outbox_rows()] == [None]
    assert await bus.stream_messages() == 0

    # Second life: the relay drains what the first one committed.
    restarted = make_settings(database_url=sqlite_url, nats_url=nats_url, encryption_key=encryption_key)
    async with running_registry(restarted) as second:
        messages = await _events(bus, 1)
        assert parse_cluster_event(messages[0].data).cluster.id == "survivor"
        await eventually(lambda: _all_sent(second), message="outbox drained")


async def test_a_publish_repeated_after_a_crash_is_deduplicated(registry: Harness, bus: Bus) -> None:
    await registry.create(create_body("once"))
    await eventually(lambda: _all_sent(registry), message="outbox drained")
    # The crash window after the ack but before "sent" was recorded: the row is unsent again.
    async with registry.engine.begin() as conn:
        await conn.execute(update(outbox).values(sent_at=None))
    registry.app.state.services.registry._on_commit()  # wake the relay as a commit would
    await eventually(lambda: _all_sent(registry), message="outbox drained again")
    assert await bus.stream_messages() == 1  # JetStream dropped the duplicate by its Nats-Msg-Id


async def test_events_keep_commit_order_across_many_changes(registry: Harness, bus: Bus) -> None:
    for index in range(20):
        await registry.create(create_body(f"c{index:02d}"))
    messages = await _events(bus, 20)
    assert [parse_cluster_event(m.data).cluster.id for m in messages] == [f"c{i:02d}" for i in range(20)]
    occurred = [parse_cluster_event(m.data).occurred_at for m in messages]
    assert occurred == sorted(occurred)
    assert all(t <= datetime.now(UTC) for t in occurred)


async def test_a_lost_bucket_is_rebuilt_on_start(
    sqlite_url: str, nats_url: str, encryption_key: str, bus: Bus
) -> None:
    settings = make_settings(database_url=sqlite_url, nats_url=nats_url, encryption_key=encryption_key)
    async with running_registry(settings) as first:
        await first.create(create_body("keep-me"))
        await eventually(lambda: _all_sent(first), message="outbox drained")
    kv = await bus.js.key_value("trainwatch_clusters")
    await kv.delete("keep-me")  # as if the bucket had been purged on the NATS side
    await kv.put("stale", b"{}")

    async def rebuilt() -> bool:
        return sorted(await bus.kv_keys()) == ["keep-me"]

    async with running_registry(settings):
        await eventually(rebuilt, message="bucket rebuilt from the database")
    spec = ClusterSpec.model_validate_json((await kv.get("keep-me")).value)
    assert spec.revision == 1
