"""All writes: the batch upsert of current state and history, and the pruning of old rows.

A batch is written as two multi-row statements, never one statement per event, each an
``INSERT ... ON CONFLICT ... RETURNING`` built once per dialect (so its SQLAlchemy cache key and
compiled form are reused, not rebuilt per batch):

- PostgreSQL: the rows go as one array per column and the statement reads them back with
  ``unnest``, so its text is the same whatever the batch size: asyncpg prepares it once per
  connection, and binds each column in one C call instead of SQLAlchemy processing every value of
  every row (issue 21: that, and a new prepared statement per distinct batch size, were most of
  the persister's CPU at small batches). JSON columns travel as text and are cast to jsonb.
- SQLite: the batch's rows, which SQLAlchemy's "insertmanyvalues" sends as multi-row VALUES pages
  within the driver's parameter limit.

RETURNING tells which rows were really inserted or moved forward:

- ``job_transitions``: ``ON CONFLICT (event_id) DO NOTHING``: the history is append-only and a
  duplicate id is the same event seen again.
- ``jobs``: ``ON CONFLICT (cluster_id, uid) DO UPDATE ... WHERE (new key) > (stored key)``: the
  ordering rule of ``ordering.py`` evaluated by the database against the stored row, so two
  replicas writing concurrently cannot move a job backwards either.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
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
    distinct_events: int = 0  # the batch's distinct event ids: new_transitions + duplicates


def _insert(dialect: str, table: sa.Table) -> Any:
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise ValueError(f"unsupported dialect {dialect!r}")


async def write_events(conn: AsyncConnection, events: Sequence[JobStatusEvent]) -> WriteResult:
    """Write a batch inside the caller's transaction; idempotent, so safe to repeat after a failure."""
    dialect = conn.dialect.name
    statements = _statements(dialect)
    transitions = batching.transition_rows(events, event_as_text=dialect == "postgresql")
    new_transitions = 0
    if transitions:
        returned = await conn.execute(
            statements.transitions, _parameters(dialect, job_transitions, transitions)
        )
        new_transitions = len(returned.all())

    job_rows = batching.job_rows(events)
    jobs_changed = 0
    if job_rows:
        returned = await conn.execute(statements.jobs, _parameters(dialect, jobs, job_rows))
        jobs_changed = len(returned.all())
    return WriteResult(
        events=len(events),
        new_transitions=new_transitions,
        jobs_changed=jobs_changed,
        distinct_events=len(transitions),
    )


@dataclass(frozen=True, slots=True)
class _Statements:
    transitions: Any
    jobs: Any


@functools.cache
def _statements(dialect: str) -> _Statements:
    """The two write statements of a dialect, built once (they hold no values)."""
    if dialect == "postgresql":
        transitions = _insert(dialect, job_transitions).from_select(
            [c.name for c in job_transitions.columns], _unnest(job_transitions)
        )
        jobs_insert = _insert(dialect, jobs).from_select([c.name for c in jobs.columns], _unnest(jobs))
    else:
        transitions, jobs_insert = _insert(dialect, job_transitions), _insert(dialect, jobs)
    return _Statements(
        transitions=transitions.on_conflict_do_nothing(index_elements=["event_id"]).returning(
            job_transitions.c.event_id
        ),
        jobs=_upsert_jobs(jobs_insert).returning(jobs.c.uid),
    )


def _is_json(column: sa.Column[Any]) -> bool:
    return isinstance(column.type, sa.JSON)


def _unnest(table: sa.Table) -> sa.Select[Any]:
    """SELECT unnest(:col1), unnest(:col2)...: one array parameter per column, read in lockstep."""
    values: list[sa.ColumnElement[Any]] = []
    for column in table.columns:
        if _is_json(column):  # text on the wire, jsonb in the table
            array = sa.bindparam(column.name, type_=postgresql.ARRAY(sa.Text))
            values.append(sa.cast(sa.func.unnest(array), postgresql.JSONB))
        elif isinstance(column.type, sa.String):
            # Unbounded on the wire: an explicit cast to VARCHAR(n)[] would silently truncate a
            # value too long for the column, where the insert must refuse it (db-rejected).
            values.append(sa.func.unnest(sa.bindparam(column.name, type_=postgresql.ARRAY(sa.Text))))
        else:
            values.append(sa.func.unnest(sa.bindparam(column.name, type_=postgresql.ARRAY(column.type))))
    return sa.select(*values)


# Columns whose value batching already gives as JSON text on PostgreSQL (see transition_rows).
_AS_TEXT = frozenset({("job_transitions", "event")})


@functools.cache
def _column_kinds(table: sa.Table) -> tuple[tuple[str, bool], ...]:
    """(name, serialize as JSON here) per column, in the order of the statement's arrays."""
    return tuple((c.name, _is_json(c) and (table.name, c.name) not in _AS_TEXT) for c in table.columns)


def _parameters(dialect: str, table: sa.Table, rows: list[dict[str, Any]]) -> Any:
    """The rows as the dialect's statement takes them: a list of rows, or one array per column."""
    if dialect != "postgresql":
        return rows
    arrays: dict[str, list[Any]] = {}
    for name, json in _column_kinds(table):
        if json:
            # NULL stays SQL NULL (the nullable diagnosis); everything else is its JSON text.
            arrays[name] = [None if row[name] is None else _json_text(row[name]) for row in rows]
        else:
            arrays[name] = [row[name] for row in rows]
    return arrays


def _json_text(value: Any) -> str:
    return orjson.dumps(value).decode()


def _upsert_jobs(insert: Any) -> Any:
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
