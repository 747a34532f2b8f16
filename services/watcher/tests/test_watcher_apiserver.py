"""What a real kube-apiserver v1.36 does that the watcher must cope with (issue 14): an etcd
restored under a running watcher, idle watches without bookmarks, a silent partition, 429
"storage is (re)initializing", a SIGTERMed server that keeps its streams, 403 on every kind."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

import pytest
from watcher_harness import (
    FakeRegistry,
    HealthEvents,
    JobEvents,
    RunningWatcher,
    make_settings,
    truth_by_uid,
    wait_for_truth,
)

import kubesim
from trainwatch_common.testing import eventually
from trainwatch_watcher.kind_health import kinds_health

Expected = dict[str, list[tuple[str, str, str | None, bool]]]


def _sample(watcher: RunningWatcher, name: str, **labels: str) -> float:
    assert watcher.app is not None
    return watcher.app.metrics.registry.get_sample_value(name, labels) or 0.0


async def _no_change_within(seconds: float, value: object, read: Callable[[], object]) -> None:
    """An absence needs a window: waits ``seconds`` for ``read()`` to leave ``value``; it must not."""
    with contextlib.suppress(AssertionError):
        await eventually(lambda: read() != value, timeout=seconds)
    assert read() == value


@pytest.mark.parametrize("restart", [True, False], ids=["apiserver-restarted", "streams-kept-open"])
async def test_etcd_restored_under_a_running_watcher_is_detected_and_recovered(
    nats_url: str,
    redis_url: str,
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    job_events: JobEvents,
    health_events: HealthEvents,
    restart: bool,
) -> None:
    read_timeout = 1.0
    settings = make_settings(
        nats_url,
        redis_url,
        watch_timeout_seconds=2,
        read_timeout=read_timeout,
        silence_probe_interval=0.5,
        use_watch_list=False,
    )
    watcher = RunningWatcher(settings, registry)
    alpha = await sim.add_cluster("alpha", kinds=[kubesim.PYTORCHJOB], seed=21)
    await registry.add(alpha)
    await watcher.start()
    try:
        await watcher.wait_synced("alpha", informers=1)
        driver = kubesim.ScenarioDriver(alpha, seed=21, rate=None)
        await driver.run_lifecycle("PyTorchJob", name="kept", delete=False)
        backup = alpha.backup()
        for n in range(3):  # jobs the restored etcd will not have
            await driver.run_lifecycle("PyTorchJob", name=f"vanished-{n}", delete=False)
        await wait_for_truth(job_events, truth_by_uid(driver.truth))
        before = dict(truth_by_uid(driver.truth))

        started = time.monotonic()
        await alpha.restore(backup, restart=restart)
        await eventually(
            lambda: (
                _sample(
                    watcher,
                    "trainwatch_watcher_relists_total",
                    kind="pytorchjob",
                    reason="resource_version_ahead",
                )
                > 0
            ),
            timeout=read_timeout + 2 * settings.watch_timeout_seconds,
            message="the server going back in time is detected",
        )
        detected = time.monotonic() - started
        # The longest a watch may stay silent before it is given up: its timeoutSeconds (at most
        # 2w) plus the read timeout. Detection and the relist's diff must both fit in it.
        longest_read = 2 * settings.watch_timeout_seconds + read_timeout
        assert detected < longest_read
        vanished = {t.uid for t in driver.truth if t.name.startswith("vanished")}
        await eventually(
            lambda: all(job_events.by_uid().get(uid, [("",)])[-1][0] == "deleted" for uid in vanished),
            timeout=longest_read - (time.monotonic() - started),
            message="the relist's diff published within the read timeout",
        )
        recovered = time.monotonic() - started
        logging.getLogger(__name__).warning(
            "etcd restore (restart=%s) detected after %.3f s, relist diff published after %.3f s",
            restart,
            detected,
            recovered,
        )

        # New jobs on the restored server: every transition, none collapsed or lost.
        new_driver = kubesim.ScenarioDriver(alpha, seed=22, rate=200)
        await new_driver.run_lifecycle("PyTorchJob", name="new-0", delete=True)
        (first_new,) = {t.uid for t in new_driver.truth}
        await eventually(lambda: first_new in job_events.by_uid(), message="new events flow")
        logging.getLogger(__name__).warning(
            "etcd restore (restart=%s): a new job's events flowing %.3f s after the restore",
            restart,
            time.monotonic() - started,
        )
        for n in range(1, 3):
            await new_driver.run_lifecycle("PyTorchJob", name=f"new-{n}", delete=False)
        expected: Expected = {}
        for uid, entries in before.items():
            expected[uid] = list(entries)
            name = next(t.name for t in driver.truth if t.uid == uid)
            if name.startswith("vanished"):  # gone from the restored server: deleted, last state
                expected[uid].append(("deleted", *entries[-1][1:]))
        expected.update(truth_by_uid(new_driver.truth))
        await wait_for_truth(job_events, expected, timeout=10)

        def reported() -> bool:
            health = health_events.last("alpha")
            assert health is not None
            kind = health.kinds["pytorchjob"]
            assert kind.recovered is not None
            assert "ahead of the server" in kind.recovered
            return kind.state == "watching"

        await eventually(reported, message="the recovery is reported in health")
    finally:
        await watcher.stop()


async def test_etcd_restored_while_the_watcher_was_stopped_is_noticed_from_its_checkpoint(
    nats_url: str,
    redis_url: str,
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    job_events: JobEvents,
) -> None:
    """The watcher restarts from a checkpoint whose resourceVersion the restored server never
    reached: a watch from it gets 200 and silence, so the resume itself must notice and relist."""
    read_timeout = 1.0
    settings = make_settings(
        nats_url,
        redis_url,
        watch_timeout_seconds=2,
        read_timeout=read_timeout,
        silence_probe_interval=30.0,  # the check at resume alone, not the watchdog, must notice
        use_watch_list=False,
    )
    watcher = RunningWatcher(settings, registry)
    alpha = await sim.add_cluster("alpha", kinds=[kubesim.PYTORCHJOB], seed=28)
    await registry.add(alpha)
    await watcher.start()
    try:
        await watcher.wait_synced("alpha", informers=1)
        driver = kubesim.ScenarioDriver(alpha, seed=28, rate=None)
        await driver.run_lifecycle("PyTorchJob", name="kept", delete=False)
        backup = alpha.backup()
        for n in range(3):
            await driver.run_lifecycle("PyTorchJob", name=f"vanished-{n}", delete=False)
        await wait_for_truth(job_events, truth_by_uid(driver.truth))
        await watcher.stop()  # graceful: the checkpoint holds a resourceVersion past the backup's

        await alpha.restore(backup, restart=True)
        started = time.monotonic()
        await watcher.start()
        await eventually(
            lambda: (
                _sample(
                    watcher,
                    "trainwatch_watcher_relists_total",
                    kind="pytorchjob",
                    reason="resource_version_ahead",
                )
                > 0
            ),
            timeout=2 * settings.watch_timeout_seconds + read_timeout,
            message="a checkpoint ahead of the server is noticed at resume",
        )
        logging.getLogger(__name__).warning(
            "etcd restored while stopped: relist %.3f s after the start", time.monotonic() - started
        )
        expected: Expected = {}
        for uid, entries in truth_by_uid(driver.truth).items():
            expected[uid] = list(entries)
            if next(t.name for t in driver.truth if t.uid == uid).startswith("vanished"):
                expected[uid].append(("deleted", *entries[-1][1:]))
        new_driver = kubesim.ScenarioDriver(alpha, seed=29, rate=200)
        await new_driver.run_lifecycle("PyTorchJob", name="new", restarts=1)
        expected.update(truth_by_uid(new_driver.truth))
        await wait_for_truth(job_events, expected, timeout=10)
    finally:
        await watcher.stop()


async def test_an_idle_watch_without_bookmarks_is_not_reconnected_before_its_timeout(
    nats_url: str, redis_url: str, sim: kubesim.Simulator, registry: FakeRegistry
) -> None:
    # A real server sends no bookmark on an idle resource: a read timeout shorter than the
    # watch's timeoutSeconds would reconnect every idle watch (and relist after a compaction).
    settings = make_settings(nats_url, redis_url, watch_timeout_seconds=3, read_timeout=0.3)
    watcher = RunningWatcher(settings, registry)
    alpha = await sim.add_cluster("alpha", kinds=[kubesim.PYTORCHJOB], bookmark_interval=0.1)
    await registry.add(alpha)
    await watcher.start()
    try:
        await watcher.wait_synced("alpha", informers=1)

        def job_watches() -> set[object]:
            return {h for h in alpha.hub.active if h.request.spec.job and h.request.spec is not kubesim.CRD}

        await eventually(lambda: len(job_watches()) == 1, message="watching")
        watches = job_watches()
        await _no_change_within(1.5, watches, job_watches)
        assert (
            _sample(
                watcher, "trainwatch_watcher_watch_reconnects_total", kind="pytorchjob", error="WatchStalled"
            )
            == 0
        )
        # client-go's choice: a random timeoutSeconds in [w, 2w].
        (handle,) = watches
        assert 3 <= handle.request.timeout <= 6, handle.request.timeout  # type: ignore[attr-defined]
    finally:
        await watcher.stop()


async def test_a_silent_partition_is_noticed_without_a_short_read_timeout(
    nats_url: str, redis_url: str, sim: kubesim.Simulator, registry: FakeRegistry, job_events: JobEvents
) -> None:
    settings = make_settings(
        nats_url, redis_url, read_timeout=30.0, silence_probe_interval=0.3, request_timeout=0.5
    )
    watcher = RunningWatcher(settings, registry)
    alpha = await sim.add_cluster("alpha", kinds=[kubesim.PYTORCHJOB])
    await registry.add(alpha)
    await watcher.start()
    try:
        await watcher.wait_synced("alpha", informers=1)
        # The open stream goes silent and new requests get no answer: a partition.
        alpha.faults.stall_watches(3.0)
        alpha.faults.delay(5.0, duration=3.0)
        await eventually(
            lambda: (
                _sample(
                    watcher,
                    "trainwatch_watcher_watch_reconnects_total",
                    kind="pytorchjob",
                    error="StreamAbandoned",
                )
                > 0
            ),
            timeout=3,
            message="the partition is noticed",
        )
        await alpha.faults.clear()
        driver = kubesim.ScenarioDriver(alpha, seed=23, rate=500)
        await driver.run_lifecycle("PyTorchJob", restarts=1)
        await wait_for_truth(job_events, truth_by_uid(driver.truth), timeout=10)
    finally:
        await watcher.stop()


async def test_storage_initializing_is_the_expected_wait_not_a_failure(
    nats_url: str,
    redis_url: str,
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    job_events: JobEvents,
    health_events: HealthEvents,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = make_settings(nats_url, redis_url, busy_retry=0.1, silence_probe_interval=0.3)
    watcher = RunningWatcher(settings, registry)
    alpha = await sim.add_cluster(
        "alpha", kinds=[kubesim.PYTORCHJOB, kubesim.BATCH_JOB], storage_init_seconds=1.0
    )
    await registry.add(alpha)
    caplog.set_level(logging.INFO, logger="trainwatch_watcher")
    started = time.monotonic()
    await watcher.start()
    try:

        def starting() -> bool:
            health = health_events.last("alpha")
            return (
                health is not None
                and health.kinds.get("pytorchjob") is not None
                and health.kinds["pytorchjob"].state == "starting"
            )

        await eventually(starting, message="pytorchjob reported as starting while its storage initializes")
        await watcher.wait_synced("alpha", informers=2)
        logging.getLogger(__name__).warning(
            "429 storage initializing for %.1f s: both kinds synced %.3f s after the start",
            1.0,
            time.monotonic() - started,
        )
        await alpha.restart()  # every kind initializes again
        driver = kubesim.ScenarioDriver(alpha, seed=24, rate=500)
        await driver.run_lifecycle("PyTorchJob")
        await driver.run_lifecycle("Job")
        await wait_for_truth(job_events, truth_by_uid(driver.truth), timeout=10)
        assert any(status == 429 for _, _, status in alpha.requests), "the server did answer 429"
        for report in health_events.reports:
            assert report.last_error is None or "429" not in report.last_error, report.last_error
            assert all(k.error is None or "429" not in k.error for k in report.kinds.values())
        failed = [r for r in caplog.records if r.getMessage() == "watch failed; retrying"]
        assert not [r for r in failed if "429" in str(getattr(r, "error", ""))], "a 429 logged as a failure"
        assert (
            _sample(
                watcher,
                "trainwatch_watcher_watch_reconnects_total",
                kind="pytorchjob",
                error="StorageInitializing",
            )
            == 0
        )
    finally:
        await watcher.stop()


async def test_a_sigtermed_apiserver_keeping_its_streams_does_not_hold_the_watcher_back(
    nats_url: str, redis_url: str, sim: kubesim.Simulator, registry: FakeRegistry, job_events: JobEvents
) -> None:
    settings = make_settings(nats_url, redis_url, read_timeout=30.0, silence_probe_interval=0.3)
    watcher = RunningWatcher(settings, registry)
    alpha = await sim.add_cluster("alpha", kinds=[kubesim.PYTORCHJOB])
    await registry.add(alpha)
    await watcher.start()
    try:
        await watcher.wait_synced("alpha", informers=1)
        await alpha.terminate()  # open streams stay open, silent
        informer = watcher.worker("alpha").informers[("pytorchjob", "*")]
        # While nothing listens, the open stream does not pass for a healthy watch.
        await eventually(
            lambda: (
                kinds_health(["pytorchjob"], [("pytorchjob", informer.status)])["pytorchjob"].state
                == "failing"
            ),
            timeout=3,
            message="a stopped server is noticed behind its open stream",
        )
        await alpha.restart(kill_old=False)  # the new apiserver serves; the old one lingers
        driver = kubesim.ScenarioDriver(alpha, seed=25, rate=500)
        started = time.monotonic()
        await driver.run_lifecycle("PyTorchJob", restarts=1)
        await wait_for_truth(job_events, truth_by_uid(driver.truth), timeout=5)
        logging.getLogger(__name__).warning(
            "caught up past a SIGTERMed server in %.3f s", time.monotonic() - started
        )
        assert alpha.hub.count >= 1  # the old stream is still open: we did not wait for it
    finally:
        await alpha.kill_streams()
        await watcher.stop()


async def test_credentials_forbidden_on_every_kind_are_reported_per_kind(
    nats_url: str, redis_url: str, sim: kubesim.Simulator, registry: FakeRegistry, health_events: HealthEvents
) -> None:
    watcher = RunningWatcher(make_settings(nats_url, redis_url), registry)
    alpha = await sim.add_cluster("alpha", kinds=[kubesim.PYTORCHJOB, kubesim.BATCH_JOB])
    await registry.add(alpha, token=alpha.add_token(allowed=False))  # discovery works, nothing else
    await watcher.start()
    try:

        def forbidden() -> bool:
            health = health_events.last("alpha")
            assert health is not None
            assert health.kinds["pytorchjob"].state == "forbidden"
            assert health.kinds["job"].state == "forbidden"
            assert "403" in (health.kinds["pytorchjob"].error or "")
            assert health.kinds["tfjob"].state == "not_installed"
            return True

        await eventually(forbidden, timeout=30, message="403 on every kind reported as forbidden")
    finally:
        await watcher.stop()


@pytest.mark.parametrize("crds_readable", [True, False], ids=["crd-watch", "404-fallback"])
async def test_a_reinstalled_crd_is_watched_again_within_two_seconds(
    nats_url: str,
    redis_url: str,
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    job_events: JobEvents,
    crds_readable: bool,
) -> None:
    settings = make_settings(nats_url, redis_url, rediscovery_interval=30.0, busy_retry=0.1)
    watcher = RunningWatcher(settings, registry)
    alpha = await sim.add_cluster(
        "alpha", kinds=[kubesim.PYTORCHJOB, kubesim.BATCH_JOB], storage_init_seconds=0.3
    )
    alpha.crds_readable = crds_readable
    await registry.add(alpha)
    await watcher.start()
    try:
        await watcher.wait_synced("alpha", informers=2)
        driver = kubesim.ScenarioDriver(alpha, seed=26, rate=None)
        await driver.run_lifecycle("PyTorchJob", delete=False)
        expected = truth_by_uid(driver.truth)
        await wait_for_truth(job_events, expected)

        alpha.remove_kind("PyTorchJob")  # DELETED for its objects, then 404
        (uid,) = expected
        expected[uid] = [*expected[uid], ("deleted", *expected[uid][-1][1:])]
        await wait_for_truth(job_events, expected)
        await eventually(
            lambda: len(watcher.worker("alpha").informers) == 1, message="pytorchjob informer stopped"
        )

        started = time.monotonic()
        alpha.serve_kind(kubesim.PYTORCHJOB)  # re-created: 429 while its storage initializes, then served
        await watcher.wait_synced("alpha", informers=2, timeout=5)
        noticed = time.monotonic() - started
        logging.getLogger(__name__).warning(
            "re-installed CRD (crds_readable=%s) watched again after %.3f s", crds_readable, noticed
        )
        assert noticed < 2.0

        again = kubesim.ScenarioDriver(alpha, seed=27, rate=200)
        await again.run_lifecycle("PyTorchJob", restarts=1)
        expected.update(truth_by_uid(again.truth))
        await wait_for_truth(job_events, expected)
    finally:
        await watcher.stop()
