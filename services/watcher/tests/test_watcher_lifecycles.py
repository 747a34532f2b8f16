"""Every kind's lifecycle: the transitions the watcher publishes equal kubesim's ground truth."""

from __future__ import annotations

import pytest
from watcher_harness import FakeRegistry, JobEvents, RunningWatcher, truth_by_uid, wait_for_truth

import kubesim
from trainwatch_common.testing import eventually
from trainwatch_watcher.state import state_key

KINDS = list(kubesim.CATALOG)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: f"{k.kind}-{k.group or 'core'}-{k.version}")
async def test_lifecycle_transitions_equal_ground_truth(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
    redis: object,
    kind: kubesim.KindSpec,
) -> None:
    served = kubesim.ALL_KINDS_MPI_V1 if kind is kubesim.MPIJOB_V1 else kubesim.ALL_KINDS
    cluster = await sim.add_cluster("alpha", kinds=served)
    await registry.add(cluster)
    await watcher.start()
    await watcher.wait_synced("alpha", informers=len(served))

    driver = kubesim.ScenarioDriver(cluster, seed=3, rate=2000)
    await driver.run_lifecycle(kind, outcome="succeeded", restarts=2, suspend=True, delete=True)
    await driver.run_lifecycle(
        kind, outcome="failed", restarts=1, suspend=False, delete=False, namespace="team-a"
    )
    await driver.run_lifecycle(
        kind, outcome="succeeded", restarts=0, suspend=False, delete_while_running=True
    )
    expected = truth_by_uid(driver.truth)
    assert expected, "the scenario wrote nothing"

    await wait_for_truth(job_events, expected)
    # Sequences are 0, 1, 2... per uid, and ids are the deterministic ones.
    for uid, events in _events_by_uid(job_events).items():
        assert [e.sequence for e in events] == list(range(len(events)))
        assert all(e.event_id == f"job.alpha.{uid}.{e.sequence}" for e in events)
        assert all(e.job.kind_key for e in events)
    # The checkpoint holds exactly the jobs that still exist.
    live = {uid for uid, entries in expected.items() if entries[-1][0] != "deleted"}
    key = state_key("alpha", _kind_key(kind))

    async def checkpointed() -> bool:
        fields = await redis.hkeys(key)  # type: ignore[attr-defined]
        return {f.decode()[2:] for f in fields if f.startswith(b"u:")} == live

    await eventually(checkpointed, message="checkpoint matches the live jobs")


def _events_by_uid(job_events: JobEvents) -> dict[str, list]:  # type: ignore[type-arg]
    out: dict[str, list] = {}  # type: ignore[type-arg]
    for e in job_events.events:
        out.setdefault(e.job.uid, []).append(e)
    return out


def _kind_key(kind: kubesim.KindSpec) -> str:
    from trainwatch_common.kinds import kind_for

    entry = kind_for(kind.api_version, kind.kind)
    assert entry is not None
    return entry.key
