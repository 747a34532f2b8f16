"""Pure parts, no network: transitions, the task map, checkpoint encoding, the desired cluster set,
informer specs from watch options, backoff."""

from __future__ import annotations

import asyncio
import random

import pytest

from trainwatch_common.events.clusters import ClusterSpec, WatchOptions
from trainwatch_common.events.jobs import Phase, SubPhase
from trainwatch_common.kinds import BATCH_JOB, JOBSET, PYTORCH_JOB, TRAIN_JOB
from trainwatch_watcher import transitions
from trainwatch_watcher.cluster_feed import DesiredClusters
from trainwatch_watcher.cluster_worker import informer_specs
from trainwatch_watcher.kinds.model import NormalizedStatus
from trainwatch_watcher.kube.watching import Backoff
from trainwatch_watcher.records import JobRecord, StateWrite, decode_record, encode_record, trim
from trainwatch_watcher.settings import WatchTimings
from trainwatch_watcher.taskmap import TaskMap

RUNNING = NormalizedStatus(phase=Phase.RUNNING, source="condition:Running", message="m" * 5000)
PENDING = NormalizedStatus(phase=Phase.PENDING, sub_phase=SubPhase.CREATED)
SUCCEEDED = NormalizedStatus(phase=Phase.SUCCEEDED, terminal=True, reason="Done")


# -- transitions -------------------------------------------------------------------------------
def test_first_sight_is_created_with_sequence_zero() -> None:
    emission = transitions.observe(None, PENDING, namespace="ns", name="a")
    assert emission is not None
    assert (emission.change, emission.sequence, emission.previous_phase) == ("created", 0, None)
    assert emission.slot.key == (Phase.PENDING, SubPhase.CREATED, False)


def test_same_phase_emits_nothing_and_a_change_is_the_next_sequence() -> None:
    created = transitions.observe(None, PENDING, namespace="ns", name="a")
    assert created is not None
    assert transitions.observe(created.slot, PENDING, namespace="ns", name="a") is None
    moved = transitions.observe(created.slot, RUNNING, namespace="ns", name="a")
    assert moved is not None
    assert (moved.change, moved.sequence, moved.previous_phase) == ("transition", 1, Phase.PENDING)
    # sub_phase and terminal count as changes too
    finishing = NormalizedStatus(phase=Phase.SUCCEEDED, sub_phase=SubPhase.FINISHING)
    step = transitions.observe(moved.slot, finishing, namespace="ns", name="a")
    assert step is not None
    done = transitions.observe(
        step.slot, NormalizedStatus(phase=Phase.SUCCEEDED, terminal=True), namespace="ns", name="a"
    )
    assert done is not None and done.sequence == 3  # noqa: PT018


def test_deleted_keeps_the_last_emitted_state_and_needs_a_slot() -> None:
    assert transitions.deleted(None, RUNNING) is None
    created = transitions.observe(None, SUCCEEDED, namespace="ns", name="a")
    assert created is not None
    gone = transitions.deleted(created.slot, RUNNING)
    assert gone is not None
    assert (gone.change, gone.sequence) == ("deleted", 1)
    assert gone.slot.key == (Phase.SUCCEEDED, None, True)
    assert transitions.deleted(created.slot, None) is not None


# -- checkpoint encoding -----------------------------------------------------------------------
def test_record_round_trip_keeps_what_normalization_needs() -> None:
    status = NormalizedStatus(
        phase=Phase.RESTARTING,
        source="heuristic:status.failed",
        restart_count=3,
        restart_counter=5,
        queue="q",
        message="long " * 1000,
        reason="r",
    )
    emission = transitions.observe(None, status, namespace="ns", name="a")
    assert emission is not None
    record = JobRecord(slot=emission.slot, last=trim(status))
    decoded = decode_record(encode_record(record))
    assert decoded == record
    assert decoded.last.message is None and decoded.last.restart_counter == 5  # noqa: PT018
    assert len(encode_record(record)) < 400


def test_state_writes_merge_in_order() -> None:
    emission = transitions.observe(None, PENDING, namespace="ns", name="a")
    assert emission is not None
    record = JobRecord(emission.slot, PENDING)
    first = StateWrite(put={"u1": record}, resource_versions={"*": "5"})
    first.merge(StateWrite(delete={"u1"}, resource_versions={"*": "7"}))
    assert first.put == {} and first.delete == {"u1"} and first.resource_versions == {"*": "7"}  # noqa: PT018
    first.merge(StateWrite(put={"u1": record}))
    assert first.put == {"u1": record} and first.delete == set()  # noqa: PT018


