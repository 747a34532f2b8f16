"""An event id names one event forever, whatever Redis or the registry forgets (issue 13, 1/4/5).

The JOBS stream is the record of what was emitted and the Redis checkpoint only a cache of it:
a checkpoint that is lost, deleted with its cluster or restored from an older snapshot must cost
a relist, never a reused id (which JetStream drops as a duplicate within its window, and which
names two different events after it)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from nats.aio.client import Client as NatsClient
from redis.asyncio import Redis
from watcher_harness import (
    FakeRegistry,
    JobEvents,
    RunningWatcher,
    assert_consistent_with_truth,
    demo_kinds,
    make_settings,
)

import kubesim
from trainwatch_common.events.envelope import wrap_job_event
from trainwatch_common.events.jobs import JobStatusEvent, Phase
from trainwatch_common.testing import eventually
from trainwatch_watcher import transitions
from trainwatch_watcher.history import StreamHistory
from trainwatch_watcher.recovery import StreamHead
from trainwatch_watcher.state import PREFIX, StateStore, state_key

ALL = len(kubesim.ALL_KINDS)


def assert_ids_name_one_event(job_events: JobEvents) -> None:
    """No id stored twice, and no (uid, sequence) carried by two different events."""
    ids = [e.event_id for e in job_events.events]
    assert len(ids) == len(set(ids)), "an event id was stored twice"
    by_position: dict[tuple[str, int], str] = {}
    for event in job_events.events:
        position = (event.job.uid, event.sequence)
        assert position not in by_position, f"two events at {position}"
        by_position[position] = event.event_id


async def _watched_demo_cluster(
    sim: kubesim.Simulator, registry: FakeRegistry, watcher: RunningWatcher, *, seed: int
) -> kubesim.ScenarioDriver:
    """Cluster "alpha" with every kind, registered and watched; its scenario driver."""
    alpha = await sim.add_cluster("alpha")
    await registry.add(alpha)
    await watcher.start()
    await watcher.wait_synced("alpha", informers=ALL)
    return kubesim.ScenarioDriver(alpha, seed=seed, rate=100)


async def _consistent_and_unique(job_events: JobEvents, driver: kubesim.ScenarioDriver) -> None:
    await eventually(lambda: assert_consistent_with_truth(job_events, driver.truth, "alpha") is None)
    assert_ids_name_one_event(job_events)


async def _while_away(driver: kubesim.ScenarioDriver, changes: int) -> None:
    at_start = len(driver.truth)
    await eventually(lambda: len(driver.truth) >= at_start + changes, message="changes while away")


def _demo(driver: kubesim.ScenarioDriver) -> asyncio.Task[None]:
    # Long enough that every fault below happens while jobs still change.
    return asyncio.create_task(
        driver.run_demo(jobs=80, concurrency=10, kinds=demo_kinds(driver.cluster)), name="demo"
    )


async def _run_demo_around(
    driver: kubesim.ScenarioDriver, job_events: JobEvents, fault: Callable[[], Awaitable[None]]
) -> None:
    demo = _demo(driver)
    try:
        await eventually(lambda: len(job_events.events) > 30, message="events before the fault")
        await fault()
        await demo
    finally:
        demo.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await demo


async def test_a_re_added_cluster_continues_its_jobs_sequences(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
    redis: Redis,
) -> None:
    """Finding 4: removing a cluster deleted its checkpoints, so the re-added cluster restarted
    every job at sequence 0 and JetStream dropped its events as duplicates."""
    driver = await _watched_demo_cluster(sim, registry, watcher, seed=41)
    alpha = driver.cluster

    async def remove_and_re_add() -> None:
        await registry.remove("alpha")

        async def checkpoints_gone() -> bool:
            return not [key async for key in redis.scan_iter(match=f"{PREFIX}:alpha:*")]

        await eventually(checkpoints_gone, message="the removed cluster's checkpoints deleted")
        await _while_away(driver, 20)  # jobs change and are deleted while nobody watches
        await registry.add(alpha)

    await _run_demo_around(driver, job_events, remove_and_re_add)
    await _consistent_and_unique(job_events, driver)


async def test_redis_losing_its_data_costs_a_relist_not_an_event(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
    redis: Redis,
) -> None:
    """Finding 5: with its checkpoints gone the watcher started every job again at sequence 0."""
    driver = await _watched_demo_cluster(sim, registry, watcher, seed=42)

    async def lose_redis() -> None:
        await watcher.kill()
        await redis.flushall()
        await _while_away(driver, 20)
        await watcher.start()

    await _run_demo_around(driver, job_events, lose_redis)
    await _consistent_and_unique(job_events, driver)


async def test_a_checkpoint_restored_from_an_older_snapshot_yields_to_the_stream(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
    redis: Redis,
) -> None:
    """Finding 5: Redis restarted from an older snapshot has checkpoints behind the stream;
    continuing from them re-used the sequences of events already emitted."""
    driver = await _watched_demo_cluster(sim, registry, watcher, seed=43)
    alpha = driver.cluster
    snapshot: dict[bytes, bytes] = {}

    async def restore_old_snapshot() -> None:
        async for key in redis.scan_iter(match=f"{PREFIX}:alpha:*"):
            snapshot[key] = await redis.dump(key)
        seen = len(job_events.events)
        await eventually(lambda: len(job_events.events) > seen + 20, message="events after the snapshot")
        await watcher.kill()
        for key, value in snapshot.items():
            await redis.restore(key, 0, value, replace=True)
        await _while_away(driver, 10)
        # Compacted meanwhile: the old resourceVersion cannot replay what happened since, so the
        # watcher relists and sees today's states, not the ones the stream already holds.
        alpha.compact()
        await watcher.start()

    await _run_demo_around(driver, job_events, restore_old_snapshot)
    assert snapshot, "the snapshot held checkpoints"
    await _consistent_and_unique(job_events, driver)


class _LateStaleOwner(StreamHistory):
    """The real stream history; once the new owner has read the stream, a fenced-out owner's
    late publish lands under the id the new owner is about to use (the race fencing cannot
    close: a publish that left the old owner before its lease lapsed)."""

    def __init__(self, nc: NatsClient, forge: Callable[[], Awaitable[None]]) -> None:
        super().__init__(nc)
        self._forge = forge

    async def last_sequence(self, cluster_id: str, kind_key: str, namespace: str | None) -> int:
        last = await super().last_sequence(cluster_id, kind_key, namespace)
        await self._forge()
        return last


async def test_an_id_taken_by_a_stale_owners_late_event_is_not_the_end_of_the_job(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
    nc: NatsClient,
) -> None:
    """Finding 1: the new owner's copy had the id of a stale owner's different event and was
    dropped by JetStream's de-duplication, so nobody ever saw the job's terminal Succeeded."""
    batch_job = kubesim.kinds.BATCH_JOB
    alpha = await sim.add_cluster("alpha", kinds=[batch_job])
    await registry.add(alpha)
    await watcher.start()
    await watcher.wait_synced("alpha", informers=1)
    job = alpha.store.create(
        batch_job, {"metadata": {"name": "bert", "namespace": "default"}, "spec": {"parallelism": 1}}
    )
    uid = job["metadata"]["uid"]
    await eventually(lambda: any(e.job.uid == uid for e in job_events.events), message="created")
    created = next(e for e in job_events.events if e.job.uid == uid)
    await watcher.kill()
    alpha.store.patch_status(
        batch_job,
        "default",
        "bert",
        {"conditions": [_condition("SuccessCriteriaMet"), _condition("Complete")], "succeeded": 1},
    )

    forged: list[str] = []

    async def stale_owner_publishes() -> None:
        if forged:
            return
        stale = created.model_copy(
            update={
                "change": "transition",
                "sequence": 1,
                "event_id": JobStatusEvent.expected_event_id("alpha", uid, 1),
                "phase": Phase.RUNNING,
                "previous_phase": created.phase,
                "epoch": created.epoch,
            }
        )
        envelope = orjson.dumps(wrap_job_event(stale).model_dump(mode="json", exclude_none=True))
        await nc.jetstream().publish(_subject(created), envelope, headers={"Nats-Msg-Id": stale.event_id})
        forged.append(stale.event_id)

    await watcher.start(history_factory=lambda client: _LateStaleOwner(client, stale_owner_publishes))
    await eventually(
        lambda: (
            [(e.sequence, e.phase.value) for e in job_events.events if e.job.uid == uid][-1:]
            == [(2, "Succeeded")]
        ),
        message="the true state under the next sequence",
        timeout=20,  # a restart, the divergence found, a relist: several steps, each waiting on I/O
    )
    assert forged
    assert [(e.sequence, e.phase.value, e.terminal) for e in job_events.events if e.job.uid == uid] == [
        (0, created.phase.value, False),
        (1, "Running", False),  # the stale owner's event, which holds id 1
        (2, "Succeeded", True),
    ]
    assert _metric(watcher, "trainwatch_watcher_event_id_conflicts_total") == 1


def _condition(kind: str) -> dict[str, Any]:
    return {"type": kind, "status": "True", "lastTransitionTime": "2026-12-01T10:00:00Z", "reason": kind}


def _subject(event: JobStatusEvent) -> str:
    from trainwatch_common.subjects import job_subject

    return job_subject(
        cluster_id=event.job.cluster_id,
        namespace=event.job.namespace,
        kind_key=event.job.kind_key,
        name=event.job.name,
    )


def _metric(watcher: RunningWatcher, name: str) -> float:
    assert watcher.app is not None
    total = 0.0
    for metric in watcher.app.metrics.registry.collect():
        for sample in metric.samples:
            if sample.name == name:
                total += sample.value
    return total


class _CountingHistory(StreamHistory):
    reads = 0

    async def last_events(
        self, cluster_id: str, kind_key: str, namespace: str | None
    ) -> dict[str, StreamHead]:
        type(self).reads += 1
        return await super().last_events(cluster_id, kind_key, namespace)


async def test_a_checkpoint_level_with_the_stream_is_resumed_without_reading_the_stream(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
    redis: Redis,
) -> None:
    """The start-up read costs O(jobs); after a graceful stop the checkpoint's mark is the
    stream's last event of each scope, so one request per informer tells it there is nothing to read."""
    alpha = await sim.add_cluster("alpha", kinds=[kubesim.kinds.BATCH_JOB, kubesim.kinds.PYTORCHJOB])
    await registry.add(alpha)
    await watcher.start(history_factory=_CountingHistory)
    await watcher.wait_synced("alpha", informers=2)
    driver = kubesim.ScenarioDriver(alpha, seed=45, rate=1000)
    await driver.run_demo(jobs=10, concurrency=10, kinds=demo_kinds(alpha))
    await eventually(lambda: assert_consistent_with_truth(job_events, driver.truth, "alpha") is None)
    await watcher.stop()  # graceful: everything acknowledged is checkpointed
    _CountingHistory.reads = 0
    await watcher.start(history_factory=_CountingHistory)
    await watcher.wait_synced("alpha", informers=2)
    assert _CountingHistory.reads == 0, "a current checkpoint still read the stream"

    await watcher.kill()
    await redis.flushall()
    await watcher.start(history_factory=_CountingHistory)
    await watcher.wait_synced("alpha", informers=2)
    assert _CountingHistory.reads == 2, "a lost checkpoint must be rebuilt from the stream"
    await _consistent_and_unique(job_events, driver)


