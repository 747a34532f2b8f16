"""Writes against real PostgreSQL and SQLite: idempotency, ordering, deletion, retention, diagnosis."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from persister_factories import BASE_TIME, make_event, oom_diagnosis
from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_common import JobStatusEvent, Phase
from trainwatch_common.events.diagnosis import Blame, Diagnosis, DiagnosisCategory, JobResources
from trainwatch_persister import batching, queries, repository, retention
from trainwatch_persister.filters import JobFilters
from trainwatch_persister.tables import job_counts, job_transitions, jobs


async def write(engine: AsyncEngine, *events: JobStatusEvent) -> repository.WriteResult:
    async with engine.begin() as conn:
        return await repository.write_events(conn, list(events))


async def job(engine: AsyncEngine, uid: str = "uid-1", cluster: str = "alpha") -> dict[str, Any]:
    async with engine.connect() as conn:
        row = (
            await conn.execute(sa.select(jobs).where(jobs.c.cluster_id == cluster, jobs.c.uid == uid))
        ).mappings().one()  # fmt: skip
    return dict(row)


async def history(engine: AsyncEngine) -> list[tuple[str, int]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(job_transitions.c.event_id, job_transitions.c.epoch).order_by(
                job_transitions.c.event_id
            )
        )
    return [(r.event_id, r.epoch) for r in rows]


async def test_redelivery_and_duplicate_ids_are_idempotent(engine: AsyncEngine) -> None:
    events = [make_event(sequence=0), make_event(sequence=1, phase=Phase.RUNNING)]
    first = await write(engine, *events)
    assert (first.new_transitions, first.jobs_changed) == (2, 1)
    before = await job(engine)

    again = await write(engine, *events)  # a redelivered batch
    dup_in_batch = await write(engine, events[1], events[1], events[0])  # duplicates inside one batch
    assert (again.new_transitions, again.jobs_changed) == (0, 0)
    assert (dup_in_batch.new_transitions, dup_in_batch.jobs_changed) == (0, 0)
    assert await job(engine) == before
    assert [eid for eid, _ in await history(engine)] == ["job.alpha.uid-1.0", "job.alpha.uid-1.1"]


async def test_out_of_order_events_never_move_the_state_backwards(engine: AsyncEngine) -> None:
    created = make_event(sequence=0)
    running = make_event(sequence=1, phase=Phase.RUNNING)
    succeeded = make_event(sequence=2, phase=Phase.SUCCEEDED)
    await write(engine, succeeded)
    await write(engine, running)  # late
    await write(engine, created)  # later still
    row = await job(engine)
    assert (row["phase"], row["sequence"], row["terminal"]) == ("Succeeded", 2, True)
    assert len(await history(engine)) == 3  # all kept in the history

    # The same inside one batch, in any order.
    await write(
        engine, make_event(uid="uid-2", sequence=2, phase=Phase.FAILED), make_event(uid="uid-2", sequence=1)
    )
    assert (await job(engine, "uid-2"))["phase"] == "Failed"


async def test_stale_epoch_never_overwrites_the_same_sequence(engine: AsyncEngine) -> None:
    # The new owner (epoch 5) reported the 3rd transition; the fenced-off owner's (epoch 4) arrives late,
    # even with a higher resourceVersion.
    await write(engine, make_event(sequence=3, epoch=5, rv="500", phase=Phase.RUNNING))
    stale = make_event(sequence=3, epoch=4, rv="900", phase=Phase.FAILED, event_id="job.alpha.uid-1.3-stale")
    result = await write(engine, stale)
    row = await job(engine)
    assert (row["phase"], row["epoch"], row["resource_version"]) == ("Running", 5, "500")
    assert result.jobs_changed == 0
    assert result.new_transitions == 1  # a new id is still history

    # The other way round: the higher epoch replaces the lower one at the same sequence.
    await write(engine, make_event(uid="uid-2", sequence=3, epoch=4, rv="900", phase=Phase.FAILED))
    await write(engine, make_event(uid="uid-2", sequence=3, epoch=5, rv="500", phase=Phase.RUNNING))
    assert (await job(engine, "uid-2"))["epoch"] == 5


async def test_a_new_owner_continues_the_sequence_even_with_a_lower_epoch(engine: AsyncEngine) -> None:
    """Sequence is compared first: an epoch counter reset must not freeze a job."""
    await write(engine, make_event(sequence=4, epoch=9, phase=Phase.RUNNING))
    await write(engine, make_event(sequence=5, epoch=1, phase=Phase.SUCCEEDED))
    assert (await job(engine))["phase"] == "Succeeded"


async def test_resource_version_orders_reports_of_the_same_owner(engine: AsyncEngine) -> None:
    await write(engine, make_event(sequence=2, rv="1000", phase=Phase.RUNNING))
    # "999" < "1000" as integers although not as strings.
    await write(engine, make_event(sequence=2, rv="999", phase=Phase.PENDING, event_id="x-999"))
    assert (await job(engine))["resource_version"] == "1000"
    await write(engine, make_event(sequence=2, rv="1001", phase=Phase.RESTARTING, event_id="x-1001"))
    assert (await job(engine))["phase"] == "Restarting"


async def test_deleted_marks_the_job_and_keeps_the_row(engine: AsyncEngine) -> None:
    await write(engine, make_event(sequence=0), make_event(sequence=1, phase=Phase.SUCCEEDED))
    gone_at = BASE_TIME + timedelta(hours=1)
    await write(engine, make_event(sequence=2, phase=Phase.SUCCEEDED, change="deleted", observed_at=gone_at))
    row = await job(engine)
    assert row["deleted_at"] == gone_at
    assert row["phase"] == "Succeeded"
    # A late transition does not resurrect it.
    await write(engine, make_event(sequence=1, phase=Phase.RUNNING))
    assert (await job(engine))["deleted_at"] == gone_at


async def test_created_at_keeps_the_earliest_known(engine: AsyncEngine) -> None:
    first = make_event(sequence=0).model_copy(update={"created_at": None})
    await write(engine, first)
    assert (await job(engine))["created_at"] == first.observed_at  # first observation stands in
    await write(engine, make_event(sequence=1, created_at=BASE_TIME - timedelta(days=1)))
    assert (await job(engine))["created_at"] == BASE_TIME - timedelta(days=1)


async def test_large_batches_are_split_under_the_parameter_limit(engine: AsyncEngine) -> None:
    events = [make_event(uid=f"u{i}", sequence=s) for i in range(1500) for s in (0, 1)]
    result = await write(engine, *events)
    assert (result.new_transitions, result.jobs_changed) == (3000, 1500)


async def test_retention_prunes_old_history_and_old_deleted_jobs(engine: AsyncEngine) -> None:
    now = BASE_TIME + timedelta(days=100)
    old, recent = BASE_TIME, now - timedelta(days=1)
    await write(
        engine,
        make_event(uid="live", sequence=0, observed_at=old),
        make_event(uid="live", sequence=1, observed_at=recent, phase=Phase.RUNNING),
        make_event(uid="gone", sequence=0, observed_at=old),
        make_event(uid="gone", sequence=1, observed_at=old + timedelta(hours=1), change="deleted"),
        make_event(uid="gone-lately", sequence=0, observed_at=old),
        make_event(uid="gone-lately", sequence=1, observed_at=recent, change="deleted"),
    )
    await retention.prune_once(engine, retention_days=30, now=now)
    assert [eid for eid, _ in await history(engine)] == ["job.alpha.gone-lately.1", "job.alpha.live.1"]
    async with engine.connect() as conn:
        left = sorted((await conn.execute(sa.select(jobs.c.uid))).scalars())
    assert left == ["gone-lately", "live"]

    await retention.prune_once(engine, retention_days=0, now=now + timedelta(days=1000))  # 0 = keep forever
    assert len(await history(engine)) == 2


async def test_job_counts_stay_equal_to_counting_the_jobs(engine: AsyncEngine) -> None:
    """The trigger-kept totals against GROUP BY, after inserts, moves, stale events, deletions, pruning."""
    rng = random.Random(11)
    sequences: dict[str, int] = {}
    phases = list(Phase)
    for _ in range(12):
        batch = []
        for _ in range(40):
            uid = f"u{rng.randrange(60)}"
            sequence = sequences.get(uid, -1) + 1
            if rng.random() < 0.2 and sequence > 1:
                sequence -= 2  # late or duplicated
            sequences[uid] = max(sequences.get(uid, 0), sequence)
            batch.append(
                make_event(
                    uid=uid, cluster=f"c{int(uid[1:]) % 3}", sequence=sequence, epoch=rng.randrange(1, 3),
                    phase=rng.choice(phases), change="deleted" if rng.random() < 0.05 else None,
                    observed_at=BASE_TIME + timedelta(days=rng.randrange(60)),
                    terminal=rng.random() < 0.5,  # the event's own flag, whatever the phase
                    kind_key=("pytorchjob", "mpijob", "job")[int(uid[1:]) % 3],
                )
            )  # fmt: skip
        await write(engine, *batch)
        assert await totals(engine) == await counted(engine)
    await retention.prune_once(engine, retention_days=30, now=BASE_TIME + timedelta(days=70))
    assert await totals(engine) == await counted(engine)


async def test_kind_and_terminal_counts_follow_phase_changes_to_and_from_terminal_and_deletion(
    engine: AsyncEngine,
) -> None:
    """The list's `total` for terminal=true/false (read from job_counts) against counting the rows."""
    done = JobFilters(terminal=True)
    active = JobFilters(terminal=False)
    active_running = JobFilters(terminal=False, phases=("Running",))
    live_active = JobFilters(terminal=False, deleted=False)
    active_mpi = JobFilters(kinds=("mpijob",), terminal=False, deleted=False)

    async def check(expected: dict[JobFilters, int]) -> None:
        async with engine.connect() as conn:
            for filters, n in expected.items():
                assert await queries.count(conn, filters) == n, filters
                exact = (
                    sa.select(sa.func.count())
                    .select_from(jobs)
                    .where(*queries.conditions(filters, conn.dialect.name))
                )
                assert (await conn.execute(exact)).scalar_one() == n, filters
        assert await totals(engine) == await counted(engine)

    mpi = {"kind_key": "mpijob"}
    await write(
        engine, make_event(uid="a", phase=Phase.RUNNING), make_event(uid="b", phase=Phase.RUNNING, **mpi)
    )
    await check({done: 0, active: 2, active_running: 2, live_active: 2, active_mpi: 1})
    await write(engine, make_event(uid="a", sequence=1, phase=Phase.SUCCEEDED))  # to terminal
    await check({done: 1, active: 1, active_running: 1, live_active: 1, active_mpi: 1})
    # Back from terminal (a restarted job), and a flag that changes with the phase unchanged.
    await write(engine, make_event(uid="a", sequence=2, phase=Phase.RUNNING))
    await write(engine, make_event(uid="b", sequence=1, phase=Phase.RUNNING, terminal=True, **mpi))
    await check({done: 1, active: 1, active_running: 1, live_active: 1, active_mpi: 0})
    await write(engine, make_event(uid="a", sequence=3, phase=Phase.RUNNING, change="deleted"))
    await check({done: 1, active: 1, active_running: 1, live_active: 0, active_mpi: 0})
    async with engine.begin() as conn:  # a prune removes rows: the delete trigger
        await conn.execute(sa.delete(jobs).where(jobs.c.uid == "a"))
    await check({done: 1, active: 0, active_running: 0, live_active: 0, active_mpi: 0})


