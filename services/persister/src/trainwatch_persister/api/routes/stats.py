"""GET /v1/stats (live jobs per cluster and phase) and the overview's aggregates under /v1/stats/."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query

from trainwatch_common import Phase
from trainwatch_persister import aggregates, queries
from trainwatch_persister.api.deps import ConnectionDep, ViewerDep
from trainwatch_persister.api.filters import FiltersDep
from trainwatch_persister.api.models import (
    ActivityPublic,
    BreakdownPublic,
    BucketPublic,
    ClusterPhaseCount,
    DurationsPublic,
    FailureReasonsPublic,
    HistogramPublic,
    NamespaceCount,
    ReasonCount,
    StatsPublic,
)

router = APIRouter(prefix="/v1/stats", tags=["stats"])

HoursDep = Annotated[int, Query(ge=1, le=24 * 14, description="The window: this many hours up to now")]


@router.get("", response_model=StatsPublic, summary="Counts of live jobs per cluster and per phase")
async def stats(_: ViewerDep, conn: ConnectionDep) -> StatsPublic:
    counts = await queries.count_jobs(conn)
    by_cluster: Counter[str] = Counter()
    by_phase: Counter[str] = Counter()
    for cluster_id, phase, count in counts.by_cluster_phase:
        by_cluster[cluster_id] += count
        by_phase[phase] += count
    return StatsPublic(
        total=sum(by_cluster.values()),
        deleted=counts.deleted,
        by_cluster=dict(sorted(by_cluster.items())),
        by_phase=dict(sorted(by_phase.items())),
        by_cluster_phase=[
            ClusterPhaseCount(cluster_id=c, phase=Phase(p), count=n) for c, p, n in counts.by_cluster_phase
        ],
    )


@router.get(
    "/breakdown",
    response_model=BreakdownPublic,
    summary="Jobs matching the filters per phase, cluster, namespace and diagnosis category",
)
async def breakdown(
    _: ViewerDep,
    conn: ConnectionDep,
    filters: FiltersDep,
    namespaces: Annotated[int, Query(ge=1, le=500, description="How many namespaces to list")] = 50,
) -> BreakdownPublic:
    result = await aggregates.breakdown(conn, filters=filters, namespaces=namespaces)
    return BreakdownPublic(
        total=result.total,
        by_phase=result.by_phase,
        by_cluster=result.by_cluster,
        by_namespace=[
            NamespaceCount(cluster_id=c, namespace=ns, count=n) for c, ns, n in result.by_namespace
        ],
        by_diagnosis=result.by_diagnosis,
    )


@router.get(
    "/activity",
    response_model=ActivityPublic,
    summary="Failures per bucket and jobs running per bucket, over the last hours",
)
async def activity(
    _: ViewerDep,
    conn: ConnectionDep,
    filters: FiltersDep,
    hours: HoursDep = 24,
    bucket_seconds: Annotated[int, Query(ge=300, le=86400, description="Bucket size")] = 3600,
) -> ActivityPublic:
    bucket_seconds = max(bucket_seconds, hours * 3600 // 500)  # at most 500 buckets
    result = await aggregates.activity(
        conn, filters=filters, until=datetime.now(UTC), hours=hours, bucket_seconds=bucket_seconds
    )
    return ActivityPublic(
        since=result.since,
        until=result.until,
        bucket_seconds=result.bucket_seconds,
        failures=[BucketPublic(start=b.start, count=b.count) for b in result.failures],
        running=[BucketPublic(start=b.start, count=b.count) for b in result.running],
    )


@router.get(
    "/durations",
    response_model=DurationsPublic,
    summary="Queue-wait and run-time distributions of the jobs started or finished in the window",
)
async def durations(
    _: ViewerDep, conn: ConnectionDep, filters: FiltersDep, hours: HoursDep = 24
) -> DurationsPublic:
    result = await aggregates.durations(
        conn, filters=filters, since=datetime.now(UTC) - timedelta(hours=hours)
    )

    def histogram(h: aggregates.Histogram) -> HistogramPublic:
        return HistogramPublic(edges_seconds=list(h.edges), counts=h.counts, total=h.total)

    return DurationsPublic(
        since=result.since, queue_wait=histogram(result.queue_wait), run_time=histogram(result.run_time)
    )


@router.get(
    "/failure-reasons",
    response_model=FailureReasonsPublic,
    summary="The commonest reasons of the jobs that failed in the window",
)
async def failure_reasons(
    _: ViewerDep,
    conn: ConnectionDep,
    filters: FiltersDep,
    hours: HoursDep = 24,
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
) -> FailureReasonsPublic:
    since = datetime.now(UTC) - timedelta(hours=hours)
    reasons = await aggregates.failure_reasons(conn, filters=filters, since=since, limit=limit)
    return FailureReasonsPublic(since=since, reasons=[ReasonCount(reason=r, count=n) for r, n in reasons])
