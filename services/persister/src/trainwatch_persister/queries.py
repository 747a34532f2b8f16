"""All reads: the filtered, keyset-paginated job list, one job with its history, statistics.

Keyset pagination: a page is "the first ``limit`` rows after the key of the last row of the
previous page", in the order (sort column, cluster_id, uid), which is unique. Unlike OFFSET, a
row inserted or deleted elsewhere in the list never shifts a page boundary, so paging while
events arrive neither skips nor repeats a row that stays in place; each page costs one index
range scan however deep it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from trainwatch_persister.filters import JobFilters, SortField, SortOrder
from trainwatch_persister.tables import job_counts, job_transitions, jobs

# A time range on one column with a sort by another defeats PostgreSQL's planner: created_at and
# updated_at are correlated, so "walk the updated_at index backwards until 50 rows match the
# created_at range" may walk nearly the whole table (2 s at 1M jobs). When the exact count, which
# the response needs anyway, says few rows match, we sort after filtering instead (a few ms).
SORT_AFTER_FILTERING_MAX = 20_000


@dataclass(frozen=True, slots=True)
class Page:
    rows: list[RowMapping]
    total: int
    has_more: bool


@dataclass(frozen=True, slots=True)
class JobHistory:
    job: RowMapping
    transitions: list[RowMapping] = field(default_factory=list)


def conditions(filters: JobFilters, dialect: str) -> list[sa.ColumnElement[bool]]:
    """The WHERE clauses of ``filters`` (the list's, the overview's aggregates and the export's)."""
    where: list[sa.ColumnElement[bool]] = []
    for column, values in (
        (jobs.c.cluster_id, filters.clusters),
        (jobs.c.namespace, filters.namespaces),
        (jobs.c.kind_key, filters.kinds),
        (jobs.c.phase, filters.phases),
        (jobs.c.diagnosis_category, filters.diagnoses),
        (jobs.c.diagnosis_blame, filters.blames),
    ):
        if len(values) == 1:
            where.append(column == values[0])
        elif values:
            where.append(column.in_(list(values)))
    if filters.terminal is not None:
        where.append(jobs.c.terminal.is_(filters.terminal))
    if filters.deleted:
        where.append(jobs.c.deleted_at.is_not(None))
    elif filters.deleted is not None:
        # Nearly every job is live: an index on deleted_at only narrows "deleted", and SQLite would
        # scan it for "live" too (then sort 100k rows for a page: 220 ms). coalesce() keeps it out.
        where.append(sa.func.coalesce(jobs.c.deleted_at, sa.null()).is_(None))
    if filters.owner is not None:
        where.append(jobs.c.owner == filters.owner)
    for key, value in filters.labels:
        where.append(_label_equals(key, value, dialect))
    if filters.name_contains:
        where.append(jobs.c.name.icontains(filters.name_contains, autoescape=True))
    if filters.created_after is not None:
        where.append(jobs.c.created_at >= filters.created_after)
    if filters.created_before is not None:
        where.append(jobs.c.created_at < filters.created_before)
    if filters.updated_after is not None:
        where.append(jobs.c.updated_at >= filters.updated_after)
    if filters.updated_before is not None:
        where.append(jobs.c.updated_at < filters.updated_before)
    return where


def _label_equals(key: str, value: str, dialect: str) -> sa.ColumnElement[bool]:
    if dialect == "postgresql":
        # Containment is answered by the GIN index on labels.
        return sa.type_coerce(jobs.c.labels, JSONB).contains({key: value})
    # Label keys are qualified names ([a-z0-9./-_]), never quotes, so quoting the path segment is safe.
    return sa.func.json_extract(jobs.c.labels, f'$."{key}"') == value


def _sort_columns(sort: SortField, filters: JobFilters) -> list[sa.ColumnElement[Any]]:
    columns: list[sa.ColumnElement[Any]] = [jobs.c[sort.value]]
    # With one cluster fixed by the filter, cluster_id adds nothing to the order; leaving it out lets
    # the (cluster_id, updated_at, uid) index answer the keyset condition directly.
    if len(filters.clusters) != 1:
        columns.append(jobs.c.cluster_id)
    columns.append(jobs.c.uid)
    return columns


def sort_key(row: RowMapping, sort: SortField) -> tuple[Any, str, str]:
    """The keyset position of a row: what a cursor stores."""
    return (row[sort.value], row["cluster_id"], row["uid"])


async def list_jobs(
    conn: AsyncConnection,
    *,
    filters: JobFilters,
    sort: SortField = SortField.UPDATED_AT,
    order: SortOrder = SortOrder.DESC,
    after: tuple[Any, str, str] | None = None,
    limit: int = 50,
    total: int | None = None,
) -> Page:
    """One page; ``total`` (the count of an earlier page of the same list) saves counting again."""
    dialect = conn.dialect.name
    where = conditions(filters, dialect)
    if total is None:
        total = await _count(conn, filters, where)

    columns = _sort_columns(sort, filters)
    sort_after_filtering = total <= SORT_AFTER_FILTERING_MAX and _ranges_another_time_column(filters, sort)
    page_where = list(where)
    if after is not None:
        value, cluster_id, uid = after
        position = [value, uid] if len(columns) == 2 else [value, cluster_id, uid]
        bound = sa.tuple_(*(sa.literal(v, type_=c.type) for v, c in zip(position, columns, strict=True)))
        page_where.append(
            sa.tuple_(*columns) < bound if order is SortOrder.DESC else sa.tuple_(*columns) > bound
        )
    keys: list[sa.ColumnElement[Any]] = list(columns)
    if sort_after_filtering:
        keys[0] = _without_index_order(columns[0], dialect)
    ordering = [c.desc() if order is SortOrder.DESC else c.asc() for c in keys]
    statement = sa.select(jobs).where(*page_where).order_by(*ordering).limit(limit + 1)
    rows = list((await conn.execute(statement)).mappings())
    return Page(rows=rows[:limit], total=total, has_more=len(rows) > limit)


_COUNTED_DIMENSIONS = frozenset({"clusters", "kinds", "phases", "terminal", "deleted"})


async def count(conn: AsyncConnection, filters: JobFilters) -> int:
    """The exact number of jobs matching ``filters``."""
    return await _count(conn, filters, conditions(filters, conn.dialect.name))


async def _count(conn: AsyncConnection, filters: JobFilters, where: list[sa.ColumnElement[bool]]) -> int:
    """The exact number of matching jobs: from job_counts when the filters allow it, else counted."""
    used = {f.name for f in fields(filters) if getattr(filters, f.name) not in ((), None)}
    if not used <= _COUNTED_DIMENSIONS:
        return int(
            (await conn.execute(sa.select(sa.func.count()).select_from(jobs).where(*where))).scalar_one()
        )
    totals = sa.select(sa.func.coalesce(sa.func.sum(job_counts.c.jobs), 0))
    if filters.clusters:
        totals = totals.where(job_counts.c.cluster_id.in_(list(filters.clusters)))
    if filters.kinds:
        totals = totals.where(job_counts.c.kind_key.in_(list(filters.kinds)))
    if filters.phases:
        totals = totals.where(job_counts.c.phase.in_(list(filters.phases)))
    if filters.terminal is not None:
        totals = totals.where(job_counts.c.terminal.is_(filters.terminal))
    if filters.deleted is not None:
        totals = totals.where(job_counts.c.deleted.is_(filters.deleted))
    return int((await conn.execute(totals)).scalar_one())


def _ranges_another_time_column(filters: JobFilters, sort: SortField) -> bool:
    created = filters.created_after is not None or filters.created_before is not None
    updated = filters.updated_after is not None or filters.updated_before is not None
    return (created and sort is not SortField.CREATED_AT) or (updated and sort is not SortField.UPDATED_AT)


def _without_index_order(column: sa.ColumnElement[Any], dialect: str) -> sa.ColumnElement[Any]:
    """The same order, written so that no index provides it (the planner must filter, then sort)."""
    if dialect == "postgresql" and column.name != "name":
        return column + sa.literal_column("INTERVAL '0 seconds'", type_=sa.Interval)
    return column.op("||")(sa.literal(""))  # text (and SQLite's text timestamps) order the same


async def get_job(conn: AsyncConnection, *, cluster_id: str, uid: str) -> JobHistory | None:
    job = (
        (await conn.execute(sa.select(jobs).where(jobs.c.cluster_id == cluster_id, jobs.c.uid == uid)))
        .mappings()
        .first()
    )
    if job is None:
        return None
    history = sa.select(job_transitions).where(
        job_transitions.c.cluster_id == cluster_id, job_transitions.c.uid == uid
    )
    ordered = history.order_by(
        job_transitions.c.sequence, job_transitions.c.epoch, job_transitions.c.observed_at
    )
    return JobHistory(job=job, transitions=list((await conn.execute(ordered)).mappings()))


@dataclass(frozen=True, slots=True)
class Counts:
    by_cluster_phase: list[tuple[str, str, int]]
    deleted: int


async def count_jobs(conn: AsyncConnection) -> Counts:
    """Live (not deleted) jobs per cluster and phase, and how many deleted jobs are kept."""
    rows = await conn.execute(
        sa.select(job_counts.c.cluster_id, job_counts.c.phase, job_counts.c.deleted, job_counts.c.jobs)
        .where(job_counts.c.jobs > 0)
        .order_by(job_counts.c.cluster_id, job_counts.c.phase)
    )
    # A (cluster, phase) has a counter per kind and terminal flag (migration 0005): summed here.
    live: dict[tuple[str, str], int] = {}
    deleted = 0
    for cluster_id, phase, is_deleted, count in rows:
        if is_deleted:
            deleted += int(count)
        else:
            key = (str(cluster_id), str(phase))
            live[key] = live.get(key, 0) + int(count)
    return Counts(by_cluster_phase=[(c, p, n) for (c, p), n in live.items()], deleted=deleted)
