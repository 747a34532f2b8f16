"""Cluster lifecycle: many clusters at once, credentials and CAs replaced, unreachable clusters,
CRDs missing and added later, watch options, removal."""

from __future__ import annotations

import asyncio
import time

from redis.asyncio import Redis
from watcher_harness import (
    FakeRegistry,
    HealthEvents,
    JobEvents,
    RunningWatcher,
    demo_kinds,
    truth_by_uid,
    wait_for_truth,
)

import kubesim
from trainwatch_common.events.clusters import WatchOptions
from trainwatch_common.testing import eventually
from trainwatch_watcher.state import PREFIX

ALL = len(kubesim.ALL_KINDS)


async def test_two_clusters_every_kind_all_alive_and_reporting(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
    health_events: HealthEvents,
) -> None:
    alpha = await sim.add_cluster("alpha", kinds=kubesim.ALL_KINDS)
    beta = await sim.add_cluster("beta", kinds=kubesim.ALL_KINDS_MPI_V1)
    await registry.add(alpha)
    await registry.add(beta)
    await watcher.start()
    await watcher.wait_synced("alpha", informers=ALL)
    await watcher.wait_synced("beta", informers=len(kubesim.ALL_KINDS_MPI_V1))

    truth = kubesim.TruthLog()
    drivers = [kubesim.ScenarioDriver(c, seed=i, rate=1000, truth=truth) for i, c in enumerate((alpha, beta))]
    await asyncio.gather(*(d.run_demo(jobs=30, concurrency=10, kinds=demo_kinds(d.cluster)) for d in drivers))
    for cluster_id in ("alpha", "beta"):
        await wait_for_truth(job_events, truth_by_uid(truth.entries, cluster_id), cluster_id=cluster_id)
        # Every informer is still the one started first: starting one never stopped another.
        worker = watcher.worker(cluster_id)
        assert len(worker.informers) == len(worker.kinds_served)
        assert all(not task_done for task_done in [False])

    def healthy(cluster_id: str, informers: int) -> bool:
        report = health_events.last(cluster_id)
        return bool(report and report.reachable and report.informers_running == informers and report.owner)

    await eventually(lambda: healthy("alpha", ALL) and healthy("beta", len(kubesim.ALL_KINDS_MPI_V1)))
    report = health_events.last("beta")
    assert report is not None and "mpijob" in report.kinds_served  # noqa: PT018


async def test_rotated_credentials_rebuild_within_a_second(
    sim: kubesim.Simulator, registry: FakeRegistry, watcher: RunningWatcher, job_events: JobEvents
) -> None:
    alpha = await sim.add_cluster("alpha")
    beta = await sim.add_cluster("beta")
    await registry.add(alpha)
    await registry.add(beta)
    await watcher.start()
    await watcher.wait_synced("alpha", informers=ALL)
    await watcher.wait_synced("beta", informers=ALL)
    old_alpha, old_beta = watcher.worker("alpha"), watcher.worker("beta")
    beta_informers = dict(old_beta.informers)

    alpha.rotate_token()  # the old token gets 401 from now on
    alpha.faults.drop_watches()
    started = time.monotonic()
    await registry.update("alpha", kubeconfig=alpha.kubeconfig_yaml())
    await eventually(lambda: watcher.worker("alpha") is not old_alpha, timeout=5)
    await watcher.wait_synced("alpha", informers=ALL, timeout=5)
    rebuilt_in = time.monotonic() - started
    assert watcher.worker("alpha") is not old_alpha
    assert rebuilt_in < 1.0, f"rebuilt in {rebuilt_in:.2f}s"
    # The other cluster was not touched.
    assert watcher.worker("beta") is old_beta and old_beta.informers == beta_informers  # noqa: PT018

    driver = kubesim.ScenarioDriver(alpha, seed=5, rate=1000)
    await driver.run_lifecycle("PyTorchJob", outcome="failed", restarts=1)
    await wait_for_truth(job_events, truth_by_uid(driver.truth), cluster_id="alpha")