async def test_a_deleted_job_brought_back_by_an_etcd_restore_continues_after_its_deletion(
    nats_url: str, redis_url: str, sim: kubesim.Simulator, registry: FakeRegistry, job_events: JobEvents
) -> None:
    """A restored etcd brings back a job deleted after the backup, with its old uid: reported
    from sequence 0 again, its events were the ids of its first ones and JetStream dropped them."""
    settings = make_settings(
        nats_url, redis_url, watch_timeout_seconds=2, read_timeout=1.0, silence_probe_interval=0.5
    )
    watcher = RunningWatcher(settings, registry)
    alpha = await sim.add_cluster("alpha", kinds=[kubesim.PYTORCHJOB], seed=46)
    await registry.add(alpha)
    await watcher.start()
    try:
        await watcher.wait_synced("alpha", informers=1)
        driver = kubesim.ScenarioDriver(alpha, seed=46, rate=None)
        await driver.run_lifecycle("PyTorchJob", name="comes-back", delete=False)
        uid = next(t.uid for t in driver.truth if t.name == "comes-back")
        backup = alpha.backup()
        alpha.store.delete(kubesim.PYTORCHJOB, "default", "comes-back")
        await eventually(lambda: _changes(job_events, uid)[-1:] == ["deleted"], message="its deletion")
        deleted_at = len(_changes(job_events, uid)) - 1

        await alpha.restore(backup, restart=True)
        await eventually(
            lambda: _sequences(job_events, uid)[deleted_at + 1 :] == [deleted_at + 1],
            timeout=10,
            message="the job back, after its deletion",
        )
        back = [e for e in job_events.events if e.job.uid == uid][-1]
        assert back.change == "created"
        assert (back.phase.value, back.terminal) == (driver.truth[-1].phase, driver.truth[-1].terminal)
        assert_ids_name_one_event(job_events)
    finally:
        await watcher.stop()


