"""The read-only pages (jobs, one job, clusters) and their live SSE streams."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse

from trainwatch_dashboard import presenters
from trainwatch_dashboard.backends import BackendError, BackendRefused, Page
from trainwatch_dashboard.i18n import translator
from trainwatch_dashboard.live import JobFilter, initial_health, sse_stream
from trainwatch_dashboard.web import language_of, render, require_reader, ui_of

# Every read page and stream shows API server URLs and job details: signed-in viewers only,
# unless the operator opted into an open read-only demo (TRAINWATCH_DASHBOARD_PUBLIC_READ).
router = APIRouter(dependencies=[Depends(require_reader)])

SORTS = ("updated_at", "created_at", "name")  # the query API's sort columns; its default order each


def backend_problem(request: Request, exc: BackendError) -> str:
    t = translator(language_of(request))
    if isinstance(exc, BackendRefused):
        return t("error.refused", service=exc.service, status=exc.status, message=exc.message)
    return t("error.unavailable", service=exc.service, message=exc.message)


@router.get("/", include_in_schema=False)
async def home(request: Request) -> Response:
    suffix = f"?lang={request.query_params['lang']}" if "lang" in request.query_params else ""
    return RedirectResponse(f"/overview{suffix}", status_code=303)


OVERVIEW_FILTERS = ("cluster", "namespace", "kind", "owner")
OVERVIEW_HOURS = (6, 24, 72, 168)
AGGREGATES = ("breakdown", "activity", "durations", "failure-reasons")


@router.get("/overview", response_class=HTMLResponse)
async def overview_page(request: Request) -> HTMLResponse:
    """Counts per phase, cluster and namespace, and the charts, for the page's filters."""
    ui = ui_of(request)
    params = request.query_params
    filters = {k: params[k].strip() for k in OVERVIEW_FILTERS if params.get(k, "").strip()}
    hours = int(params["hours"]) if params.get("hours", "").isdigit() else 24
    hours = hours if hours in OVERVIEW_HOURS else 24
    query = {**filters, "hours": hours}
    outcomes = await asyncio.gather(
        ui.backends.query.aggregate("breakdown", filters),
        *(ui.backends.query.aggregate(name, query) for name in AGGREGATES[1:]),
        ui.backends.registry.list_clusters(),
        return_exceptions=True,
    )
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, BackendError):
            raise outcome
    problem = next((backend_problem(request, o) for o in outcomes[:4] if isinstance(o, BackendError)), None)
    breakdown, activity, durations, reasons = (o if isinstance(o, dict) else {} for o in outcomes[:4])
    clusters = outcomes[4] if isinstance(outcomes[4], list) else []
    known = {str(c.get("id", "")) for c in clusters}
    return render(
        request,
        "overview.html",
        filters=filters,
        hours=hours,
        hour_choices=OVERVIEW_HOURS,
        clusters=sorted(known | set(breakdown.get("by_cluster", {})) | {filters.get("cluster", "")} - {""}),
        registered=known if isinstance(outcomes[4], list) else None,
        breakdown=breakdown,
        chart_data={"activity": activity, "durations": durations, "reasons": reasons},
        problem=problem,
    )


