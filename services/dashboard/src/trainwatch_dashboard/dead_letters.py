"""Dead letters (issue 18 item 6): what the notifier gave up on, and a button to replay each.

The notifier owns them; the dashboard lists them with its viewer token and forwards the signed-in
user's own token to replay one, so the notifier decides (admin only) and logs that token's id.
The replay form posts from our own page and must pass the same-origin check (as silences do).
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from trainwatch_common.auth import token_id
from trainwatch_dashboard.backends import BackendError, BackendRefused
from trainwatch_dashboard.i18n import translator
from trainwatch_dashboard.pages import backend_problem
from trainwatch_dashboard.silences import admin_or_refusal, notifier_of
from trainwatch_dashboard.web import client_address, language_of, render, require_reader

log = logging.getLogger(__name__)
router = APIRouter()


@router.get("/dead-letters", response_class=HTMLResponse, dependencies=[Depends(require_reader)])
async def dead_letters_page(request: Request) -> HTMLResponse:
    problem: str | None = None
    letters: list[dict[str, Any]] = []
    next_after: int | None = None
    after = request.query_params.get("after", "0")
    try:
        letters, next_after = await notifier_of(request).dead_letters(
            after=int(after) if after.isdigit() else 0
        )
    except BackendError as exc:
        problem = backend_problem(request, exc)
    t = translator(language_of(request))
    notice = None
    outcome, seq = request.query_params.get("outcome"), request.query_params.get("seq", "")
    if outcome in ("sent", "already-sent", "refused-again", "not-sent-yet"):
        notice = t(f"dead_letters.outcome.{outcome}", seq=seq, detail=request.query_params.get("detail", ""))
    return render(
        request,
        "dead_letters.html",
        letters=letters,
        next_after=next_after,
        problem=problem or request.query_params.get("problem"),
        notice=notice,
    )


@router.post("/dead-letters/{seq}/replay")
async def replay_dead_letter(request: Request, seq: int) -> Response:
    token = await admin_or_refusal(request, "/dead-letters")
    if not isinstance(token, str):
        return token
    t = translator(language_of(request))
    try:
        result = await notifier_of(request).replay_dead_letter(seq, token=token)
    except BackendError as exc:
        if isinstance(exc, BackendRefused) and exc.status in (401, 403):
            message = t("dead_letters.needs_admin")
        else:
            message = backend_problem(request, exc)
        return RedirectResponse(f"/dead-letters?{urlencode({'problem': message})}", status_code=303)
    outcome = str(result.get("outcome", ""))
    log.info(
        "dead letter replayed",
        extra={"seq": seq, "outcome": outcome, "actor": token_id(token), "client": client_address(request)},
    )
    query = {"outcome": outcome, "seq": seq, "detail": str(result.get("detail", ""))}
    return RedirectResponse(f"/dead-letters?{urlencode(query)}", status_code=303)