def _changes(job_events: JobEvents, uid: str) -> list[str]:
    return [e.change for e in job_events.events if e.job.uid == uid]


def _sequences(job_events: JobEvents, uid: str) -> list[int]:
    return [e.sequence for e in job_events.events if e.job.uid == uid]


async def test_a_job_that_failed_and_was_deleted_while_redis_lost_its_data_is_reported_failed(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
    redis: Redis,
) -> None:
    """make chaos: after Redis restarted with a fresh data dir, a relist could only see that the
    job was gone, so its deletion carried a stale phase and its Failed was never reported. The
    stream's events say where the watch was: resuming there replays the failure, then the deletion."""
    batch_job = kubesim.kinds.BATCH_JOB
    alpha = await sim.add_cluster("alpha", kinds=[batch_job])
    await registry.add(alpha)
    await watcher.start()
    await watcher.wait_synced("alpha", informers=1)
    body = {"metadata": {"name": "bert", "namespace": "default"}, "spec": {"parallelism": 1}}
    uid = alpha.store.create(batch_job, body)["metadata"]["uid"]
    alpha.store.patch_status(batch_job, "default", "bert", {"active": 1, "ready": 1, "startTime": _T0})
    await eventually(lambda: _phases(job_events, uid)[-1:] == ["Running"], message="running")
    await watcher.kill()
    await redis.flushall()
    alpha.store.patch_status(
        batch_job,
        "default",
        "bert",
        {
            "active": 0,
            "ready": 0,
            "failed": 1,
            "conditions": [_condition("FailureTarget"), _condition("Failed")],
        },
    )
    alpha.store.delete(batch_job, "default", "bert")
    await watcher.start()
    await eventually(lambda: _changes(job_events, uid)[-1:] == ["deleted"], message="the deletion")
    events = [e for e in job_events.events if e.job.uid == uid]
    assert [(e.change, e.phase.value, e.terminal) for e in events][-2:] == [
        ("transition", "Failed", True),
        ("deleted", "Failed", True),
    ]
    assert_ids_name_one_event(job_events)