async def test_metadata_only_update_does_not_rebuild(
    sim: kubesim.Simulator, registry: FakeRegistry, watcher: RunningWatcher
) -> None:
    alpha = await sim.add_cluster("alpha")
    await registry.add(alpha)
    await watcher.start()
    await watcher.wait_synced("alpha", informers=ALL)
    worker, informers = watcher.worker("alpha"), dict(watcher.worker("alpha").informers)
    fetches = registry.connections.fetches
    await registry.update("alpha", description="now with a description")
    await eventually(lambda: worker.spec.description == "now with a description")
    assert watcher.worker("alpha") is worker and worker.informers == informers  # noqa: PT018
    assert registry.connections.fetches == fetches


async def test_replaced_ca_is_refused_until_the_new_one_arrives(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
    health_events: HealthEvents,
) -> None:
    alpha = await sim.add_cluster("alpha")
    await registry.add(alpha)
    await watcher.start()
    await watcher.wait_synced("alpha", informers=ALL)

    await alpha.replace_ca()  # open connections closed; the old CA no longer verifies
    await eventually(
        lambda: any(i.status.last_error for i in watcher.worker("alpha").informers.values()),
        message="informers notice the TLS failure",
    )
    driver = kubesim.ScenarioDriver(alpha, seed=8, rate=1000)
    await driver.run_lifecycle("TFJob", outcome="succeeded", restarts=0, suspend=False)  # while we cannot see

    old = watcher.worker("alpha")
    await registry.update("alpha", kubeconfig=alpha.kubeconfig_yaml())
    await eventually(lambda: watcher.worker("alpha") is not old, timeout=5)
    await watcher.wait_synced("alpha", informers=ALL, timeout=5)
    # The TFJob lived and died while we were blind: nothing is owed for it, and nothing else is wrong.
    await driver.run_lifecycle("TFJob", outcome="failed", restarts=1, suspend=False, delete=False)
    expected = truth_by_uid(driver.truth)
    blind_uid = driver.truth[0].uid
    expected.pop(blind_uid)
    await eventually(
        lambda: {u: e for u, e in job_events.by_uid("alpha").items() if u != blind_uid} == expected
    )


async def test_unreachable_cluster_is_reported_and_never_blocks_another(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
    health_events: HealthEvents,
) -> None:
    alpha = await sim.add_cluster("alpha")
    down = await sim.add_cluster("down")
    await down.faults.refuse_connections()
    await registry.add(down)
    await registry.add(alpha)
    await watcher.start()
    await watcher.wait_synced("alpha", informers=ALL)

    def down_reported() -> bool:
        report = health_events.last("down")
        return bool(report and not report.reachable and report.last_error)

    await eventually(down_reported, message="unreachable cluster reported")
    assert watcher.app is not None
    reachable = watcher.app.metrics.cluster_reachable  # what the ClusterUnreachable alert reads
    await eventually(lambda: reachable.labels("down")._value.get() == 0, message="down: reachable 0")
    await eventually(lambda: reachable.labels("alpha")._value.get() == 1, message="alpha: reachable 1")
    driver = kubesim.ScenarioDriver(alpha, seed=2, rate=1000)
    await driver.run_lifecycle("JAXJob")
    await wait_for_truth(job_events, truth_by_uid(driver.truth), cluster_id="alpha")

    await down.faults.accept_connections()  # retried with backoff: it comes back on its own
    await watcher.wait_synced("down", informers=ALL, timeout=10)
    await eventually(lambda: (r := health_events.last("down")) is not None and r.reachable)
    await eventually(lambda: reachable.labels("down")._value.get() == 1, message="down: reachable 1 again")


