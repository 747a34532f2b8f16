"""All writes: the batch upsert of current state and history, and the pruning of old rows.

A batch is written as two multi-row statements, never one statement per event: each is
compiled once (and cached) as a dialect-specific ``INSERT ... ON CONFLICT ... RETURNING`` and
executed with the batch's rows, which SQLAlchemy's "insertmanyvalues" sends as multi-row VALUES
pages (1000 rows each) within the drivers' parameter limits. RETURNING tells which rows were
really inserted or moved forward:

- ``job_transitions``: ``ON CONFLICT (event_id) DO NOTHING``: the history is append-only and a
  duplicate id is the same event seen again.
- ``jobs``: ``ON CONFLICT (cluster_id, uid) DO UPDATE ... WHERE (new key) > (stored key)``: the
  ordering rule of ``ordering.py`` evaluated by the database against the stored row, so two
  replicas writing concurrently cannot move a job backwards either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from trainwatch_common import JobStatusEvent
from trainwatch_persister import batching
from trainwatch_persister.tables import job_transitions, jobs

# Columns an upsert must not overwrite: the key, and created_at (handled below).
_JOB_KEY = ("cluster_id", "uid")


@dataclass(frozen=True, slots=True)
class WriteResult:
    events: int
    new_transitions: int
    jobs_changed: int


def _insert(conn: AsyncConnection, table: sa.Table) -> Any:
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    if conn.dialect.name == "sqlite":
        return sqlite.insert(table)
    raise ValueError(f"unsupported dialect {conn.dialect.name!r}")


async def write_events(conn: AsyncConnection, events: Sequence[JobStatusEvent]) -> WriteResult:
    """Write a batch inside the caller's transaction; idempotent, so safe to repeat after a failure."""
    transitions = batching.transition_rows(events)
    new_transitions = 0
    if transitions:
        insert = _insert(conn, job_transitions).on_conflict_do_nothing(index_elements=["event_id"])
        returned = await conn.execute(insert.returning(job_transitions.c.event_id), transitions)
        new_transitions = len(returned.all())

    job_rows = batching.job_rows(events)
    jobs_changed = 0
    if job_rows:
        returned = await conn.execute(_upsert_jobs(conn).returning(jobs.c.uid), job_rows)
        jobs_changed = len(returned.all())
    return WriteResult(events=len(events), new_transitions=new_transitions, jobs_changed=jobs_changed)


def _upsert_jobs(conn: AsyncConnection) -> Any:
    insert = _insert(conn, jobs)
    new = insert.excluded
    updates: dict[str, Any] = {
        column.name: new[column.name]
        for column in jobs.columns
        if column.name not in (*_JOB_KEY, "created_at")
    }
    # A creationTimestamp never changes; keep the earliest we know (a first event may have lacked one).
    updates["created_at"] = sa.case(
        (new.created_at < jobs.c.created_at, new.created_at), else_=jobs.c.created_at
    )
    # A diagnosis update (same phase, previous_phase = phase) keeps the previous phase of the
    # transition before it, unless the phase stored is another (that transition is still to come).
    updates["previous_phase"] = sa.case(
        (
            sa.and_(
                new.last_change == "diagnosis",
                new.previous_phase == new.phase,
                jobs.c.phase == new.phase,
            ),
            jobs.c.previous_phase,
        ),
        else_=new.previous_phase,
    )
    newer = sa.tuple_(new.sequence, new.epoch, new.rv_number) > sa.tuple_(
        jobs.c.sequence, jobs.c.epoch, jobs.c.rv_number
    )
    return insert.on_conflict_do_update(index_elements=list(_JOB_KEY), set_=updates, where=newer)


@dataclass(frozen=True, slots=True)
class PruneResult:
    transitions: int
    jobs: int


async def prune(engine: AsyncEngine, *, cutoff: datetime, chunk: int = 5_000) -> PruneResult:
    """Delete history observed before ``cutoff`` and jobs deleted before it, in short transactions.

    Small chunks keep each transaction (and its locks) short, so the consumer is never held up
    for long behind a large prune.
    """
    old_transitions = (
        sa.select(job_transitions.c.event_id).where(job_transitions.c.observed_at < cutoff).limit(chunk)
    )
    transitions = await _delete_in_chunks(
        engine,
        sa.delete(job_transitions).where(job_transitions.c.event_id.in_(old_transitions.scalar_subquery())),
        chunk,
    )
    gone_jobs = sa.select(jobs.c.cluster_id, jobs.c.uid).where(jobs.c.deleted_at < cutoff).limit(chunk)
    removed_jobs = await _delete_in_chunks(
        engine, sa.delete(jobs).where(sa.tuple_(jobs.c.cluster_id, jobs.c.uid).in_(gone_jobs)), chunk
    )
    return PruneResult(transitions=transitions, jobs=removed_jobs)


async def _delete_in_chunks(engine: AsyncEngine, statement: sa.Delete, chunk: int) -> int:
    total = 0
    while True:
        async with engine.begin() as conn:
            deleted = (await conn.execute(statement)).rowcount
        total += deleted
        if deleted < chunk:
            return total
