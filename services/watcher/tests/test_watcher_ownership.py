"""ClusterOwnership: the registry's desired set meets the leases this replica holds.

The supervisor and the claim loop are small recording stand-ins here (they are our own classes,
tested on their own); what is tested is the decisions and their order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from trainwatch_common.events.clusters import ClusterSpec
from trainwatch_common.testing import eventually
from trainwatch_watcher.ownership import ClusterOwnership


def spec(cluster_id: str, revision: int = 1, fingerprint: str = "f1") -> ClusterSpec:
    return ClusterSpec(id=cluster_id, name=cluster_id, revision=revision, connection_fingerprint=fingerprint)


class RecordingSupervisor:
    def __init__(self) -> None:
        self.running: dict[str, tuple[ClusterSpec, int]] = {}
        self.calls: list[tuple[str, str]] = []
        self.drain_gate: asyncio.Event | None = None  # set: drains wait for it
        self.draining: set[str] = set()
        self.start_gate: asyncio.Event | None = None

    def cluster_ids(self) -> set[str]:
        return set(self.running)

    async def start_cluster(self, spec: ClusterSpec, *, epoch: int = 0) -> None:
        self.calls.append(("start", spec.id))
        if self.start_gate is not None:
            await self.start_gate.wait()
        self.running[spec.id] = (spec, epoch)

    async def drain_cluster(self, cluster_id: str, *, timeout: float) -> bool:
        self.calls.append(("drain", cluster_id))
        self.draining.add(cluster_id)
        if self.drain_gate is not None:
            await self.drain_gate.wait()
        self.draining.discard(cluster_id)
        return True

    async def stop_cluster(self, cluster_id: str, *, forget_state: bool = False) -> None:
        self.calls.append(("forget" if forget_state else "stop", cluster_id))
        self.running.pop(cluster_id, None)


class RecordingClaims:
    stop_budget = 3.0

    def __init__(self) -> None:
        self.leases: dict[str, int] = {}
        self.desired: set[str] | None = None
        self.unproven: set[str] = set()  # held, but past the deadline: no longer proven

    def owned(self) -> dict[str, int]:
        return dict(self.leases)

    def holds(self, cluster_id: str, epoch: int | None = None) -> bool:
        held = cluster_id in self.leases and (epoch is None or self.leases[cluster_id] == epoch)
        return held and cluster_id not in self.unproven

    def set_desired(self, cluster_ids: Iterable[str]) -> None:
        self.desired = set(cluster_ids)


def make() -> tuple[ClusterOwnership, RecordingSupervisor, RecordingClaims, list[int]]:
    supervisor, claims, gauge = RecordingSupervisor(), RecordingClaims(), []
    ownership = ClusterOwnership(supervisor, on_change=gauge.append)
    ownership.bind(claims)
    return ownership, supervisor, claims, gauge


async def test_a_desired_cluster_starts_only_once_its_lease_is_held() -> None:
    ownership, supervisor, claims, gauge = make()
    await ownership.apply({"a": spec("a"), "b": spec("b")})
    assert ownership.applied.is_set()
    assert claims.desired == {"a", "b"}
    assert supervisor.calls == []  # no lease yet: nothing runs

    claims.leases["a"] = 7
    await ownership.start_owned("a", 7)
    assert supervisor.running == {"a": (spec("a"), 7)}
    assert gauge[-1] == 1


async def test_a_lease_acquired_for_a_cluster_removed_meanwhile_starts_nothing() -> None:
    ownership, supervisor, claims, _ = make()
    await ownership.apply({"a": spec("a")})
    await ownership.apply({})
    await ownership.start_owned("a", 1)
    assert supervisor.calls == []
    assert claims.desired == set()


async def test_a_removed_cluster_is_stopped_and_forgotten_and_an_owned_one_gets_its_new_spec() -> None:
    ownership, supervisor, claims, gauge = make()
    await ownership.apply({"a": spec("a"), "b": spec("b")})
    for cluster_id, epoch in (("a", 1), ("b", 2)):
        claims.leases[cluster_id] = epoch
        await ownership.start_owned(cluster_id, epoch)
    supervisor.calls.clear()

    await ownership.apply({"b": spec("b", revision=2, fingerprint="f2")})
    assert supervisor.calls == [("forget", "a"), ("start", "b")]
    assert supervisor.running == {"b": (spec("b", revision=2, fingerprint="f2"), 2)}
    assert gauge[-1] == 1


async def test_an_owned_cluster_whose_lease_is_no_longer_held_is_not_restarted_by_apply() -> None:
    ownership, supervisor, claims, _ = make()
    await ownership.apply({"a": spec("a")})
    claims.leases["a"] = 1
    await ownership.start_owned("a", 1)
    supervisor.calls.clear()
    claims.unproven.add("a")  # Redis is slow: the claim loop is about to stop it

    await ownership.apply({"a": spec("a", revision=2)})
    assert supervisor.calls == []


async def test_a_graceful_stop_drains_first_and_an_ungraceful_one_does_not() -> None:
    ownership, supervisor, claims, _ = make()
    await ownership.apply({"a": spec("a"), "b": spec("b")})
    for cluster_id in ("a", "b"):
        claims.leases[cluster_id] = 1
        await ownership.start_owned(cluster_id, 1)
    supervisor.calls.clear()

    await ownership.stop_owned("a", "handoff")
    await ownership.stop_owned("b", "deadline")
    assert supervisor.calls == [("drain", "a"), ("stop", "a"), ("stop", "b")]
    assert supervisor.running == {}


async def test_drains_of_many_clusters_overlap() -> None:
    ownership, supervisor, claims, _ = make()
    await ownership.apply({"a": spec("a"), "b": spec("b")})
    for cluster_id in ("a", "b"):
        claims.leases[cluster_id] = 1
        await ownership.start_owned(cluster_id, 1)
    supervisor.drain_gate = asyncio.Event()

    stops = [asyncio.create_task(ownership.stop_owned(c, "shutdown"), name=f"stop {c}") for c in ("a", "b")]
    try:
        # Both drain at once: draining under the lock would let only one in.
        await eventually(lambda: supervisor.draining == {"a", "b"}, message="both clusters draining")
    finally:
        supervisor.drain_gate.set()
        await asyncio.gather(*stops)
    assert supervisor.running == {}


async def test_a_stop_waits_for_a_change_in_progress_so_nothing_runs_without_its_lease() -> None:
    ownership, supervisor, claims, _ = make()
    await ownership.apply({"a": spec("a")})
    claims.leases["a"] = 1
    await ownership.start_owned("a", 1)
    supervisor.start_gate = asyncio.Event()

    # New credentials for "a": apply restarts it, slowly. Meanwhile its lease lapses.
    update = asyncio.create_task(
        ownership.apply({"a": spec("a", revision=2, fingerprint="f2")}), name="apply"
    )
    await eventually(lambda: supervisor.calls.count(("start", "a")) == 2, message="restart under way")
    stop = asyncio.create_task(ownership.stop_owned("a", "deadline"), name="stop a")
    supervisor.start_gate.set()
    await asyncio.gather(update, stop)
    del claims.leases["a"]  # the claim loop forgets the lease once stop_owned returned
    # The stop came after the restart, not in its middle: "a" does not run without a lease.
    assert supervisor.calls[-1] == ("stop", "a")
    assert supervisor.running == {}
