"""A digest's own view (issue 18 item 5): the jobs one digest notification told of, exactly those,
in its order. The notifier records them; the card's "open" link is ``/digests/<id>``."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from trainwatch_dashboard.backends import BackendError, BackendRefused
from trainwatch_dashboard.pages import backend_problem
from trainwatch_dashboard.silences import notifier_of
from trainwatch_dashboard.web import render, require_reader

router = APIRouter()


@router.get("/digests/{digest_id}", response_class=HTMLResponse, dependencies=[Depends(require_reader)])
async def digest_page(request: Request, digest_id: str) -> HTMLResponse:
    try:
        digest = await notifier_of(request).digest(digest_id)
    except BackendRefused as exc:
        if exc.status in (404, 422):  # unknown, expired or not an id
            return render(request, "digest.html", digest=None, problem=None, status_code=404)
        return render(request, "digest.html", digest=None, problem=backend_problem(request, exc))
    except BackendError as exc:
        return render(request, "digest.html", digest=None, problem=backend_problem(request, exc))
    return render(request, "digest.html", digest=digest, problem=None)
