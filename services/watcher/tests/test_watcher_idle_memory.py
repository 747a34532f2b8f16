"""An idle informer keeps nothing of what it has committed (issue 21: 100 idle informers held all
5,000 payloads of their first sync, ~8 KB each, through their commit stage's last batch)."""

from __future__ import annotations

import asyncio
from typing import Any

from nats.aio.client import Client as NatsClient
from redis.asyncio import Redis

import kubesim
from trainwatch_common.events.clusters import WatchOptions
from trainwatch_common.kinds import PYTORCH_JOB
from trainwatch_common.observability.task_dump import await_chain_frames
from trainwatch_common.streams import ensure_streams
from trainwatch_common.testing import eventually
from trainwatch_watcher.informer import Commit, Informer
from trainwatch_watcher.informer_spec import InformerSpec
from trainwatch_watcher.kube.client import KubeClient, load_kubeconfig
from trainwatch_watcher.metrics import WatcherMetrics
from trainwatch_watcher.publishing import PendingPublish, Publisher
from trainwatch_watcher.settings import WatcherSettings
from trainwatch_watcher.state import StateStore


def _held(value: Any) -> bool:
    if isinstance(value, Commit | PendingPublish):
        return True
    if isinstance(value, list | tuple):
        return any(isinstance(item, Commit | PendingPublish) for item in value)
    return False


async def test_an_idle_informers_commit_stage_holds_none_of_what_it_committed(
    sim: kubesim.Simulator, nc: NatsClient, redis: Redis
) -> None:
    cluster = await sim.add_cluster("idle", kinds=[kubesim.PYTORCHJOB])
    jobs = 20
    for n in range(jobs):
        cluster.store.create("PyTorchJob", kubesim.manifest(kubesim.PYTORCHJOB, f"train-{n}", "default"))
    await ensure_streams(nc.jetstream())
    settings = WatcherSettings(read_timeout=30.0, watch_timeout_seconds=60, allow_loopback_servers=True)
    metrics = WatcherMetrics()
    client = KubeClient(load_kubeconfig(cluster.kubeconfig_yaml()), timings=settings)
    informer = Informer(
        InformerSpec("idle", PYTORCH_JOB, None, WatchOptions(), 1, "replica-a"),
        client=client,
        store=StateStore(redis),
        publisher=Publisher(nc, metrics=metrics),
        metrics=metrics,
        timings=settings,
    )
    task = asyncio.create_task(informer.run(), name="idle informer")
    try:

        async def all_published() -> bool:
            return (await nc.jetstream().stream_info("JOBS")).state.messages >= jobs

        await eventually(all_published, timeout=20, message="every job's created event on JOBS")
        await informer.drain()  # acknowledged and checkpointed: the commit stage waits for more
        committer = informer._committer
        assert committer is not None
        assert not committer.done()
        frames = await_chain_frames(committer.get_coro())
        assert frames, "the commit stage is suspended somewhere"
        held = {
            f"{frame.f_code.co_name}:{name}"
            for frame in frames
            for name, value in frame.f_locals.items()
            if _held(value)
        }
        assert held == set(), f"an idle commit stage still references committed work: {held}"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