_T0 = "2026-12-01T10:00:00Z"


def _phases(job_events: JobEvents, uid: str) -> list[str]:
    return [e.phase.value for e in job_events.events if e.job.uid == uid]


async def test_a_checkpoint_rebuilt_from_the_stream_is_saved_whole(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
    redis: Redis,
) -> None:
    """make chaos SEED=7: after Redis restarted with a fresh data dir, the new owner took its
    jobs' records from the stream but saved only those of the jobs it then emitted for, next to
    the stream mark that tells the next owner the checkpoint holds everything. The next owner
    trusted it; after a 410 its relist took the jobs missing from it for new ones, emitted them
    at sequence 0 under ids the stream already held (HistoryDiverged), threw the relist away
    and resumed from the stream's compacted resourceVersion: a job created and deleted before
    that second relist was never reported."""
    batch_job = kubesim.kinds.BATCH_JOB
    alpha = await sim.add_cluster("alpha", kinds=[batch_job])
    await registry.add(alpha)
    await watcher.start()
    await watcher.wait_synced("alpha", informers=1)
    bodies = {
        name: {"metadata": {"name": name, "namespace": "default"}, "spec": {"parallelism": 1}}
        for name in ("busy", "quiet")
    }
    uids = {name: alpha.store.create(batch_job, body)["metadata"]["uid"] for name, body in bodies.items()}
    # Past its first state: a relist that takes it for a new job emits sequence 0 "created
    # Running", a different event from the stream's sequence 0 "created Pending".
    alpha.store.patch_status(batch_job, "default", "quiet", {"active": 1, "ready": 1, "startTime": _T0})
    await eventually(lambda: _phases(job_events, uids["quiet"]) == ["Pending", "Running"], message="quiet")
    await eventually(lambda: _phases(job_events, uids["busy"]) == ["Pending"], message="busy")

    await watcher.kill()
    await redis.flushall()  # a fresh data dir: the checkpoint is rebuilt from the stream
    alpha.store.patch_status(batch_job, "default", "busy", {"active": 1, "ready": 1, "startTime": _T0})
    await watcher.start()
    await eventually(lambda: _phases(job_events, uids["busy"]) == ["Pending", "Running"], message="busy on")
    await watcher.stop()  # graceful: what was acknowledged is checkpointed, with the stream's mark

    checkpoint = await StateStore(redis).load("alpha", "job")
    assert {uid: record.slot.sequence for uid, record in checkpoint.records.items()} == {
        uids["busy"]: 1,
        uids["quiet"]: 1,
    }, "the checkpoint holds only some of the jobs the stream holds open"

    await watcher.start()
    await watcher.wait_synced("alpha", informers=1)
    # One synchronous step, so no watch sends the new job: the watcher's resourceVersion is then
    # compacted (410), and only a relist's checkpoint reaches the new job's version.
    alpha.store.create(batch_job, {"metadata": {"name": "late", "namespace": "default"}, "spec": {}})
    compacted = alpha.compact()
    alpha.faults.drop_watches()

    async def relisted() -> bool:
        rv = await redis.hget(state_key("alpha", "job"), "rv:*")
        return rv is not None and int(rv) >= compacted

    await eventually(relisted, message="the relist after the 410 checkpointed")
    assert _metric(watcher, "trainwatch_watcher_event_id_conflicts_total") == 0
    assert _sequences(job_events, uids["quiet"]) == [0, 1]
    assert_ids_name_one_event(job_events)


