"""The overview's aggregates, computed in SQL on PostgreSQL and SQLite alike.

Every aggregate takes the jobs list's filters (``filters.JobFilters``), so the overview of a
cluster or a namespace answers for the same jobs the list shows. Time-windowed aggregates bound
their scan by an index range:

- failures and failure reasons: ``phase = 'Failed' AND updated_at >= since`` on
  ``ix_jobs_phase_updated_at`` (a job's finish is never after its last update, so this is a
  superset of the jobs that failed in the window, filtered exactly afterwards);
- run and queue-wait times: ``updated_at >= since`` on ``ix_jobs_updated_at_cluster_id_uid``;
- jobs running over time: the unfinished jobs (``ix_jobs_terminal_deleted_at``, migration 0003)
  plus those updated in the window.

Buckets are computed by the database (a GROUP BY on the bucket index, whole seconds since the
window's start, so both dialects bucket identically); the window's edges are chosen here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from trainwatch_persister.filters import JobFilters
from trainwatch_persister.queries import conditions
from trainwatch_persister.tables import UtcDateTime, jobs

# Upper edges (seconds) of the duration histograms' buckets; a last bucket holds the rest.
DURATION_EDGES: tuple[int, ...] = (10, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 12 * 3600, 86400)
FAILED = "Failed"


@dataclass(frozen=True, slots=True)
class Breakdown:
    by_phase: dict[str, int]
    by_cluster: dict[str, int]
    by_namespace: list[tuple[str, str, int]]  # (cluster_id, namespace, count), most jobs first
    total: int
    by_diagnosis: dict[str, int] = dataclasses.field(default_factory=dict)  # jobs with one only


@dataclass(frozen=True, slots=True)
class Bucket:
    start: datetime
    count: int


@dataclass(frozen=True, slots=True)
class Activity:
    since: datetime
    until: datetime
    bucket_seconds: int
    failures: list[Bucket]  # jobs that failed in each bucket
    running: list[Bucket]  # jobs running at any time within each bucket


@dataclass(frozen=True, slots=True)
class Histogram:
    edges: tuple[int, ...]
    counts: list[int]  # len(edges) + 1: the last counts durations above the last edge
    total: int


@dataclass(frozen=True, slots=True)
class Durations:
    since: datetime
    queue_wait: Histogram  # started_at - created_at of jobs started in the window
    run_time: Histogram  # finished_at - started_at of jobs finished in the window


def _seconds_between(later: Any, earlier: Any, dialect: str) -> sa.ColumnElement[float]:
    if dialect == "postgresql":
        return sa.type_coerce(sa.extract("epoch", later - earlier), sa.Float)
    # SQLite stores UTC text: julianday() reads it as days since an epoch.
    return (sa.func.julianday(later) - sa.func.julianday(earlier)) * 86400.0


def _live(filters: JobFilters) -> JobFilters:
    """Deleted jobs are left out unless the filters ask about them."""
    if filters.deleted is None:
        return dataclasses.replace(filters, deleted=False)
    return filters


async def breakdown(conn: AsyncConnection, *, filters: JobFilters, namespaces: int = 50) -> Breakdown:
    """Jobs per phase, per cluster and per (cluster, namespace): the ``namespaces`` largest; and
    per category of their current diagnosis (most jobs first), for those that have one."""
    where = conditions(_live(filters), conn.dialect.name)
    grouped = (
        sa.select(jobs.c.cluster_id, jobs.c.namespace, jobs.c.phase, sa.func.count().label("n"))
        .where(*where)
        .group_by(jobs.c.cluster_id, jobs.c.namespace, jobs.c.phase)
    )
    by_phase: dict[str, int] = {}
    by_cluster: dict[str, int] = {}
    by_namespace: dict[tuple[str, str], int] = {}
    for cluster_id, namespace, phase, n in await conn.execute(grouped):
        by_phase[phase] = by_phase.get(phase, 0) + n
        by_cluster[cluster_id] = by_cluster.get(cluster_id, 0) + n
        by_namespace[(cluster_id, namespace)] = by_namespace.get((cluster_id, namespace), 0) + n
    largest = sorted(by_namespace.items(), key=lambda item: (-item[1], item[0]))[:namespaces]
    per_category = (
        sa.select(jobs.c.diagnosis_category, sa.func.count().label("n"))
        .where(*where, jobs.c.diagnosis_category.is_not(None))
        .group_by(jobs.c.diagnosis_category)
    )
    by_diagnosis = {category: n for category, n in await conn.execute(per_category)}
    return Breakdown(
        by_phase=dict(sorted(by_phase.items())),
        by_cluster=dict(sorted(by_cluster.items())),
        by_namespace=[(c, ns, n) for (c, ns), n in largest],
        total=sum(by_phase.values()),
        by_diagnosis=dict(sorted(by_diagnosis.items(), key=lambda item: (-item[1], item[0]))),
    )


def bucket_starts(until: datetime, *, hours: int, bucket_seconds: int) -> list[datetime]:
    """Bucket starts covering [until - hours, until), aligned to the bucket size (whole hours)."""
    step = timedelta(seconds=bucket_seconds)
    epoch = datetime(1970, 1, 1, tzinfo=until.tzinfo)
    end = epoch + step * -(-(until - epoch) // step)  # the bucket edge at or after `until`
    count = max(1, int(timedelta(hours=hours) / step))
    return [end - step * (count - i) for i in range(count)]


async def activity(
    conn: AsyncConnection,
    *,
    filters: JobFilters,
    until: datetime,
    hours: int = 24,
    bucket_seconds: int = 3600,
) -> Activity:
    dialect = conn.dialect.name
    starts = bucket_starts(until, hours=hours, bucket_seconds=bucket_seconds)
    step = timedelta(seconds=bucket_seconds)
    since, end = starts[0], starts[-1] + step
    # Deleted jobs are part of the past: a job that failed and was deleted since still failed.
    where = conditions(filters, dialect)

    def bucket(moment: Any) -> sa.ColumnElement[int]:
        """The bucket index of a time at or after ``since`` (whole seconds, so both dialects agree)."""
        if dialect == "postgresql":
            offset = sa.extract("epoch", moment) - sa.extract("epoch", sa.literal(since, type_=UtcDateTime))
            return sa.cast(sa.func.floor(offset / bucket_seconds), sa.Integer)
        epoch = sa.cast(sa.func.strftime("%s", moment), sa.Integer)
        return sa.cast((epoch - int(since.timestamp())) // bucket_seconds, sa.Integer)  # integer division

    count = len(starts)
    failed_at = sa.func.coalesce(jobs.c.finished_at, jobs.c.updated_at)
    failed_bucket = bucket(failed_at).label("b")
    failures = [0] * count
    rows = await conn.execute(
        sa.select(failed_bucket, sa.func.count())
        .where(
            *where, jobs.c.phase == FAILED, jobs.c.updated_at >= since, failed_at >= since, failed_at < end
        )
        .group_by(failed_bucket)
    )
    for index, n in rows:
        if 0 <= int(index) < count:
            failures[int(index)] += int(n)

    # Running within a bucket: started before its end, and not finished (nor deleted) before its
    # start. One pass counts the jobs starting and the jobs ending per bucket; running[b] is then
    # (started in buckets <= b) - (ended in buckets < b), a job started before the window counting
    # as started in bucket 0.
    ended_at = sa.func.coalesce(jobs.c.finished_at, jobs.c.deleted_at)
    start_bucket = sa.case((jobs.c.started_at < since, 0), else_=bucket(jobs.c.started_at)).label("s")
    end_bucket = sa.case((ended_at.is_(None), -1), else_=bucket(ended_at)).label("e")
    overlapping = sa.or_(
        sa.and_(jobs.c.terminal.is_(False), jobs.c.deleted_at.is_(None)), jobs.c.updated_at >= since
    )
    rows = await conn.execute(
        sa.select(start_bucket, end_bucket, sa.func.count())
        .where(
            *where,
            overlapping,
            jobs.c.started_at.is_not(None),
            jobs.c.started_at < end,
            sa.or_(ended_at.is_(None), ended_at >= since),
        )
        .group_by(start_bucket, end_bucket)
    )
    started = [0] * count
    ended = [0] * count
    for row in rows:
        values: tuple[Any, ...] = tuple(row)
        first, last, n = (int(v) for v in values)
        started[min(max(first, 0), count - 1)] += n
        if 0 <= last < count:
            ended[last] += n
    running: list[int] = []
    current = 0
    for index in range(count):
        current += started[index] - (ended[index - 1] if index else 0)
        running.append(current)
    return Activity(
        since=since,
        until=end,
        bucket_seconds=bucket_seconds,
        failures=[Bucket(s, n) for s, n in zip(starts, failures, strict=True)],
        running=[Bucket(s, n) for s, n in zip(starts, running, strict=True)],
    )


def _bucket_of(value: sa.ColumnElement[float], edges: Sequence[int]) -> sa.ColumnElement[int]:
    """The histogram bucket of ``value``: i for value < edges[i] (the first such), len(edges) above."""
    return sa.case(*((value < edge, index) for index, edge in enumerate(edges)), else_=len(edges))


async def durations(
    conn: AsyncConnection, *, filters: JobFilters, since: datetime, edges: Sequence[int] = DURATION_EDGES
) -> Durations:
    """One pass over the jobs updated in the window: each row's queue-wait bucket (if it started in
    the window) and run-time bucket (if it finished in it), counted per pair of buckets."""
    dialect = conn.dialect.name
    where = conditions(filters, dialect)
    started_in = jobs.c.started_at >= since
    finished_in = sa.and_(jobs.c.finished_at >= since, jobs.c.started_at.is_not(None))
    wait = _seconds_between(jobs.c.started_at, jobs.c.created_at, dialect)
    run = _seconds_between(jobs.c.finished_at, jobs.c.started_at, dialect)
    wait_bucket = sa.case((started_in, _bucket_of(wait, edges)), else_=None).label("w")
    run_bucket = sa.case((finished_in, _bucket_of(run, edges)), else_=None).label("r")
    rows = await conn.execute(
        sa.select(wait_bucket, run_bucket, sa.func.count())
        .where(*where, jobs.c.updated_at >= since, sa.or_(started_in, finished_in))
        .group_by(wait_bucket, run_bucket)
    )
    waits = [0] * (len(edges) + 1)
    runs = [0] * (len(edges) + 1)
    for row in rows:
        values: tuple[Any, ...] = tuple(row)
        w, r, n = values
        if w is not None:
            waits[int(w)] += int(n)
        if r is not None:
            runs[int(r)] += int(n)

    def histogram(counts: list[int]) -> Histogram:
        return Histogram(edges=tuple(edges), counts=counts, total=sum(counts))

    return Durations(since=since, queue_wait=histogram(waits), run_time=histogram(runs))


async def failure_reasons(
    conn: AsyncConnection, *, filters: JobFilters, since: datetime, limit: int = 10
) -> list[tuple[str | None, int]]:
    """The commonest reasons of the jobs that failed since ``since`` (the event's reason field)."""
    where = conditions(filters, conn.dialect.name)
    failed_at = sa.func.coalesce(jobs.c.finished_at, jobs.c.updated_at)
    n = sa.func.count().label("n")
    statement = (
        sa.select(jobs.c.reason, n)
        .where(*where, jobs.c.phase == FAILED, jobs.c.updated_at >= since, failed_at >= since)
        .group_by(jobs.c.reason)
        .order_by(n.desc(), jobs.c.reason)
        .limit(limit)
    )
    return [(reason, int(count)) for reason, count in await conn.execute(statement)]