async def totals(engine: AsyncEngine) -> dict[tuple[str, str, str, bool, bool], int]:
    async with engine.connect() as conn:
        rows = await conn.execute(sa.select(job_counts).where(job_counts.c.jobs != 0))
        return {(r.cluster_id, r.phase, r.kind_key, bool(r.terminal), bool(r.deleted)): r.jobs for r in rows}


async def counted(engine: AsyncEngine) -> dict[tuple[str, str, str, bool, bool], int]:
    deleted = jobs.c.deleted_at.is_not(None)
    keys = (jobs.c.cluster_id, jobs.c.phase, jobs.c.kind_key, jobs.c.terminal, deleted)
    async with engine.connect() as conn:
        rows = await conn.execute(sa.select(*keys, sa.func.count()).group_by(*keys))
        return {(c, p, k, bool(t), bool(d)): n for c, p, k, t, d, n in rows}


async def transitions_of(engine: AsyncEngine, uid: str = "uid-1") -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(job_transitions)
            .where(job_transitions.c.uid == uid)
            .order_by(job_transitions.c.sequence)
        )
    return [dict(r) for r in rows.mappings()]


async def test_the_diagnosis_resources_and_times_are_stored_on_the_job_and_each_history_row(
    engine: AsyncEngine,
) -> None:
    oom = oom_diagnosis()
    resources = JobResources(pods=4, gpus=32, gpu_resource="nvidia.com/gpu",
                             gpu_product="NVIDIA-H100-80GB-HBM3", cpu=64.5,
                             memory_bytes=512 * 2**30)  # fmt: skip
    await write(
        engine,
        make_event(sequence=0),
        make_event(sequence=1, phase=Phase.RUNNING, queue_wait_seconds=90.0, run_seconds=0.0),
        make_event(sequence=2, phase=Phase.FAILED, diagnosis=oom, resources=resources,
                   queue_wait_seconds=90.0, run_seconds=3600.5),
    )  # fmt: skip
    row = await job(engine)
    assert (row["diagnosis_category"], row["diagnosis_blame"], row["diagnosis_summary"]) == (
        "OOMKilled", "user_config", oom.summary,
    )  # fmt: skip
    assert Diagnosis.model_validate(row["diagnosis"]) == oom  # the whole diagnosis round-trips
    assert (row["gpus"], row["gpu_product"], row["cpu"], row["memory_bytes"]) == (
        32, "NVIDIA-H100-80GB-HBM3", 64.5, 512 * 2**30,
    )  # fmt: skip
    assert (row["queue_wait_seconds"], row["run_seconds"]) == (90.0, 3600.5)

    history_rows = await transitions_of(engine)
    assert [r["diagnosis_category"] for r in history_rows] == [None, None, "OOMKilled"]
    assert [r["diagnosis"] is None for r in history_rows] == [True, True, False]  # SQL NULL, not JSON null
    assert Diagnosis.model_validate(history_rows[2]["diagnosis"]) == oom

    # An older event without the fields (a watcher before issue 16) reads as unknown, not zero.
    await write(engine, make_event(uid="old", sequence=0))
    old = await job(engine, "old")
    assert [old[c] for c in ("diagnosis", "diagnosis_category", "gpus", "cpu", "queue_wait_seconds")] == [
        None
    ] * 5