async def test_a_checkpoint_set_right_by_the_stream_for_a_relist_is_saved_whole(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
    redis: Redis,
) -> None:
    """The same for a checkpoint restored from an older snapshot whose resourceVersion is then
    compacted: the relist diffs against the stream's records, and the checkpoint must keep them."""
    batch_job = kubesim.kinds.BATCH_JOB
    alpha = await sim.add_cluster("alpha", kinds=[batch_job])
    await registry.add(alpha)
    await watcher.start()
    await watcher.wait_synced("alpha", informers=1)
    uids = {
        name: alpha.store.create(
            batch_job, {"metadata": {"name": name, "namespace": "default"}, "spec": {"parallelism": 1}}
        )["metadata"]["uid"]
        for name in ("busy", "quiet")
    }
    await eventually(
        lambda: all(_phases(job_events, uid) == ["Pending"] for uid in uids.values()), message="created"
    )
    await watcher.stop()
    snapshot = await redis.dump(state_key("alpha", "job"))
    assert snapshot is not None
    await watcher.start()
    alpha.store.patch_status(batch_job, "default", "quiet", {"active": 1, "ready": 1, "startTime": _T0})
    await eventually(lambda: _phases(job_events, uids["quiet"]) == ["Pending", "Running"], message="quiet")

    await watcher.kill()
    await redis.restore(state_key("alpha", "job"), 0, snapshot, replace=True)
    alpha.store.patch_status(batch_job, "default", "busy", {"active": 1, "ready": 1, "startTime": _T0})
    alpha.compact()  # the snapshot's resourceVersion is gone: the watcher relists
    await watcher.start()
    await eventually(lambda: _phases(job_events, uids["busy"]) == ["Pending", "Running"], message="busy on")
    await watcher.stop()

    checkpoint = await StateStore(redis).load("alpha", "job")
    assert {uid: record.slot.sequence for uid, record in checkpoint.records.items()} == {
        uids["busy"]: 1,
        uids["quiet"]: 1,
    }, "the checkpoint kept a record older than the stream's"
    assert_ids_name_one_event(job_events)


