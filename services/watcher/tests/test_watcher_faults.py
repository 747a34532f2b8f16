"""Faults between the watcher and a cluster, and of the watcher itself: 410 storms, dropped and
stalled watches, restarts mid-scenario, malformed objects, NATS down."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import nats
from redis.asyncio import Redis
from watcher_harness import (
    FakeRegistry,
    JobEvents,
    RunningWatcher,
    assert_consistent_with_truth,
    demo_kinds,
    make_settings,
    truth_by_uid,
    wait_for_truth,
)

import kubesim
from kubesim import manifests
from trainwatch_common.streams import ensure_streams
from trainwatch_common.testing import eventually
from trainwatch_common.testing.faults import TcpProxy
from trainwatch_common.testing.servers import NatsServer
from trainwatch_watcher.state import state_key

ALL = len(kubesim.ALL_KINDS)


def _counter(watcher: RunningWatcher, name: str, **labels: str) -> float:
    assert watcher.app is not None
    value = watcher.app.metrics.registry.get_sample_value(name, labels)
    return value or 0.0


def _total(watcher: RunningWatcher, name: str) -> float:
    assert watcher.app is not None
    total = 0.0
    for metric in watcher.app.metrics.registry.collect():
        for sample in metric.samples:
            if sample.name == name:
                total += sample.value
    return total


async def _storm(cluster: kubesim.Cluster, *, rounds: int, pause: float, compact: bool) -> None:
    for _ in range(rounds):
        await asyncio.sleep(pause)
        if compact:
            cluster.compact()
        cluster.faults.drop_watches()


async def test_dropped_watches_resume_without_loss_or_repeat(
    sim: kubesim.Simulator, registry: FakeRegistry, watcher: RunningWatcher, job_events: JobEvents
) -> None:
    alpha = await sim.add_cluster("alpha")
    await registry.add(alpha)
    await watcher.start()
    await watcher.wait_synced("alpha", informers=ALL)
    driver = kubesim.ScenarioDriver(alpha, seed=11, rate=300)
    storm = asyncio.create_task(_storm(alpha, rounds=8, pause=0.1, compact=False), name="drop storm")
    await driver.run_demo(jobs=24, concurrency=8, kinds=demo_kinds(alpha))
    await storm
    # Resumed from the last resourceVersion: every single transition, exactly once.
    await wait_for_truth(job_events, truth_by_uid(driver.truth))
    assert _total(watcher, "trainwatch_watcher_watch_reconnects_total") > 0


async def test_410_storm_relists_and_diffs_by_uid(
    sim: kubesim.Simulator, registry: FakeRegistry, watcher: RunningWatcher, job_events: JobEvents
) -> None:
    alpha = await sim.add_cluster("alpha")
    await registry.add(alpha)
    await watcher.start()
    await watcher.wait_synced("alpha", informers=ALL)
    driver = kubesim.ScenarioDriver(alpha, seed=12, rate=300)
    storm = asyncio.create_task(_storm(alpha, rounds=8, pause=0.1, compact=True), name="410 storm")
    # Not TrainJob: once its JobSet's history is compacted away, a restart it went through unseen
    # cannot be told from a pending job (the companion's past is gone), which is not what this tests.
    kinds = [k for k in demo_kinds(alpha) if k is not kubesim.TRAINJOB]
    await driver.run_demo(jobs=24, concurrency=8, kinds=kinds)
    await storm
    alpha.faults.drop_watches()  # one more relist after the last change, so deletions are diffed

    def consistent() -> bool:
        assert_consistent_with_truth(job_events, driver.truth, "alpha")
        return True

    await eventually(consistent, message="events consistent with the truth")
    assert _total(watcher, "trainwatch_watcher_watch_expired_total") > 0
    assert _total(watcher, "trainwatch_watcher_relists_total") > 0
    # No event id was stored twice.
    ids = [e.event_id for e in job_events.events]
    assert len(ids) == len(set(ids))


async def test_watcher_restarted_mid_scenario_loses_and_repeats_nothing(
    sim: kubesim.Simulator, registry: FakeRegistry, watcher: RunningWatcher, job_events: JobEvents
) -> None:
    alpha = await sim.add_cluster("alpha")
    await registry.add(alpha)
    await watcher.start()
    await watcher.wait_synced("alpha", informers=ALL)
    driver = kubesim.ScenarioDriver(alpha, seed=14, rate=100)
    demo = asyncio.create_task(driver.run_demo(jobs=40, concurrency=10, kinds=demo_kinds(alpha)), name="demo")
    try:
        await eventually(lambda: len(job_events.events) > 20)
        await watcher.kill()  # abrupt: in-flight publishes and checkpoints are lost mid-way
        at_kill = len(driver.truth)
        await eventually(lambda: len(driver.truth) > at_kill + 20, message="changes while down")
        await watcher.start()
        seen = len(job_events.events)
        await eventually(lambda: len(job_events.events) > seen + 20)
        await watcher.stop()  # and a graceful stop
        at_stop = len(driver.truth)
        await eventually(
            lambda: len(driver.truth) > at_stop + 20 or demo.done(), message="changes while down"
        )
        await watcher.start()
        await demo
    finally:
        demo.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await demo
    await wait_for_truth(job_events, truth_by_uid(driver.truth))
    ids = [e.event_id for e in job_events.events]
    assert len(ids) == len(set(ids)), "an event was stored twice"


async def test_malformed_objects_are_counted_and_skipped(
    sim: kubesim.Simulator, registry: FakeRegistry, watcher: RunningWatcher, job_events: JobEvents
) -> None:
    alpha = await sim.add_cluster("alpha", kinds=[kubesim.PYTORCHJOB, kubesim.BATCH_JOB])
    await registry.add(alpha)
    await watcher.start()
    await watcher.wait_synced("alpha", informers=2)

    def obj(name: str, **extra: object) -> dict[str, object]:
        return {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            **extra,
        }

    store = alpha.store
    store.put_raw("PyTorchJob", obj("status-is-a-list", status=["oops"]))
    store.put_raw("PyTorchJob", obj("conditions-a-string", status={"conditions": "Running"}))
    store.put_raw("PyTorchJob", obj("no-metadata-uid", metadata={"name": "x", "namespace": "default"}))
    store.put_raw("PyTorchJob", obj("no-status"))
    store.put_raw(
        "PyTorchJob",
        obj("unknown-condition", status={"conditions": [{"type": "Exploded", "status": "True"}]}),
    )
    huge = "x" * 1_000_000
    store.put_raw(
        "PyTorchJob",
        obj(
            "huge-message",
            status={"conditions": [{"type": "Failed", "status": "True", "message": huge, "reason": "Boom"}]},
        ),
    )
    store.put_raw(
        "PyTorchJob",
        obj("wrong-types", status={"replicaStatuses": {"Worker": {"active": "3"}}, "startTime": 12}),
    )
    await eventually(
        lambda: _counter(watcher, "trainwatch_watcher_malformed_objects_total", kind="pytorchjob") >= 3
    )
    # The readable ones were published, the huge message trimmed.
    await eventually(
        lambda: (
            {e.job.name for e in job_events.events}
            >= {"no-status", "unknown-condition", "huge-message", "wrong-types"}
        )
    )
    huge_event = next(e for e in job_events.events if e.job.name == "huge-message")
    assert huge_event.message is not None and len(huge_event.message) <= 4096  # noqa: PT018
    # And the informer carries on.
    driver = kubesim.ScenarioDriver(alpha, seed=15, rate=1000)
    await driver.run_lifecycle("PyTorchJob")
    expected = truth_by_uid(driver.truth)
    await eventually(lambda: {u: e for u, e in job_events.by_uid().items() if u in expected} == expected)


async def test_publishing_waits_while_nats_is_down(
    nats_process: NatsServer,
    redis_url: str,
    sim: kubesim.Simulator,
    redis: Redis,
) -> None:
    import nats as nats_client
    from watcher_harness import FakeRegistry as Registry
    from watcher_harness import JobEvents as Events

    from trainwatch_common.streams import ensure_streams

    nc = await nats_client.connect(nats_process.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        await ensure_streams(nc.jetstream())
        registry = Registry(nc)
        watcher = RunningWatcher(
            make_settings(nats_process.url, redis_url, publish_ack_timeout=0.5), registry
        )
        alpha = await sim.add_cluster("alpha", kinds=[kubesim.TFJOB])
        await registry.add(alpha)
        await watcher.start()
        try:
            await watcher.wait_synced("alpha", informers=1)
            nats_process.stop()
            driver = kubesim.ScenarioDriver(alpha, seed=16, rate=1000)
            await driver.run_lifecycle("TFJob", restarts=1)
            await driver.run_lifecycle("TFJob", outcome="failed", delete=False)
            # Publishing is blocked: the publisher retries, and nothing is checkpointed meanwhile.
            await eventually(
                lambda: _counter(watcher, "trainwatch_watcher_publish_retries_total") >= 2,
                message="publishes retried while NATS is down",
            )
            checkpointed = await redis.hkeys(state_key("alpha", "tfjob"))
            assert [f for f in checkpointed if f.startswith(b"u:")] == []
            nats_process.start()
            events = Events(nc)
            await eventually(lambda: nc.is_connected, timeout=10)
            await events.start()
            try:
                await wait_for_truth(events, truth_by_uid(driver.truth), timeout=15)
            finally:
                await events.stop()
        finally:
            await watcher.stop()
    finally:
        with contextlib.suppress(Exception):
            await nc.close()


@contextlib.asynccontextmanager
async def _watcher_behind_proxy(
    nats_process: NatsServer, redis_url: str, sim: kubesim.Simulator, *, ack_timeout: float
) -> AsyncIterator[tuple[TcpProxy, JobEvents, RunningWatcher, kubesim.Cluster]]:
    """A watcher reaching NATS through a TcpProxy, synced on one PyTorchJob cluster "alpha";
    the JOBS stream read directly (past the proxy)."""
    proxy = TcpProxy("127.0.0.1", int(nats_process.url.rsplit(":", 1)[1]))
    await proxy.start()
    nc = await nats.connect(nats_process.url)
    events = JobEvents(nc)
    try:
        await ensure_streams(nc.jetstream())
        await events.start()
        settings = make_settings(f"nats://127.0.0.1:{proxy.port}", redis_url, publish_ack_timeout=ack_timeout)
        registry = FakeRegistry(nc)
        watcher = RunningWatcher(settings, registry)
        alpha = await sim.add_cluster("alpha", kinds=[kubesim.PYTORCHJOB])
        await registry.add(alpha)
        await watcher.start()
        try:
            await watcher.wait_synced("alpha", informers=1)
            yield proxy, events, watcher, alpha
        finally:
            await watcher.stop()
    finally:
        await events.stop()
        await proxy.close()
        with contextlib.suppress(Exception):
            await nc.close()


async def test_a_jobs_events_stay_in_order_when_a_publish_is_lost_in_an_outage(
    nats_process: NatsServer,
    redis_url: str,
    sim: kubesim.Simulator,
) -> None:
    """The chaos run found a job's sequence N stored after N+1 across a NATS outage: N went
    into a connection that died, N+1 went out on the new one, and N's resend (after its ack
    timeout) came last. Here N is sent into a black hole and N+1 happens after the reconnect,
    well inside N's ack timeout: N+1 must wait until N is stored."""
    context = _watcher_behind_proxy(nats_process, redis_url, sim, ack_timeout=3.0)
    async with context as (proxy, events, _watcher, alpha):
        spec = alpha.store.spec(kubesim.PYTORCHJOB)
        created = alpha.store.create(spec, manifests.manifest(spec, "ordered", "default"), drop_status=True)
        uid = created["metadata"]["uid"]

        def conditions(*types: str) -> dict[str, object]:
            return {
                "conditions": [
                    {"type": t, "status": "True", "reason": f"PyTorchJob{t}", "message": t} for t in types
                ]
            }

        def phases() -> list[str]:
            return [e.phase.value for e in events.events if e.job.uid == uid]

        await eventually(lambda: len(phases()) == 1, message="the job's first event stored")
        proxy.blackhole()
        alpha.store.replace_status(spec, "default", "ordered", conditions("Created", "Running"))
        await eventually(
            lambda: b"ordered" in proxy.swallowed, message="the Running event sent into the black hole"
        )
        accepted = proxy.connections_accepted
        proxy.cut()
        await eventually(
            lambda: proxy.connections_accepted > accepted, message="the watcher reconnected to NATS"
        )
        alpha.store.replace_status(spec, "default", "ordered", conditions("Created", "Succeeded"))
        await eventually(lambda: len(phases()) == 3, timeout=20, message="all three events stored")
        assert phases() == ["Pending", "Running", "Succeeded"]
        assert [e.sequence for e in events.events if e.job.uid == uid] == [0, 1, 2]


