"""GET /v1/jobs (filtered, sorted, keyset-paginated), /v1/jobs/export and /v1/jobs/{cluster_id}/{uid}."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.responses import StreamingResponse

from trainwatch_persister import queries
from trainwatch_persister.api import export, pagination
from trainwatch_persister.api.deps import ConnectionDep, ViewerDep
from trainwatch_persister.api.filters import FiltersDep
from trainwatch_persister.api.models import (
    DiagnosisChange,
    JobDetail,
    JobPublic,
    JobsPublic,
    TransitionPublic,
)
from trainwatch_persister.filters import SortField, SortOrder

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

MAX_PAGE_SIZE = 500


@router.get("", response_model=JobsPublic, summary="List jobs")
async def list_jobs(
    _: ViewerDep,
    conn: ConnectionDep,
    filters: FiltersDep,
    sort: Annotated[SortField, Query(description="Sort column")] = SortField.UPDATED_AT,
    order: Annotated[SortOrder | None, Query(description="Default: desc for times, asc for name")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = 50,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
) -> JobsPublic:
    order = order or (SortOrder.ASC if sort is SortField.NAME else SortOrder.DESC)
    after = None
    if cursor:
        try:
            after = pagination.decode_cursor(cursor, sort=sort, order=order, filters=filters)
        except pagination.InvalidCursor as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from exc
    page = await queries.list_jobs(conn, filters=filters, sort=sort, order=order, after=after, limit=limit)
    next_cursor = None
    if page.has_more and page.rows:
        position = queries.sort_key(page.rows[-1], sort)
        next_cursor = pagination.encode_cursor(sort=sort, order=order, filters=filters, position=position)
    return JobsPublic(
        data=[JobPublic.model_validate(dict(row)) for row in page.rows],
        total=page.total,
        next_cursor=next_cursor,
    )


@router.get(
    "/export",
    summary="Export the jobs a filter matches, as CSV or JSON (streamed, at most `limit` rows)",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "Newest change first. X-Total-Count: how many match; X-Export-Limit: the bound",
            "content": {"text/csv": {}, "application/json": {}},
        }
    },
)
async def export_jobs(
    request: Request,
    _: ViewerDep,
    conn: ConnectionDep,
    filters: FiltersDep,
    format: Annotated[Literal["csv", "json"], Query(description="csv or json (an array of jobs)")] = "csv",
    limit: Annotated[int, Query(ge=1, le=export.MAX_EXPORT_ROWS)] = export.MAX_EXPORT_ROWS,
) -> StreamingResponse:
    total = await queries.count(conn, filters)
    await conn.close()  # the stream reads on its own connection, after this handler returned
    pages = export.rows(request.app.state.engine, filters, limit)
    body, media = (export.as_csv(pages), "text/csv; charset=utf-8") if format == "csv" else (
        export.as_json(pages), "application/json",
    )  # fmt: skip
    headers = {
        "Content-Disposition": f'attachment; filename="jobs.{format}"',
        "X-Total-Count": str(total),
        "X-Export-Limit": str(limit),
        "Cache-Control": "no-store",
    }
    return StreamingResponse(body, media_type=media, headers=headers)


@router.get(
    "/{cluster_id}/{uid}",
    response_model=JobDetail,
    summary="One job with its transition history",
    responses={404: {"description": "No such job (or it was pruned)"}},
)
async def get_job(_: ViewerDep, conn: ConnectionDep, cluster_id: str, uid: str) -> JobDetail:
    found = await queries.get_job(conn, cluster_id=cluster_id, uid=uid)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {uid!r} in cluster {cluster_id!r}")
    transitions = [TransitionPublic.model_validate(dict(row)) for row in found.transitions]
    return JobDetail(
        **JobPublic.model_validate(dict(found.job)).model_dump(),
        transitions=transitions,
        diagnosis_history=diagnosis_history(transitions),
    )


def diagnosis_history(transitions: list[TransitionPublic]) -> list[DiagnosisChange]:
    """The events where the diagnosis changed: appeared, moved (category, blame or its line), cleared.

    Transitions repeat the diagnosis as of their moment, so an unchanged one is left out.
    """
    changes: list[DiagnosisChange] = []
    last: tuple[str, str, str] | None = None
    for row in transitions:
        d = row.diagnosis
        key = (d.category.value, d.blame.value, d.summary) if d is not None else None
        if key == last:
            continue
        last = key
        changes.append(
            DiagnosisChange(
                event_id=row.event_id, sequence=row.sequence, change=row.change, phase=row.phase,
                observed_at=row.observed_at, diagnosis=d,
            )
        )  # fmt: skip
    return changes
