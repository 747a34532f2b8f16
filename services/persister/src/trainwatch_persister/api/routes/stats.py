"""GET /v1/stats: live jobs per cluster and per phase, for dashboards."""

from __future__ import annotations

from collections import Counter

from fastapi import APIRouter

from trainwatch_common import Phase
from trainwatch_persister import queries
from trainwatch_persister.api.deps import ConnectionDep, ViewerDep
from trainwatch_persister.api.models import ClusterPhaseCount, StatsPublic

router = APIRouter(prefix="/v1/stats", tags=["stats"])


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