async def test_a_handoff_while_a_jobs_next_event_waits_for_its_previous_one_still_commits_it(
    nats_process: NatsServer,
    redis_url: str,
    sim: kubesim.Simulator,
    redis: Redis,
) -> None:
    """A graceful stop cancels the consumer while it waits for a job's previous event to be
    stored; the commit stage must still confirm and checkpoint that event (it once failed
    setting the result of the cancelled waiter: InvalidStateError)."""
    context = _watcher_behind_proxy(nats_process, redis_url, sim, ack_timeout=1.0)
    async with context as (proxy, events, watcher, alpha):
        spec = alpha.store.spec(kubesim.PYTORCHJOB)
        uid = alpha.store.create(spec, manifests.manifest(spec, "handoff", "default"), drop_status=True)[
            "metadata"
        ]["uid"]
        await eventually(
            lambda: [e.sequence for e in events.events if e.job.uid == uid] == [0],
            message="the job's first event stored",
        )
        informer = next(iter(watcher.worker("alpha").informers.values()))
        proxy.blackhole()
        running = {"conditions": [{"type": "Running", "status": "True", "reason": "PyTorchJobRunning"}]}
        alpha.store.replace_status(spec, "default", "handoff", running)
        await eventually(lambda: b"handoff" in proxy.swallowed, message="the Running event sent, lost")
        done = {"conditions": [{"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded"}]}
        alpha.store.replace_status(spec, "default", "handoff", done)
        await eventually(lambda: bool(informer._confirmed), message="the Succeeded waits for the Running")
        draining = asyncio.create_task(informer.stop_consuming_and_drain(), name="drain")
        proxy.cut()  # the Running is resent on the new connection and acknowledged
        await asyncio.wait_for(draining, 20)
        assert informer._committer is not None
        assert not informer._committer.done(), "the commit stage failed instead of committing"
        await eventually(
            lambda: [e.sequence for e in events.events if e.job.uid == uid] == [0, 1],
            message="the Running stored",
        )
        checkpoint = await redis.hget(state_key("alpha", "pytorchjob"), f"u:{uid}")
        assert checkpoint is not None
        assert b"Running" in checkpoint
