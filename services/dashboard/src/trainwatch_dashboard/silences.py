"""Silences (issue 18): the list with what they suppressed, a form to create one, expiry, and
the page a card's signed "silence this job for 1 h" link opens.

The notifier owns silences; the dashboard reads them with its viewer token and forwards the
signed-in user's own token to create or expire one, so the notifier decides (admin only) and
records that token's id as the author. Forms post urlencoded bodies from our own pages: each
POST must pass the same-origin check, and the sign-in cookie is SameSite=Strict.

The signed link: opening it (GET) only checks the signature and shows what would be silenced.
A chat app opens it as a cross-site navigation, which carries no SameSite=Strict cookie, so the
GET cannot know who is signed in, and a GET must not change anything anyway (CSRF). Confirming
posts the signed parameters back from our page (same-site: the cookie comes along); the link is
checked again, and the silence is created for 1 hour with the user's token.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from trainwatch_common import silence_links
from trainwatch_common.auth import token_id
from trainwatch_dashboard.backends import BackendError, BackendRefused, NotifierClient
from trainwatch_dashboard.i18n import translator
from trainwatch_dashboard.pages import backend_problem
from trainwatch_dashboard.web import (
    admin_token,
    client_address,
    language_of,
    render,
    require_reader,
    same_origin,
    signed_in,
    ui_of,
)

log = logging.getLogger(__name__)
router = APIRouter()
LINK_SILENCE_SECONDS = 3600
_LINK_PARAMS = ("cluster", "namespace", "kind", "name", "uid", "expires", "sig")


def notifier_of(request: Request) -> NotifierClient:
    client = ui_of(request).backends.notifier
    assert client is not None  # build_backends always makes one
    return client


async def _form(request: Request) -> dict[str, str]:
    # A plain urlencoded form, parsed here (as the sign-in form is).
    fields = parse_qs((await request.body()).decode("utf-8", "replace"), keep_blank_values=True)
    return {key: values[0].strip() for key, values in fields.items() if values}


def _labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"a label must be key=value, not {part.strip()!r}")
        labels[key.strip()] = value.strip()
    return labels


@router.get("/silences", response_class=HTMLResponse, dependencies=[Depends(require_reader)])
async def silences_page(request: Request) -> HTMLResponse:
    problem: str | None = None
    items: list[dict[str, Any]] = []
    suppressed: list[dict[str, Any]] = []
    try:
        items = await notifier_of(request).list_silences("all")
        suppressed = await notifier_of(request).suppressions(limit=100)
    except BackendError as exc:
        problem = backend_problem(request, exc)
    t = translator(language_of(request))
    notice = None
    if request.query_params.get("created"):
        notice = t("silences.created_notice", id=request.query_params["created"])
    elif request.query_params.get("expired"):
        notice = t("silences.expired_notice", id=request.query_params["expired"])
    return render(
        request,
        "silences.html",
        silences=items,
        suppressed=suppressed,
        problem=problem or request.query_params.get("problem"),
        notice=notice,
    )


async def admin_or_refusal(request: Request, back: str) -> str | Response:
    """The caller's token to forward, or the answer that sends them to sign in / refuses them."""
    t = translator(language_of(request))
    if not same_origin(request):
        return Response(t("error.forbidden_origin"), status_code=403)
    if not await signed_in(request) and admin_token(request) is None:
        return RedirectResponse(f"/admin/signin?next={quote(back, safe='/')}", status_code=303)
    token = admin_token(request)
    if token is None:
        return RedirectResponse(f"/admin/signin?next={quote(back, safe='/')}", status_code=303)
    return token


def _problem_redirect(request: Request, exc: Exception) -> Response:
    t = translator(language_of(request))
    if isinstance(exc, BackendRefused) and exc.status in (401, 403):
        message = t("silences.needs_admin")
    elif isinstance(exc, BackendError):
        message = backend_problem(request, exc)
    else:
        message = str(exc)
    return RedirectResponse(f"/silences?{urlencode({'problem': message})}", status_code=303)