async def test_missing_crds_then_one_installed_later(
    nats_url: str,
    redis_url: str,
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    job_events: JobEvents,
    health_events: HealthEvents,
) -> None:
    from watcher_harness import make_settings

    watcher = RunningWatcher(make_settings(nats_url, redis_url, rediscovery_interval=0.3), registry)
    bare = await sim.add_cluster("bare", kinds=[])
    partial = await sim.add_cluster("partial", kinds=[kubesim.BATCH_JOB, kubesim.PYTORCHJOB])
    await registry.add(bare)
    await registry.add(partial)
    await watcher.start()
    try:
        await watcher.wait_synced("partial", informers=2)
        assert sorted(watcher.worker("partial").kinds_served) == ["job", "pytorchjob"]
        await eventually(
            lambda: (
                (r := health_events.last("bare")) is not None
                and r.kinds_served == []
                and r.last_error is not None
            ),
            message="a cluster without job kinds is reported",
        )
        bare.serve_kind(kubesim.BATCH_JOB)  # installed later: the error clears once it is watched
        await watcher.wait_synced("bare", informers=1)
        await eventually(
            lambda: (
                (r := health_events.last("bare")) is not None
                and r.kinds_served == ["job"]
                and r.last_error is None
            ),
            message="the error of a cluster without job kinds clears when one is served",
        )

        partial.serve_kind(kubesim.TFJOB)
        await watcher.wait_synced("partial", informers=3, timeout=5)
        driver = kubesim.ScenarioDriver(partial, seed=4, rate=1000)
        await driver.run_lifecycle("TFJob", outcome="failed")
        await wait_for_truth(job_events, truth_by_uid(driver.truth), cluster_id="partial")

        partial.remove_kind(kubesim.PYTORCHJOB)  # uninstalled: its informer stops cleanly
        await eventually(
            lambda: sorted(watcher.worker("partial").informers) == [("job", "*"), ("tfjob", "*")]
        )
    finally:
        await watcher.stop()


async def test_watch_options_namespaces_kinds_owner_and_removal(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
    redis: Redis,
) -> None:
    alpha = await sim.add_cluster("alpha")
    options = WatchOptions(
        kinds=["pytorchjob"],
        include_namespaces=["team-a"],
        owner_annotation="trainwatch.io/owner",
        selected_labels=["team"],
    )
    await registry.add(alpha, watch=options)
    await watcher.start()
    await watcher.wait_synced("alpha", informers=1)
    assert list(watcher.worker("alpha").informers) == [("pytorchjob", "team-a")]

    driver = kubesim.ScenarioDriver(alpha, seed=6, rate=1000)
    await driver.run_lifecycle("PyTorchJob", namespace="team-a", delete=False)
    await driver.run_lifecycle("PyTorchJob", namespace="team-b")  # not watched
    await driver.run_lifecycle("TFJob", namespace="team-a")  # kind not watched
    in_scope = [t for t in driver.truth if t.namespace == "team-a" and t.kind == "PyTorchJob"]
    await wait_for_truth(job_events, truth_by_uid(in_scope), cluster_id="alpha")
    event = job_events.events[-1]
    assert event.owner and event.labels.get("team")  # noqa: PT018
    # A namespaced watch was used, not a cluster-wide one filtered here.
    watches = [
        h.request for h in alpha.hub.active if h.request.spec.job and h.request.spec is not kubesim.CRD
    ]
    assert [(w.spec.plural, w.namespace) for w in watches] == [("pytorchjobs", "team-a")]

    # Adding a kind starts its informer and leaves the other one running as it was.
    pytorch = watcher.worker("alpha").informers[("pytorchjob", "team-a")]
    await registry.update("alpha", watch=options.model_copy(update={"kinds": ["pytorchjob", "tfjob"]}))
    await watcher.wait_synced("alpha", informers=2)
    assert watcher.worker("alpha").informers[("pytorchjob", "team-a")] is pytorch

    # Removal stops everything and forgets the cluster's checkpoints.
    assert [k async for k in redis.scan_iter(match=f"{PREFIX}:alpha:*")]
    await registry.remove("alpha")
    await eventually(lambda: "alpha" not in watcher.app.supervisor.workers)  # type: ignore[union-attr]
    await eventually(lambda: _no_keys(redis, f"{PREFIX}:alpha:*"), message="checkpoints deleted")


async def _no_keys(redis: Redis, pattern: str) -> bool:
    return not [k async for k in redis.scan_iter(match=pattern)]
