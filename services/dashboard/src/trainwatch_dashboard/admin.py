"""Sign-in, and cluster management for admins: add (test first), edit, rotate credentials, remove.

The dashboard holds no admin power of its own (unless an operator configures one for a
trusted local setup): a user signs in with their registry token, which the registry must accept
before it is kept in an HttpOnly, SameSite=Strict cookie; it is forwarded as the bearer token of
the calls that change clusters, so the registry decides what it may do. Pages never contain it
and nothing logs it. The forms post JSON from the page's script, so a pasted kubeconfig stays in
the browser's text box and is never echoed back. Every admin change is logged with the short id
of the token that made it (trainwatch_common.auth.token_id), the client address and the outcome.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from trainwatch_common.auth import token_id
from trainwatch_dashboard import presenters
from trainwatch_dashboard.backends import BackendError, BackendRefused
from trainwatch_dashboard.guard import TooManyFailures
from trainwatch_dashboard.i18n import translator
from trainwatch_dashboard.pages import backend_problem
from trainwatch_dashboard.web import (
    ADMIN_COOKIE,
    admin_token,
    client_address,
    language_of,
    render,
    require_session,
    same_origin,
    secure_cookie,
    signed_in,
    ui_of,
)

log = logging.getLogger(__name__)
router = APIRouter()


def _safe_next(target: str | None) -> str:
    """Only same-site paths: an open redirect after sign-in would be a phishing aid."""
    if target and target.startswith("/") and not target.startswith("//"):
        return target
    return "/clusters"


@router.get("/admin/signin", response_class=HTMLResponse)
async def signin_page(request: Request) -> HTMLResponse:
    return render(
        request,
        "signin.html",
        next=_safe_next(request.query_params.get("next")),
        refused=request.query_params.get("refused") == "1",
    )


@router.post("/admin/signin")
async def signin(request: Request) -> Response:
    if not same_origin(request):
        return Response(translator(language_of(request))("error.forbidden_origin"), status_code=403)
    # A plain urlencoded form: parsed here rather than pulling in python-multipart for two fields.
    fields = parse_qs((await request.body()).decode("utf-8", "replace"))
    token = (fields.get("token") or [""])[0].strip()
    target = _safe_next((fields.get("next") or [""])[0])
    again = f"/admin/signin?next={quote(target, safe='/')}"
    if not token:
        return RedirectResponse(again, status_code=303)
    # The registry must accept the token before a cookie is set: any string is not a sign-in.
    try:
        accepted = await ui_of(request).guard.verify(
            token, client=client_address(request), path="/admin/signin"
        )
    except TooManyFailures as exc:
        t = translator(language_of(request))
        return Response(t("signin.too_many"), status_code=429, headers={"Retry-After": str(exc.retry_after)})
    except BackendError as exc:
        return Response(backend_problem(request, exc), status_code=503)
    if not accepted:
        return RedirectResponse(f"{again}&refused=1", status_code=303)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        ADMIN_COOKIE,
        token,
        httponly=True,
        samesite="strict",
        secure=secure_cookie(request),
        max_age=8 * 3600,
    )
    return response


@router.post("/admin/signout")
async def signout(request: Request) -> Response:
    # Another site must not sign a user out either (a cross-site form post carries its Origin).
    if not same_origin(request):
        return Response(translator(language_of(request))("error.forbidden_origin"), status_code=403)
    response = RedirectResponse("/admin/signin", status_code=303)
    response.delete_cookie(ADMIN_COOKIE)
    return response


@router.get("/clusters/new", response_class=HTMLResponse, dependencies=[Depends(require_session)])
async def add_cluster_page(request: Request) -> Response:
    return render(request, "cluster_add.html")


@router.get(
    "/clusters/{cluster_id}/edit", response_class=HTMLResponse, dependencies=[Depends(require_session)]
)
async def edit_cluster_page(request: Request, cluster_id: str) -> Response:
    try:
        cluster = await ui_of(request).backends.registry.get_cluster(cluster_id)
    except BackendError as exc:
        # The registry's refusal of the id (404, 422) is the answer; 502 only when it failed.
        status = exc.status if isinstance(exc, BackendRefused) and 400 <= exc.status < 500 else 502
        return render(
            request,
            "cluster_edit.html",
            cluster=None,
            cluster_id=cluster_id,
            problem=backend_problem(request, exc),
            status_code=status,
        )
    return render(request, "cluster_edit.html", cluster=cluster, cluster_id=cluster_id, problem=None)


@router.post("/admin/kubeconfig/contexts")
async def kubeconfig_contexts(request: Request) -> JSONResponse:
    """Context names of a pasted kubeconfig, so the form can offer them; nothing else comes back.

    Only for a signed-in caller, checked before the body is read: parsing is work an anonymous
    visitor must not be able to make the dashboard do."""
    refusal = await _refusal(request)
    if refusal is not None:
        return refusal
    body = await _json_body(request)
    try:
        names, current = presenters.kubeconfig_contexts(str(body.get("kubeconfig") or ""))
    except ValueError as exc:
        return JSONResponse({"ok": False, "problems": [str(exc)]}, status_code=422)
    return JSONResponse({"ok": True, "contexts": names, "current": current})


@router.post("/admin/clusters/test")
async def test_new_cluster(request: Request) -> JSONResponse:
    async def call(token: str, body: dict[str, Any]) -> Any:
        spec = presenters.cluster_spec(body)
        registry = ui_of(request).backends.registry
        return await registry.create_cluster(spec, token=token, dry_run=True, force=_forced(body))

    return await _admin_call(request, call)


@router.post("/admin/clusters")
async def create_cluster(request: Request) -> JSONResponse:
    async def call(token: str, body: dict[str, Any]) -> Any:
        spec = presenters.cluster_spec(body)
        created = await ui_of(request).backends.registry.create_cluster(
            spec, token=token, force=_forced(body)
        )
        return {"redirect": f"/clusters?added={created.get('id', spec['id'])}"}

    return await _admin_call(request, call)


@router.post("/admin/clusters/{cluster_id}")
async def update_cluster(request: Request, cluster_id: str) -> JSONResponse:
    async def call(token: str, body: dict[str, Any]) -> Any:
        changes = presenters.metadata_changes(body)
        await ui_of(request).backends.registry.update_cluster(cluster_id, changes, token=token)
        return {"redirect": f"/clusters?updated={cluster_id}"}

    return await _admin_call(request, call)


@router.post("/admin/clusters/{cluster_id}/rotate")
async def rotate_credentials(request: Request, cluster_id: str) -> JSONResponse:
    async def call(token: str, body: dict[str, Any]) -> Any:
        changes: dict[str, Any] = {"kubeconfig": str(body.get("kubeconfig") or "")}
        if body.get("context"):
            changes["context"] = str(body["context"])
        registry = ui_of(request).backends.registry
        await registry.update_cluster(cluster_id, changes, token=token, force=_forced(body))
        return {"redirect": f"/clusters?updated={cluster_id}"}

    return await _admin_call(request, call)


@router.post("/admin/clusters/{cluster_id}/test")
async def test_cluster(request: Request, cluster_id: str) -> JSONResponse:
    async def call(token: str, _: dict[str, Any]) -> Any:
        return await ui_of(request).backends.registry.test_cluster(cluster_id, token=token)

    return await _admin_call(request, call)


@router.post("/admin/clusters/{cluster_id}/delete")
async def remove_cluster(request: Request, cluster_id: str) -> JSONResponse:
    async def call(token: str, body: dict[str, Any]) -> Any:
        if str(body.get("confirm") or "").strip() != cluster_id:
            raise ValueError(translator(language_of(request))("form.remove_confirm", id=cluster_id))
        await ui_of(request).backends.registry.delete_cluster(cluster_id, token=token)
        return {"redirect": f"/clusters?removed={cluster_id}"}

    return await _admin_call(request, call)


def _forced(body: dict[str, Any]) -> bool:
    """The form's "register / rotate anyway" after the registry refused the API server."""
    return body.get("force") in (True, "true")  # the checkbox posts "true"