@router.get("/jobs", response_class=HTMLResponse)
async def jobs_page(request: Request) -> HTMLResponse:
    ui = ui_of(request)
    params = dict(request.query_params)
    filters = presenters.job_filters(params)
    sort = params.get("sort") if params.get("sort") in SORTS else None
    cursor = params.get("cursor") or None
    query = {**presenters.list_query(filters), "sort": sort, "cursor": cursor, "limit": ui.settings.page_size}
    problem: str | None = None
    began = time.perf_counter()
    # Both calls at once; each may fail on its own (the cluster filter then falls back to free text).
    jobs_result, clusters_result = await asyncio.gather(
        ui.backends.query.list_jobs(query), ui.backends.registry.list_clusters(), return_exceptions=True
    )
    page = jobs_result if isinstance(jobs_result, Page) else Page(items=[])
    clusters = clusters_result if isinstance(clusters_result, list) else []
    for outcome in (jobs_result, clusters_result):
        if isinstance(outcome, BaseException) and not isinstance(outcome, BackendError):
            raise outcome
    if isinstance(jobs_result, BackendError):
        problem = backend_problem(request, jobs_result)
    fetched = time.perf_counter()
    response = render(
        request,
        "jobs.html",
        page=page,
        filters=filters,
        sort=sort or "",
        cursor=cursor,
        # A removed cluster's jobs stay queryable: keep the filtered one in the choice.
        clusters=sorted(
            {str(c.get("id", "")) for c in clusters} | {v for k, v in filters.items() if k == "cluster"}
        ),
        problem=problem,
        # None when the registry did not answer: then no job is marked as no longer tracked.
        registered=[str(c.get("id", "")) for c in clusters] if isinstance(clusters_result, list) else None,
        export_query=presenters.query_string(presenters.list_query(filters)),
        page_size=ui.settings.page_size,
        live_filters=presenters.query_string(
            {
                k: v
                for k, v in filters.items()
                if k in ("cluster", "namespace", "kind", "phase", "owner", "label", "name")
            }
        ),
        # New jobs are inserted live only where they belong: the first page, newest first. Under
        # a diagnosis filter too: each event carries the job's current category, which the page
        # checks itself. The stream is not filtered by it, so a shown row whose category moved
        # away still gets its event and is marked as no longer matching.
        first_page=cursor is None and sort in (None, "updated_at"),
    )
    # Where the time went, for the browser's developer tools and the benchmark.
    backends_ms, render_ms = (fetched - began) * 1000, (time.perf_counter() - fetched) * 1000
    response.headers["Server-Timing"] = f"backends;dur={backends_ms:.1f}, render;dur={render_ms:.1f}"
    return response


@router.get("/jobs/{cluster_id}/{uid}", response_class=HTMLResponse)
async def job_page(request: Request, cluster_id: str, uid: str) -> HTMLResponse:
    ui = ui_of(request)
    try:
        job = await ui.backends.query.get_job(cluster_id, uid)
    except BackendRefused as exc:
        # The query API's refusal of the id (404, 422) is the answer; 502 only when it failed.
        status = exc.status if 400 <= exc.status < 500 else 502
        problem = None if exc.status == 404 else backend_problem(request, exc)
        return render(
            request,
            "job.html",
            status_code=status,
            job=None,
            problem=problem,
            cluster_id=cluster_id,
            uid=uid,
            transitions=[],
        )
    except BackendError as exc:
        return render(
            request,
            "job.html",
            status_code=502,
            job=None,
            cluster_id=cluster_id,
            uid=uid,
            problem=backend_problem(request, exc),
            transitions=[],
        )
    nested = job.get("job")
    current: dict[str, Any] = nested if isinstance(nested, dict) else job
    transitions = job.get("transitions") or current.get("transitions") or []
    try:
        registered: list[str] | None = [
            str(c.get("id", "")) for c in await ui.backends.registry.list_clusters()
        ]
    except BackendError:
        registered = None
    return render(
        request,
        "job.html",
        job=current,
        registered=registered,
        cluster_id=cluster_id,
        uid=uid,
        transitions=presenters.transitions_newest_first(transitions),
        problem=None,
    )