async def test_a_deletion_only_a_relist_could_see_says_its_final_state_was_not_seen(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
) -> None:
    """Chaos seed 41: a job succeeded and was deleted while its cluster's history was compacted
    (410), so the relist found it gone and its Succeeded could not be seen by anyone. The
    deletion then said "deleted, Running" like any other: consumers could not tell a job deleted
    while Running from one whose last states were never observed."""
    batch_job = kubesim.kinds.BATCH_JOB
    alpha = await sim.add_cluster("alpha", kinds=[batch_job])
    await registry.add(alpha)
    await watcher.start()
    await watcher.wait_synced("alpha", informers=1)
    for name in ("seen-going", "unseen-going"):
        alpha.store.create(batch_job, {"metadata": {"name": name, "namespace": "default"}, "spec": {}})
    await eventually(lambda: len(job_events.events) == 2, message="both created")
    alpha.store.delete(batch_job, "default", "seen-going")
    await eventually(lambda: len(job_events.events) == 3, message="the watched deletion")
    await watcher.kill()
    alpha.store.patch_status(
        batch_job,
        "default",
        "unseen-going",
        {"conditions": [_condition("SuccessCriteriaMet"), _condition("Complete")], "succeeded": 1},
    )
    alpha.store.delete(batch_job, "default", "unseen-going")
    alpha.compact()  # the Succeeded and the deletion are gone from the history: only a relist is left
    await watcher.start()
    await eventually(lambda: len(job_events.events) == 4, message="the deletion the relist found")
    watched, relisted = (e for e in job_events.events if e.change == "deleted")
    assert watched.job.name == "seen-going"
    assert watched.source != transitions.DELETED_UNSEEN_SOURCE
    assert relisted.job.name == "unseen-going"
    assert relisted.phase == Phase.PENDING  # the last state anyone saw, not a guess
    assert relisted.source == transitions.DELETED_UNSEEN_SOURCE == "relist:absent"


@pytest.mark.parametrize("left", ["whole", "flushed", "records_without_version"])
async def test_a_checkpoint_without_a_resource_version_resumes_from_the_streams_and_misses_no_job(
    left: str,
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
    redis: Redis,
) -> None:
    """Chaos seed 41, Redis FLUSHALL (9 transitions lost): a start took its records from the stream
    and saved them, but not the resourceVersion they are valid at, and was stopped (the leases
    flapped) before its first commit. The next start found records that agree with the stream and
    no version, so it relisted: jobs created and deleted meanwhile were never reported, and jobs
    that ended and were deleted got "deleted" in their last seen phase."""
    batch_job = kubesim.kinds.BATCH_JOB
    alpha = await sim.add_cluster("alpha", kinds=[batch_job])
    await registry.add(alpha)
    await watcher.start()
    await watcher.wait_synced("alpha", informers=1)
    alpha.store.create(batch_job, {"metadata": {"name": "kept", "namespace": "default"}, "spec": {}})
    await eventually(lambda: len(job_events.events) == 1, message="kept created")
    await watcher.stop()
    if left == "records_without_version":  # what that stopped start left behind
        await redis.hdel(state_key("alpha", "job"), "rv:*", "js:*")
    elif left == "flushed":
        await redis.delete(state_key("alpha", "job"))
    alpha.store.create(batch_job, {"metadata": {"name": "brief", "namespace": "default"}, "spec": {}})
    alpha.store.delete(batch_job, "default", "brief")
    await watcher.start()
    await eventually(
        lambda: [e.change for e in job_events.events if e.job.name == "brief"] == ["created", "deleted"],
        message="the job created and deleted while nobody watched",
        timeout=15,
    )
