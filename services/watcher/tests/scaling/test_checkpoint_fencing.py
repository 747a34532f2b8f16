"""Checkpoints fenced by the lease epoch, and the graceful drain before a handoff (real Redis,
NATS and kubesim)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client as NatsClient
from redis.asyncio import Redis

import kubesim
from trainwatch_common.events.clusters import WatchOptions
from trainwatch_common.events.envelope import parse_job_event
from trainwatch_common.events.jobs import Phase
from trainwatch_common.kinds import PYTORCH_JOB
from trainwatch_common.streams import ensure_streams
from trainwatch_common.testing import eventually
from trainwatch_watcher.errors import CheckpointFenced
from trainwatch_watcher.informer import Informer
from trainwatch_watcher.informer_spec import InformerSpec
from trainwatch_watcher.kinds.model import NormalizedStatus
from trainwatch_watcher.kube.client import KubeClient, load_kubeconfig
from trainwatch_watcher.metrics import WatcherMetrics
from trainwatch_watcher.publishing import Publisher
from trainwatch_watcher.records import JobRecord, StateWrite, decode_record
from trainwatch_watcher.settings import WatcherSettings
from trainwatch_watcher.state import StateStore, state_key
from trainwatch_watcher.transitions import Slot

EPOCH_KEY = "tw:epoch:alpha"


def record(uid: str, sequence: int) -> JobRecord:
    slot = Slot(
        namespace="default", name=uid, sequence=sequence, phase=Phase.RUNNING, sub_phase=None, terminal=False
    )
    return JobRecord(slot=slot, last=NormalizedStatus(phase=Phase.RUNNING))


async def sequences(redis: Redis, cluster_id: str = "alpha", kind_key: str = "pytorchjob") -> dict[str, int]:
    raw = await redis.hgetall(state_key(cluster_id, kind_key))  # type: ignore[misc]
    return {k.decode()[2:]: decode_record(v).slot.sequence for k, v in raw.items() if k.startswith(b"u:")}


async def test_a_checkpoint_write_is_refused_once_a_newer_owner_took_the_epoch(redis: Redis) -> None:
    store = StateStore(redis)
    await redis.set(EPOCH_KEY, 1)
    mine = store.fenced(EPOCH_KEY, 1)
    await mine.apply(
        "alpha", "pytorchjob", StateWrite(put={"u1": record("u1", 0)}, resource_versions={"*": "10"})
    )
    # A big batch (over Lua's unpack chunk) with deletions goes through in one script call.
    many = {f"m{i}": record(f"m{i}", 1) for i in range(450)}
    await mine.apply("alpha", "pytorchjob", StateWrite(put=many))
    await mine.apply("alpha", "pytorchjob", StateWrite(delete={f"m{i}" for i in range(300)}))
    assert await sequences(redis) == {"u1": 0, **{f"m{i}": 1 for i in range(300, 450)}}

    await redis.incr(EPOCH_KEY)  # a new owner acquired the lease (epoch 2) before loading the checkpoint
    with pytest.raises(CheckpointFenced, match="epoch 1"):
        await mine.apply(
            "alpha", "pytorchjob", StateWrite(put={"u1": record("u1", 5)}, resource_versions={"*": "99"})
        )
    assert (await sequences(redis))["u1"] == 0
    assert await redis.hget(state_key("alpha", "pytorchjob"), "rv:*") == b"10"

    theirs = store.fenced(EPOCH_KEY, 2)
    await theirs.apply("alpha", "pytorchjob", StateWrite(put={"u1": record("u1", 1)}))
    assert (await sequences(redis))["u1"] == 1
    # Unfenced (no leases: tests, single replica): written whatever the epoch.
    await store.apply("alpha", "pytorchjob", StateWrite(put={"u1": record("u1", 2)}))
    assert (await sequences(redis))["u1"] == 2


@pytest.fixture
async def alpha(sim: kubesim.Simulator) -> kubesim.Cluster:
    return await sim.add_cluster("alpha", kinds=[kubesim.PYTORCHJOB])


@pytest.fixture
async def client(alpha: kubesim.Cluster) -> AsyncIterator[KubeClient]:
    settings = WatcherSettings(read_timeout=30.0, watch_timeout_seconds=60, allow_loopback_servers=True)
    kube = KubeClient(load_kubeconfig(alpha.kubeconfig_yaml()), timings=settings)
    yield kube
    await kube.close()


def make_informer(client: KubeClient, nc: NatsClient, store: StateStore, *, epoch: int) -> Informer:
    settings = WatcherSettings(read_timeout=30.0, watch_timeout_seconds=60, allow_loopback_servers=True)
    metrics = WatcherMetrics()
    return Informer(
        InformerSpec("alpha", PYTORCH_JOB, None, WatchOptions(), epoch, "replica-a"),
        client=client,
        store=store,
        publisher=Publisher(nc, metrics=metrics),
        metrics=metrics,
        timings=settings,
        fence=lambda cluster_id, e: True,  # the publish fence passed (just before a pause, say)
    )


async def stored(nc: NatsClient) -> dict[str, tuple[int, str]]:
    """uid -> (sequence, change) of its last event stored on JOBS."""
    out: dict[str, tuple[int, str]] = {}
    js = nc.jetstream()
    info = await js.stream_info("JOBS")
    for seq in range(1, info.state.last_seq + 1):
        event = parse_job_event((await js.get_msg("JOBS", seq)).data or b"")
        out[event.job.uid] = (event.sequence, event.change)
    return out


async def test_an_informer_whose_epoch_moved_on_checkpoints_nothing_more(
    alpha: kubesim.Cluster, client: KubeClient, nc: NatsClient, redis: Redis
) -> None:
    await ensure_streams(nc.jetstream())
    await redis.set("trainwatch:epoch:alpha", 1)
    informer = make_informer(client, nc, StateStore(redis).fenced("trainwatch:epoch:alpha", 1), epoch=1)
    task = asyncio.create_task(informer.run(), name="fenced informer")
    try:
        first = alpha.store.create("PyTorchJob", kubesim.manifest(kubesim.PYTORCHJOB, "first", "default"))
        first_uid = first["metadata"]["uid"]
        await eventually(lambda: sequences(redis), message="the first checkpoint")
        await redis.incr("trainwatch:epoch:alpha")  # a new owner took the cluster
        alpha.store.create("PyTorchJob", kubesim.manifest(kubesim.PYTORCHJOB, "second", "default"))
        with pytest.raises(ExceptionGroup) as failure:  # the informer stops itself
            await asyncio.wait_for(task, 10)
        assert failure.group_contains(CheckpointFenced)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert await sequences(redis) == {first_uid: 0}  # the second job was published, never checkpointed
    assert len(await stored(nc)) == 2


async def test_a_drained_informer_has_checkpointed_everything_it_published(
    alpha: kubesim.Cluster, client: KubeClient, nc: NatsClient, redis: Redis
) -> None:
    await ensure_streams(nc.jetstream())
    await redis.set("trainwatch:epoch:alpha", 3)
    informer = make_informer(client, nc, StateStore(redis).fenced("trainwatch:epoch:alpha", 3), epoch=3)
    task = asyncio.create_task(informer.run(), name="draining informer")
    driver = kubesim.ScenarioDriver(alpha, seed=21, rate=200)
    # Many more jobs than the drain needs to see published: the scenario is still going when it drains.
    scenario = asyncio.create_task(driver.run_demo(jobs=150, concurrency=10), name="scenario")
    try:
        await eventually(lambda: informer.status.synced, message="listed")
        js = nc.jetstream()

        async def some_published() -> bool:
            return bool((await js.stream_info("JOBS")).state.messages >= 20)

        await eventually(some_published, message="publishing")
        await asyncio.wait_for(informer.stop_consuming_and_drain(), 10)  # mid-scenario
        assert not task.done()
        # Everything JetStream stored is in the checkpoint; the next owner resumes from there.
        published = await stored(nc)
        checkpoint = await sequences(redis)
        assert not scenario.done(), "drained after the scenario ended: nothing was in flight"
        live = {uid: seq for uid, (seq, change) in published.items() if change != "deleted"}
        assert checkpoint == live
    finally:
        for t in (task, scenario):
            t.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(task, scenario, return_exceptions=True)