async def test_a_diagnosis_update_moves_the_diagnosis_not_the_phase(engine: AsyncEngine) -> None:
    quota = Diagnosis(category=DiagnosisCategory.QUOTA_EXCEEDED, blame=Blame.INFRASTRUCTURE,
                      summary="Queue team-a: quota of nvidia.com/gpu exhausted", queue="team-a",
                      resource="nvidia.com/gpu")  # fmt: skip
    gpus = Diagnosis(category=DiagnosisCategory.UNSCHEDULABLE, blame=Blame.INFRASTRUCTURE,
                     summary="0/12 nodes: Insufficient nvidia.com/gpu",
                     resource="nvidia.com/gpu")  # fmt: skip

    def update(sequence: int, diagnosis: Diagnosis | None) -> JobStatusEvent:
        return make_event(sequence=sequence, phase=Phase.PENDING, previous_phase=Phase.PENDING,
                          change="diagnosis", diagnosis=diagnosis)  # fmt: skip

    await write(engine, make_event(sequence=0, diagnosis=quota))
    result = await write(engine, update(1, gpus))
    assert (result.new_transitions, result.jobs_changed) == (1, 1)
    row = await job(engine)
    assert (row["phase"], row["sequence"], row["diagnosis_category"]) == ("Pending", 1, "Unschedulable")

    # Redelivered or duplicated, an update is dropped by its id like any event.
    again = await write(engine, update(1, gpus), update(1, gpus))
    assert (again.new_transitions, again.jobs_changed) == (0, 0)

    # Cleared (diagnosis null on a "diagnosis" update), then a late copy of the first update
    # arrives: the current diagnosis stays the highest-sequence event's, i.e. none.
    await write(engine, update(2, None))
    await write(engine, update(1, gpus))
    row = await job(engine)
    assert (row["phase"], row["sequence"], row["diagnosis"], row["diagnosis_category"]) == (
        "Pending",
        2,
        None,
        None,
    )
    assert [(r["change"], r["diagnosis_category"]) for r in await transitions_of(engine)] == [
        ("created", "QuotaExceeded"), ("diagnosis", "Unschedulable"), ("diagnosis", None),
    ]  # fmt: skip

    # A batch mixing a transition and the diagnosis updates after it folds to the newest event.
    await write(
        engine,
        update(4, quota),
        make_event(sequence=3, phase=Phase.RUNNING, previous_phase=Phase.PENDING),
        update(5, gpus).model_copy(update={"phase": Phase.RUNNING, "previous_phase": Phase.RUNNING}),
    )
    row = await job(engine)
    assert (row["phase"], row["sequence"], row["diagnosis_category"]) == ("Running", 5, "Unschedulable")
    # ... and keeps the previous phase of that transition, not the update's "Running <- Running".
    assert (row["previous_phase"], row["last_change"]) == ("Pending", "diagnosis")
    await write(
        engine, update(6, None).model_copy(update={"phase": Phase.RUNNING, "previous_phase": Phase.RUNNING})
    )
    row = await job(engine)
    assert (row["phase"], row["previous_phase"], row["sequence"], row["diagnosis"]) == (
        "Running",
        "Pending",
        6,
        None,
    )
    # A transition after the updates sets its own previous phase, as always.
    await write(engine, make_event(sequence=7, phase=Phase.FAILED, previous_phase=Phase.RUNNING))
    row = await job(engine)
    assert (row["phase"], row["previous_phase"], row["last_change"]) == ("Failed", "Running", "transition")