@router.post("/silences")
async def create_silence(request: Request) -> Response:
    token = await admin_or_refusal(request, "/silences")
    if not isinstance(token, str):
        return token
    form = await _form(request)
    try:
        matchers: dict[str, Any] = {
            name: form[name]
            for name in ("cluster", "namespace", "kind", "job", "owner", "category")
            if form.get(name)
        }
        labels = _labels(form.get("labels", ""))
        if labels:
            matchers["labels"] = labels
        hours = float(form.get("hours") or "1")
        spec = {
            "matchers": matchers,
            "reason": form.get("reason", ""),
            "duration_seconds": max(1, int(hours * 3600)),
        }
        created = await notifier_of(request).create_silence(spec, token=token)
    except (ValueError, BackendError) as exc:
        return _problem_redirect(request, exc)
    log.info(
        "silence created",
        extra={"silence": created.get("id"), "actor": token_id(token), "client": client_address(request)},
    )
    return RedirectResponse(f"/silences?{urlencode({'created': created.get('id', '')})}", status_code=303)


@router.post("/silences/{silence_id}/expire")
async def expire_silence(request: Request, silence_id: str) -> Response:
    token = await admin_or_refusal(request, "/silences")
    if not isinstance(token, str):
        return token
    try:
        await notifier_of(request).expire_silence(silence_id, token=token)
    except BackendError as exc:
        return _problem_redirect(request, exc)
    log.info(
        "silence expired",
        extra={"silence": silence_id, "actor": token_id(token), "client": client_address(request)},
    )
    return RedirectResponse(f"/silences?{urlencode({'expired': silence_id})}", status_code=303)


def _verify(request: Request, params: dict[str, str]) -> silence_links.JobIdentity:
    secret = ui_of(request).settings.silence_link_secret.get_secret_value()
    job, _ = silence_links.verify(secret, {k: params.get(k, "") for k in _LINK_PARAMS})
    return job


@router.get(silence_links.LINK_PATH, response_class=HTMLResponse)
async def silence_link_page(request: Request) -> HTMLResponse:
    params = dict(request.query_params)
    t = translator(language_of(request))
    try:
        job = _verify(request, params)
    except silence_links.LinkRefused as exc:
        return render(
            request,
            "silence_confirm.html",
            job=None,
            problem=t("silence_link.refused", reason=str(exc)),
            status_code=403,
        )
    return render(
        request,
        "silence_confirm.html",
        job=job,
        link={k: params[k] for k in _LINK_PARAMS},
        problem=None,
    )


@router.post(silence_links.LINK_PATH)
async def confirm_silence_link(request: Request) -> Response:
    form = await _form(request)
    t = translator(language_of(request))
    back = f"{silence_links.LINK_PATH}?{urlencode({k: form.get(k, '') for k in _LINK_PARAMS})}"
    try:
        job = _verify(request, form)  # again: the form's fields are the browser's to change
    except silence_links.LinkRefused as exc:
        return Response(t("silence_link.refused", reason=str(exc)), status_code=403)
    token = await admin_or_refusal(request, back)
    if not isinstance(token, str):
        return token
    spec = {
        # The uid names exactly this job (a later job of the same name is another one).
        "matchers": {"cluster": job.cluster, "job": job.uid},
        "reason": form.get("reason") or f"silenced from a notification of {job.namespace}/{job.name}",
        "duration_seconds": LINK_SILENCE_SECONDS,
        # No author: the notifier names the token that creates it, the signed-in user's own.
    }
    try:
        created = await notifier_of(request).create_silence(spec, token=token)
    except BackendError as exc:
        return _problem_redirect(request, exc)
    log.info(
        "silence created from a link",
        extra={"silence": created.get("id"), "actor": token_id(token), "client": client_address(request)},
    )
    return RedirectResponse(f"/silences?{urlencode({'created': created.get('id', '')})}", status_code=303)
