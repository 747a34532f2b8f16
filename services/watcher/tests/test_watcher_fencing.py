"""An informer whose replica cannot prove its lease publishes nothing and checkpoints nothing."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client as NatsClient
from redis.asyncio import Redis

import kubesim
from trainwatch_common.events.clusters import WatchOptions
from trainwatch_common.kinds import PYTORCH_JOB
from trainwatch_common.streams import ensure_streams
from trainwatch_common.testing import eventually
from trainwatch_watcher.errors import LeaseNotProven
from trainwatch_watcher.informer import Informer
from trainwatch_watcher.informer_spec import InformerSpec
from trainwatch_watcher.kube.client import KubeClient, load_kubeconfig
from trainwatch_watcher.metrics import WatcherMetrics
from trainwatch_watcher.publishing import Publisher
from trainwatch_watcher.settings import WatcherSettings
from trainwatch_watcher.state import StateStore


@pytest.mark.parametrize("proven", [True, False])
async def test_publishing_waits_on_a_proven_lease(
    sim: kubesim.Simulator, nc: NatsClient, redis: Redis, proven: bool
) -> None:
    cluster = await sim.add_cluster("fenced", kinds=[kubesim.PYTORCHJOB])
    cluster.store.create("PyTorchJob", kubesim.manifest(kubesim.PYTORCHJOB, "train", "default"))
    await ensure_streams(nc.jetstream())
    settings = WatcherSettings(read_timeout=30.0, watch_timeout_seconds=60, allow_loopback_servers=True)
    metrics = WatcherMetrics()
    asked: list[tuple[str, int]] = []

    def fence(cluster_id: str, epoch: int) -> bool:
        asked.append((cluster_id, epoch))
        return proven

    client = KubeClient(load_kubeconfig(cluster.kubeconfig_yaml()), timings=settings)
    informer = Informer(
        InformerSpec("fenced", PYTORCH_JOB, None, WatchOptions(), 7, "replica-a"),
        client=client,
        store=StateStore(redis),
        publisher=Publisher(nc, metrics=metrics),
        metrics=metrics,
        timings=settings,
        fence=fence,
    )
    task = asyncio.create_task(informer.run(), name="fenced informer")
    try:
        if proven:

            async def published() -> bool:
                return bool((await nc.jetstream().stream_info("JOBS")).state.messages >= 1)

            await eventually(published, timeout=10, message="the created event on JOBS")
            await eventually(lambda: redis.keys("*fenced*"), timeout=10, message="the checkpoint")
        else:
            with pytest.raises(ExceptionGroup) as failure:  # the informer's own TaskGroup
                await asyncio.wait_for(task, 10)
            assert failure.group_contains(LeaseNotProven, match="epoch 7")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
    assert asked[0] == ("fenced", 7)
    stream = await nc.jetstream().stream_info("JOBS")
    assert stream.state.messages == (1 if proven else 0)
    checkpoint = await redis.keys("*fenced*")
    assert bool(checkpoint) == proven