async def test_stored_rows_hold_exactly_what_the_event_says(engine: AsyncEngine) -> None:
    """Every column of both tables, JSON documents included, whatever path the dialect writes by
    (PostgreSQL: column arrays with the event as JSON text; SQLite: rows of Python values)."""
    from trainwatch_common import ReplicaCounts

    event = make_event(
        uid="full", sequence=3, phase=Phase.FAILED, change="transition", labels={"team": "a", "tier": "gpu"},
        owner="ada", previous_phase=Phase.RUNNING, reason="BackoffLimitExceeded", message="3 restarts",
        replicas={"worker": ReplicaCounts(active=0, failed=2)}, restart_count=3,
        started_at=BASE_TIME + timedelta(minutes=1), finished_at=BASE_TIME + timedelta(minutes=3),
        diagnosis=oom_diagnosis(), resources=JobResources(gpus=8, gpu_product="H100", cpu=16.5),
        queue_wait_seconds=60.0, run_seconds=120.0,
    )  # fmt: skip
    plain = make_event(uid="plain", sequence=0)
    await write(engine, event, plain)
    async with engine.connect() as conn:
        stored = {r.event_id: dict(r._mapping) for r in await conn.execute(sa.select(job_transitions))}
    expected = batching.transition_rows([event, plain])
    assert {row["event_id"] for row in expected} == set(stored)
    for row in expected:
        assert stored[row["event_id"]] == row
    assert stored[event.event_id]["event"] == event.model_dump(mode="json")
    current = await job(engine, uid="full")
    assert current == batching.job_row(event)
    assert current["diagnosis"] == oom_diagnosis().model_dump(mode="json", exclude_none=True)
    assert (await job(engine, uid="plain"))["diagnosis"] is None  # SQL NULL, not JSON null
