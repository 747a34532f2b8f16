"""What every page handler shares: the app's parts, the language, who is signed in, rendering,
and the checks every request passes (its Host, the security headers of every answer)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import quote, urlsplit

import orjson
from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from trainwatch_dashboard import i18n, presenters
from trainwatch_dashboard.backends import BackendError, Backends
from trainwatch_dashboard.guard import SignInGuard, TooManyFailures
from trainwatch_dashboard.live import Broker, LiveFeed
from trainwatch_dashboard.settings import DashboardSettings

# The signed-in token (viewer or admin: the registry decides what it may do). The name is kept
# from when only admins signed in, so existing browsers' cookies still read.
ADMIN_COOKIE = "tw_admin"

# Our pages load only our own script and stylesheet and are never framed.
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)
# Probes and scrapers address a pod by its IP, and these answer nothing about jobs or clusters.
HOST_EXEMPT_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


@dataclass(slots=True)
class Ui:
    settings: DashboardSettings
    backends: Backends
    broker: Broker
    feed: LiveFeed
    templates: Jinja2Templates
    guard: SignInGuard


def build_templates() -> Jinja2Templates:
    directory = resources.files("trainwatch_dashboard") / "templates"
    templates = Jinja2Templates(directory=str(directory))
    env = templates.env
    env.globals.update(
        format_time=presenters.format_time,
        time_tag=presenters.time_tag,
        age_seconds=presenters.age_seconds,
        replica_progress=presenters.replica_progress,
        failing_since=presenters.failing_since,
        untracked=presenters.untracked,
        watch_state=presenters.watch_state,
        format_duration=presenters.format_duration,
        cluster_state=presenters.cluster_state,
        job_duration=presenters.job_duration,
        format_bytes=presenters.format_bytes,
        diagnosis_who=presenters.diagnosis_who,
        phase_class=presenters.phase_class,
        query_string=presenters.query_string,
        format_labels=presenters.format_labels,
        sorted_phase_counts=presenters.sorted_phase_counts,
        PHASES=presenters.PHASES,
        KIND_CHOICES=presenters.KIND_CHOICES,
        DIAGNOSIS_CATEGORIES=presenters.DIAGNOSIS_CATEGORIES,
    )
    return templates


def ui_of(request: Request) -> Ui:
    ui: Ui = request.app.state.ui
    return ui


def language_of(request: Request) -> str:
    return i18n.pick_language(
        request.query_params.get("lang"),
        request.cookies.get(i18n.LANG_COOKIE),
        request.headers.get("accept-language"),
    )


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


async def signed_in(request: Request) -> bool:
    """Whether the request's cookie holds a token the registry accepts (asked once per request).

    Raises HTTPException 429 past the failed-attempt limit and 503 when the registry cannot say.
    """
    known: bool | None = getattr(request.state, "signed_in", None)
    if known is not None:
        return known
    token = request.cookies.get(ADMIN_COOKIE)
    verdict = False
    if token:
        try:
            verdict = await ui_of(request).guard.verify(
                token, client=client_address(request), path=request.url.path
            )
        except TooManyFailures as exc:
            raise HTTPException(429, str(exc), headers={"Retry-After": str(exc.retry_after)}) from None
        except BackendError as exc:
            raise HTTPException(503, f"cannot check the sign-in now: {exc}") from None
    request.state.signed_in = verdict
    return verdict


def admin_configured(request: Request) -> bool:
    return bool(ui_of(request).settings.dashboard_admin_token.get_secret_value())


def _signin_location(request: Request) -> str:
    return f"/admin/signin?next={quote(request.url.path, safe='/')}"


def _stale_cookie_header() -> dict[str, str]:
    """A Set-Cookie that drops a cookie the registry no longer accepts."""
    response = Response()
    response.delete_cookie(ADMIN_COOKIE)
    return {"set-cookie": response.headers["set-cookie"]}


async def require_session(request: Request) -> None:
    """A dependency: a signed-in caller (or the trusted local admin token), else the sign-in page."""
    if admin_configured(request):
        return
    if await signed_in(request):
        return
    headers = _stale_cookie_header() if request.cookies.get(ADMIN_COOKIE) else {}
    if request.method == "GET" and not request.url.path.startswith("/events/"):
        raise HTTPException(303, "sign in first", headers={**headers, "location": _signin_location(request)})
    raise HTTPException(401, "sign in first", headers=headers)


async def require_reader(request: Request) -> None:
    """A dependency of the read pages: signed in, unless this is an open read-only demo."""
    if ui_of(request).settings.dashboard_public_read:
        return
    await require_session(request)


def admin_token(request: Request) -> str | None:
    """The admin token to forward: the signed-in caller's own, else the configured one, else none."""
    if getattr(request.state, "signed_in", False):
        return request.cookies.get(ADMIN_COOKIE)
    configured = ui_of(request).settings.dashboard_admin_token.get_secret_value()
    return configured or None