# -- the task map ------------------------------------------------------------------------------
async def test_reconcile_stops_first_then_starts_and_restarts_changed_specs() -> None:
    log: list[str] = []
    started = asyncio.Event()

    async def run(key: str, spec: int) -> None:
        log.append(f"start {key}:{spec}")
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            log.append(f"stop {key}:{spec}")

    tasks: TaskMap[str, int] = TaskMap(run, lambda key: f"unit {key}")
    await tasks.reconcile({"a": 1, "b": 1})
    await asyncio.sleep(0)
    await tasks.reconcile({"b": 2, "c": 1})
    await asyncio.sleep(0)
    assert tasks.keys() == {"b", "c"}
    assert log.index("stop a:1") < log.index("start c:1")
    assert log.index("stop b:1") < log.index("start b:2")
    await tasks.stop_all()
    assert len(tasks) == 0


async def test_a_crashed_task_is_dropped_so_reconcile_restarts_it() -> None:
    runs = 0

    async def run(key: str, spec: int) -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise RuntimeError("boom")
        await asyncio.Event().wait()

    tasks: TaskMap[str, int] = TaskMap(run, lambda key: f"unit {key}")
    await tasks.reconcile({"a": 1})
    for _ in range(3):
        await asyncio.sleep(0)
    assert tasks.keys() == set()
    await tasks.reconcile({"a": 1})
    await asyncio.sleep(0)
    assert tasks.keys() == {"a"} and runs == 2  # noqa: PT018
    await tasks.stop_all()


# -- the desired set ---------------------------------------------------------------------------
def _spec(cluster_id: str, revision: int, fp: str = "sha256:1") -> ClusterSpec:
    return ClusterSpec(id=cluster_id, name=cluster_id, revision=revision, connection_fingerprint=fp)


def test_desired_clusters_go_by_revision() -> None:
    state = DesiredClusters()
    assert state.put(_spec("a", 2))
    assert not state.put(_spec("a", 1))  # stale
    assert state.remove("a", 3)
    assert not state.put(_spec("a", 2))  # a late "added" cannot resurrect a removed cluster
    assert state.put(_spec("a", 4))
    assert state.replace_from_snapshot({"b": _spec("b", 1)})
    assert set(state.desired) == {"b"}


# -- informer specs ----------------------------------------------------------------------------
def test_informer_specs_follow_watch_options() -> None:
    served = {"job": BATCH_JOB, "pytorchjob": PYTORCH_JOB, "trainjob": TRAIN_JOB, "jobset": JOBSET}
    spec = ClusterSpec(id="c", name="c", revision=1, connection_fingerprint="x")
    everything = informer_specs(spec, served, epoch=3, owner="w")
    assert set(everything) == {("job", "*"), ("pytorchjob", "*"), ("trainjob", "*"), ("jobset", "*")}
    assert everything[("trainjob", "*")].companion is JOBSET
    assert everything[("job", "*")].epoch == 3

    options = WatchOptions(
        kinds=["pytorchjob", "job"], include_namespaces=["a", "b"], exclude_namespaces=["b"]
    )
    scoped = informer_specs(spec.model_copy(update={"watch": options}), served, epoch=0, owner="w")
    assert set(scoped) == {("job", "a"), ("pytorchjob", "a")}
    # Adding a kind leaves the other specs equal, so their informers keep running.
    more = options.model_copy(update={"kinds": ["pytorchjob", "job", "trainjob"]})
    wider = informer_specs(spec.model_copy(update={"watch": more}), served, epoch=0, owner="w")
    assert wider[("job", "a")] == scoped[("job", "a")]


# -- backoff -----------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_backoff_grows_to_the_cap_with_jitter_and_resets(seed: int) -> None:
    backoff = Backoff(WatchTimings(backoff_initial=1.0, backoff_max=30.0), rng=random.Random(seed))
    delays = [backoff.next_delay() for _ in range(8)]
    assert 0.5 <= delays[0] <= 1.0
    assert all(15.0 <= d <= 30.0 for d in delays[5:])
    backoff.reset()
    assert backoff.next_delay() <= 1.0
