"""GET /v1/jobs (filtered, sorted, keyset-paginated) and GET /v1/jobs/{cluster_id}/{uid}."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status

from trainwatch_common import Phase
from trainwatch_common.events.diagnosis import Blame, DiagnosisCategory
from trainwatch_persister import queries
from trainwatch_persister.api import pagination
from trainwatch_persister.api.deps import ConnectionDep, ViewerDep
from trainwatch_persister.api.models import (
    DiagnosisChange,
    JobDetail,
    JobPublic,
    JobsPublic,
    TransitionPublic,
)
from trainwatch_persister.filters import JobFilters, SortField, SortOrder

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

MAX_PAGE_SIZE = 500

# A Kubernetes label key: an optional DNS-subdomain prefix and '/', then a name.
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def parse_labels(raw: list[str]) -> list[tuple[str, str]]:
    labels: list[tuple[str, str]] = []
    for item in raw:
        key, sep, value = item.partition("=")
        if not sep or not _LABEL_KEY.match(key) or len(key) > 317:
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                f"label filter {item!r} is not key=value with a Kubernetes label key",
            )
        labels.append((key, value))
    return labels


@router.get("", response_model=JobsPublic, summary="List jobs")
async def list_jobs(
    _: ViewerDep,
    conn: ConnectionDep,
    cluster: Annotated[list[str], Query(description="Cluster id (repeat for any of several)")] = [],  # noqa: B006
    namespace: Annotated[list[str], Query(description="Namespace (repeatable)")] = [],  # noqa: B006
    kind: Annotated[list[str], Query(description="Kind key, e.g. pytorchjob (repeatable)")] = [],  # noqa: B006
    phase: Annotated[list[Phase], Query(description="Phase (repeatable)")] = [],  # noqa: B006
    terminal: Annotated[
        bool | None, Query(description="Only finished (true) or unfinished (false) jobs")
    ] = None,
    deleted: Annotated[bool | None, Query(description="Only deleted (true) or live (false) jobs")] = None,
    owner: Annotated[str | None, Query(description="Owner, exactly")] = None,
    label: Annotated[list[str], Query(description="key=value; repeat for all of several")] = [],  # noqa: B006
    name: Annotated[str | None, Query(description="Substring of the job name, case-insensitive")] = None,
    created_after: Annotated[
        datetime | None, Query(description="created_at >= this (UTC if no zone)")
    ] = None,
    created_before: Annotated[datetime | None, Query(description="created_at < this")] = None,
    updated_after: Annotated[datetime | None, Query(description="updated_at >= this")] = None,
    updated_before: Annotated[datetime | None, Query(description="updated_at < this")] = None,
    diagnosis: Annotated[
        list[DiagnosisCategory],
        Query(description="Category of the current diagnosis, e.g. OOMKilled (repeatable = any of)"),
    ] = [],  # noqa: B006
    blame: Annotated[
        list[Blame], Query(description="Blame of the current diagnosis, e.g. infrastructure (repeatable)")
    ] = [],  # noqa: B006
    sort: Annotated[SortField, Query(description="Sort column")] = SortField.UPDATED_AT,
    order: Annotated[SortOrder | None, Query(description="Default: desc for times, asc for name")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = 50,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
) -> JobsPublic:
    filters = JobFilters(
        clusters=tuple(cluster),
        namespaces=tuple(namespace),
        kinds=tuple(kind),
        phases=tuple(p.value for p in phase),
        terminal=terminal,
        deleted=deleted,
        owner=owner,
        labels=tuple(parse_labels(label)),
        name_contains=name or None,
        created_after=created_after,
        created_before=created_before,
        updated_after=updated_after,
        updated_before=updated_before,
        diagnoses=tuple(c.value for c in diagnosis),
        blames=tuple(b.value for b in blame),
    )
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