def admin_mode(request: Request) -> str | None:
    if getattr(request.state, "signed_in", False):
        return "signed-in"
    return "configured" if admin_configured(request) else None


def same_origin(request: Request) -> bool:
    """A state-changing request must come from our own pages (with the SameSite=Strict cookie,
    this keeps another site from driving an admin's browser). The Host it is compared with has
    passed the allowlist (HostAndHeaders), so a DNS-rebound name cannot make a match."""
    origin = request.headers.get("origin") or request.headers.get("referer")
    if not origin:
        return True  # non-browser clients (curl, tests) send neither; they hold the token anyway
    return urlsplit(origin).netloc == request.headers.get("host", request.url.netloc)


def secure_cookie(request: Request) -> bool:
    """Secure unless configured otherwise or, by default, plain http to a loopback address."""
    configured = ui_of(request).settings.secure_cookies
    if configured is not None:
        return configured
    return not (request.url.scheme == "http" and _is_loopback(request.url.hostname or ""))


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_of(header: str) -> str:
    """The host name of a Host header, without its port, lower case ("[::1]:80" -> "::1")."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class HostAndHeaders:
    """ASGI middleware: refuse a Host that is not ours, and add the security headers to every answer.

    DNS rebinding points an attacker's name at this server: the browser then sends that name as
    Host and as Origin, which agree, so the Origin check alone passes. Only the Host allowlist
    tells our names from theirs. Pure ASGI (not BaseHTTPMiddleware) so the SSE streams pass through.
    """

    def __init__(self, app: ASGIApp, *, allowed_hosts: frozenset[str]) -> None:
        self._app = app
        self._allowed = allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        host = host_of(headers.get(b"host", b"").decode("latin-1"))
        if host not in self._allowed and scope.get("path") not in HOST_EXEMPT_PATHS:
            refusal = Response("this dashboard does not answer to that host name\n", status_code=400)
            await refusal(scope, receive, self._with_headers(send))
            return
        await self._app(scope, receive, self._with_headers(send))

    @staticmethod
    def _with_headers(send: Send) -> Send:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(name, value) for name, value in SECURITY_HEADERS if name not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        return sending


def render(request: Request, template: str, *, status_code: int = 200, **context: Any) -> HTMLResponse:
    ui = ui_of(request)
    language = language_of(request)
    t = i18n.translator(language)
    params = {k: v for k, v in request.query_params.items() if k != "lang"}
    base = {
        "request": request,
        "lang": language,
        "t": t,
        "phase_label": lambda phase: i18n.phase_label(language, phase),
        "admin_mode": admin_mode(request),
        "other_lang": "en" if language == "zh-CN" else "zh-CN",
        "here_params": params,
        "client_messages": orjson.dumps(i18n.client_messages(language)).decode(),
        "settings": ui.settings,
    }
    response = ui.templates.TemplateResponse(request, template, {**base, **context}, status_code=status_code)
    remember_language(request, response)
    return response


def remember_language(request: Request, response: Response) -> None:
    chosen = request.query_params.get("lang")
    if chosen in i18n.LANGUAGES and chosen != request.cookies.get(i18n.LANG_COOKIE):
        response.set_cookie(i18n.LANG_COOKIE, chosen, max_age=365 * 86400, samesite="lax", httponly=True)