@router.get("/clusters", response_class=HTMLResponse)
async def clusters_page(request: Request) -> HTMLResponse:
    ui = ui_of(request)
    problem: str | None = None
    clusters_result, stats_result = await asyncio.gather(
        ui.backends.registry.list_clusters(), ui.backends.query.stats(), return_exceptions=True
    )
    for outcome in (clusters_result, stats_result):
        if isinstance(outcome, BaseException) and not isinstance(outcome, BackendError):
            raise outcome
    clusters = clusters_result if isinstance(clusters_result, list) else []
    if isinstance(clusters_result, BackendError):
        problem = backend_problem(request, clusters_result)
    # Counts are a nicety: without the query API the registry's view still shows.
    counts = presenters.phase_counts(stats_result) if isinstance(stats_result, dict) else {}
    rows = []
    for cluster in sorted(clusters, key=lambda c: str(c.get("id"))):
        cluster_id = str(cluster.get("id"))
        live = ui.feed.health.get(cluster_id)
        health = presenters.fresher_health(
            cluster.get("health") if isinstance(cluster.get("health"), dict) else None,
            live.model_dump(mode="json") if live else None,
        )
        rows.append({"cluster": cluster, "health": health, "counts": counts.get(cluster_id, {})})
    # Clusters removed from the registry whose jobs are still kept: their unfinished jobs are
    # no longer watched, and say so.
    registered = {str(c.get("id")) for c in clusters}
    removed = (
        sorted((c, n) for c, n in counts.items() if c not in registered and any(n.values()))
        if isinstance(clusters_result, list)
        else []
    )
    return render(
        request, "clusters.html", rows=rows, removed=removed, problem=problem, notice=_notice(request)
    )


def _notice(request: Request) -> str | None:
    t = translator(language_of(request))
    for key in ("added", "updated", "removed"):
        cluster_id = request.query_params.get(key)
        if cluster_id:
            return t(f"clusters.{key}", id=cluster_id)
    return None


EXPORT_FORMATS = {"csv": "text/csv; charset=utf-8", "json": "application/json"}


@router.get("/jobs/export.{fmt}", include_in_schema=False)
async def jobs_export(request: Request, fmt: str) -> Response:
    """What the jobs page's filters show, as CSV or JSON: streamed through from the query API
    (at most its bound of rows; X-Total-Count says how many matched)."""
    if fmt not in EXPORT_FORMATS:
        return Response("csv or json\n", status_code=404, media_type="text/plain")
    ui = ui_of(request)
    filters = presenters.job_filters(dict(request.query_params))
    query = {**presenters.list_query(filters), "format": fmt}
    opened = ui.backends.query.export(query)
    try:
        upstream = await opened.__aenter__()
    except BackendError as exc:
        return Response(backend_problem(request, exc) + "\n", status_code=502, media_type="text/plain")

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in upstream.aiter_bytes():
                yield chunk
        finally:
            await opened.__aexit__(None, None, None)

    headers = {
        "Content-Disposition": f'attachment; filename="trainwatch-jobs.{fmt}"',
        "Cache-Control": "no-store",
        **{k: upstream.headers[k] for k in ("x-total-count", "x-export-limit") if k in upstream.headers},
    }
    return StreamingResponse(body(), media_type=EXPORT_FORMATS[fmt], headers=headers)


@router.get("/events/jobs", include_in_schema=False)
async def job_events(request: Request) -> StreamingResponse:
    """Job changes matching the page's filters, as SSE ``event: job``."""
    ui = ui_of(request)
    params = request.query_params
    wanted = JobFilter(
        cluster=params.get("cluster") or None,
        namespace=params.get("namespace") or None,
        kind=params.get("kind") or None,
        phase=params.get("phase") or None,
        owner=params.get("owner") or None,
        name=params.get("name") or None,
        uid=params.get("uid") or None,
        label=params.get("label") or None,
    )
    subscriber = ui.broker.subscribe("job", wanted.matches)
    stream = sse_stream(ui.broker, subscriber, heartbeat=ui.settings.sse_heartbeat_seconds)
    return StreamingResponse(stream, media_type="text/event-stream", headers=_SSE_HEADERS)


@router.get("/events/health", include_in_schema=False)
async def health_events(request: Request) -> StreamingResponse:
    """Cluster health reports: the latest known for each cluster, then every new one."""
    ui = ui_of(request)
    subscriber = ui.broker.subscribe("health")
    stream = sse_stream(
        ui.broker, subscriber, heartbeat=ui.settings.sse_heartbeat_seconds, initial=initial_health(ui.feed)
    )
    return StreamingResponse(stream, media_type="text/event-stream", headers=_SSE_HEADERS)


_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