async def _json_body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


async def _refusal(request: Request) -> JSONResponse | None:
    """The answer to a script's call that may not go ahead (another site, not signed in), else None."""
    t = translator(language_of(request))
    if not same_origin(request):
        return JSONResponse({"ok": False, "problems": [t("error.forbidden_origin")]}, status_code=403)
    try:
        if admin_token(request) is not None or await signed_in(request):
            return None
    except HTTPException as exc:  # 429 past the failure limit, 503 when the registry cannot say
        return JSONResponse(
            {"ok": False, "status": exc.status_code, "problems": [str(exc.detail)]},
            status_code=exc.status_code,
            headers=exc.headers,
        )
    response = JSONResponse({"ok": False, "signin": True, "problems": [t("signin.needed")]}, status_code=401)
    if request.cookies.get(ADMIN_COOKIE):
        response.delete_cookie(ADMIN_COOKIE)  # a token the registry no longer takes
    return response


async def _admin_call(
    request: Request, call: Callable[[str, dict[str, Any]], Awaitable[Any]]
) -> JSONResponse:
    """Run one registry call with the caller's token and answer the page's script in one shape:
    {"ok": true, "result": ...} or {"ok": false, "status": n, "problems": [...]}."""
    t = translator(language_of(request))
    refusal = await _refusal(request)
    if refusal is not None:
        return refusal
    token = admin_token(request)
    if token is None:  # not reached: _refusal let the request through only with a token
        return JSONResponse({"ok": False, "signin": True, "problems": [t("signin.needed")]}, status_code=401)
    body = await _json_body(request)
    # Who changed what, for the audit trail; never the token itself, nor the request body.
    audit = {"action": f"{request.method} {request.url.path}", "actor": token_id(token)}
    audit["client"] = client_address(request)
    try:
        result = await call(token, body)
    except ValueError as exc:  # our own form checks (labels, confirmation)
        return JSONResponse({"ok": False, "status": 422, "problems": [str(exc)]}, status_code=422)
    except BackendRefused as exc:
        log.info("admin change refused", extra={**audit, "status": exc.status})
        if exc.status == 403:  # a good token without the admin role: stay signed in, say why
            return JSONResponse(
                {"ok": False, "status": 403, "problems": [t("signin.not_admin")]}, status_code=403
            )
        if exc.status == 401:
            response = JSONResponse(
                {"ok": False, "signin": True, "status": 401, "problems": [t("signin.refused")]},
                status_code=403,
            )
            if request.cookies.get(ADMIN_COOKIE):
                response.delete_cookie(ADMIN_COOKIE)
            return response
        status = exc.status if 400 <= exc.status < 500 else 502
        answer: dict[str, Any] = {"ok": False, "status": exc.status, "problems": exc.problems}
        if exc.overridable:  # the form offers to go ahead anyway (force)
            answer["overridable"] = exc.overridable
        return JSONResponse(answer, status_code=status)
    except BackendError as exc:
        return JSONResponse({"ok": False, "problems": [backend_problem(request, exc)]}, status_code=502)
    if not str(audit["action"]).endswith("/test"):  # dry runs and connection tests change nothing
        log.info("admin change", extra=audit)
    return JSONResponse({"ok": True, "result": result})
