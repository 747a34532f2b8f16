"""Scenarios: realistic lifecycles per kind, and a ground truth that matches §3 of the reference."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import orjson
import pytest
from reference_mapping import fold

import kubesim
from trainwatch_common.testing import eventually


def _history(cluster: kubesim.Cluster, since: int) -> list[dict[str, Any]]:
    return [
        {"type": e.type, "object": orjson.loads(e.obj.data)}
        for e in cluster.store.history_after(since, 1_000_000)
    ]


def _truth_rows(truth: list[kubesim.TruthEntry]) -> list[tuple[str, str, str, str | None, bool]]:
    return [(e.uid, e.change, e.phase, e.sub_phase, e.terminal) for e in truth]


def _check_rules(truth: list[kubesim.TruthEntry]) -> None:
    by_uid: dict[str, list[kubesim.TruthEntry]] = {}
    for e in truth:
        by_uid.setdefault(e.uid, []).append(e)
        assert e.phase in kubesim.PHASES
    for entries in by_uid.values():
        assert entries[0].change == "created"
        assert all(e.change != "created" for e in entries[1:])
        for a, b in itertools.pairwise(entries):
            if b.change == "transition":
                assert a.state != b.state  # a transition is a change of (phase, sub_phase, terminal)
            assert int(a.resource_version) < int(b.resource_version)
        if entries[-1].change == "deleted":
            assert entries[-1].state == entries[-2].state if len(entries) > 1 else True


KINDS = [*kubesim.ALL_KINDS, kubesim.MPIJOB_V1]


@pytest.mark.parametrize("kind", KINDS, ids=str)
@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
async def test_full_lifecycle_matches_reference_mapping(
    sim: kubesim.Simulator, kind: kubesim.KindSpec, outcome: Any
) -> None:
    kinds = kubesim.ALL_KINDS_MPI_V1 if kind is kubesim.MPIJOB_V1 else kubesim.ALL_KINDS
    cluster = await sim.add_cluster("c", tls=False, kinds=kinds, seed=5, history_limit=100_000)
    driver = kubesim.ScenarioDriver(cluster, seed=5, rate=None)
    start = cluster.store.resource_version
    uid = await driver.run_lifecycle(kind, outcome=outcome, restarts=2, suspend=True, delete=True)
    truth = driver.truth
    _check_rules(truth)
    phases = [e.phase for e in truth]
    assert {"Pending", "Running", "Suspended"} <= set(phases)
    if kind is not kubesim.TRAINJOB or cluster.store.serves(kubesim.JOBSET):
        assert phases.count("Restarting") >= 2  # Volcano also resumes through Restarting
    final = [e for e in truth if e.change != "deleted"][-1]
    assert final.terminal
    assert final.phase == ("Succeeded" if outcome == "succeeded" else "Failed")
    assert truth[-1].change == "deleted"
    assert all(e.uid == uid for e in truth)
    assert all(e.kind == kind.kind and e.api_version == kind.api_version for e in truth)
    assert fold(_history(cluster, start)) == _truth_rows(truth)


async def test_delete_while_running_and_trainjob_without_jobset(sim: kubesim.Simulator) -> None:
    kinds = [k for k in kubesim.ALL_KINDS if k is not kubesim.JOBSET]
    cluster = await sim.add_cluster("c", tls=False, kinds=kinds, history_limit=100_000)
    driver = kubesim.ScenarioDriver(cluster, seed=1, rate=None)
    start = cluster.store.resource_version
    await driver.run_lifecycle("TrainJob", restarts=2, suspend=False)
    assert "Restarting" not in [e.phase for e in driver.truth]  # invisible without the JobSet
    await driver.run_lifecycle("PyTorchJob", delete_while_running=True)
    assert [e.change for e in driver.truth][-1] == "deleted"
    assert driver.truth[-1].phase == "Running"
    assert fold(_history(cluster, start)) == _truth_rows(driver.truth)


async def test_children_are_owned_and_not_in_the_truth(sim: kubesim.Simulator) -> None:
    cluster = await sim.add_cluster("c", tls=False)
    driver = kubesim.ScenarioDriver(cluster, seed=1, rate=None)
    await driver.run_lifecycle("MPIJob", delete=False)
    await driver.run_lifecycle("TrainJob", delete=False)
    launcher = cluster.store.list_objects("Job")[0]
    assert launcher["metadata"]["ownerReferences"][0]["kind"] == "MPIJob"
    assert cluster.store.list_objects("JobSet")[0]["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    assert {e.kind for e in driver.truth} == {"MPIJob", "TrainJob"}


async def test_demo_is_seeded_and_consistent(sim: kubesim.Simulator) -> None:
    runs = []
    for name in ("one", "two"):
        cluster = await sim.add_cluster(name, tls=False, seed=9, history_limit=100_000)
        driver = kubesim.ScenarioDriver(cluster, seed=9, rate=None)
        start = cluster.store.resource_version
        truth = await driver.run_demo(jobs=60, concurrency=6)
        _check_rules(truth)
        assert fold(_history(cluster, start)) == _truth_rows(truth)
        runs.append(
            [
                (
                    e.kind,
                    e.namespace,
                    e.name,
                    e.uid,
                    e.change,
                    e.phase,
                    e.sub_phase,
                    e.terminal,
                    e.resource_version,
                )
                for e in truth
            ]
        )
        kinds_seen = {e.kind for e in truth}
        assert len(kinds_seen) >= 6
        changes = {e.change for e in truth}
        assert changes == {"created", "transition", "deleted"}
    assert runs[0] == runs[1]


async def test_rate_paces_the_writes(plain: kubesim.Cluster) -> None:
    driver = kubesim.ScenarioDriver(plain, seed=1, rate=200)
    t0 = time.monotonic()
    await driver.run_lifecycle("JAXJob", restarts=0, suspend=False)
    writes = len(driver.log)  # at least this many paced writes happened
    assert time.monotonic() - t0 >= (writes - 1) / 200


async def test_hold_freezes_every_write_until_release(plain: kubesim.Cluster) -> None:
    driver = kubesim.ScenarioDriver(plain, seed=5, rate=200)
    task = asyncio.create_task(driver.run_demo(jobs=4, concurrency=2), name="test held demo")
    try:
        await eventually(lambda: len(driver.log) >= 3, timeout=5, message="the demo writing")
        driver.hold()
        assert driver.held
        rv, entries = plain.store.resource_version, len(driver.log)
        await asyncio.sleep(0.2)  # the span checked: 40 paced writes would have happened in it
        assert (plain.store.resource_version, len(driver.log)) == (rv, entries)
        driver.release()
        await asyncio.wait_for(task, timeout=10)
    finally:
        task.cancel()
    _check_rules(driver.truth)
    assert sum(1 for e in driver.truth if e.change == "created") == 4


async def test_truth_matches_what_a_watch_sees(plain: kubesim.Cluster, make_client: Any) -> None:
    client = make_client(plain)
    start = plain.store.resource_version
    driver = kubesim.ScenarioDriver(plain, seed=3, rate=None)
    await driver.run_lifecycle("RayJob", outcome="failed", restarts=1)
    events = await client.watch(
        "/apis/ray.io/v1/rayjobs", resourceVersion=str(start), max_events=plain.store.resource_version - start
    )
    assert fold(events) == _truth_rows(driver.truth)


def test_truth_log_rules() -> None:
    log = kubesim.TruthLog()
    obj = {
        "apiVersion": "v",
        "kind": "K",
        "metadata": {"uid": "u", "name": "n", "namespace": "d", "resourceVersion": "1"},
    }
    log.created("c", obj, kubesim.NormState("Pending", "Created"))
    assert log.observe("c", obj, kubesim.NormState("Pending", "Created")) is None
    assert log.observe("c", obj, kubesim.NormState("Pending", "Scheduling")) is not None
    assert log.observe("c", obj, kubesim.NormState("Succeeded", "Finishing")) is not None
    assert log.observe("c", obj, kubesim.NormState("Succeeded", terminal=True)) is not None
    log.deleted("c", obj)
    assert [e.change for e in log] == ["created", "transition", "transition", "transition", "deleted"]
    assert log.entries[-1].terminal
    assert log.final_states()["u"].phase == "Succeeded"
    with pytest.raises(ValueError, match="unknown phase"):
        kubesim.NormState("Queued")
