"""What every page handler shares: the app's parts, the language, the admin token, rendering."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

import orjson
from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates

from trainwatch_dashboard import i18n, presenters
from trainwatch_dashboard.backends import Backends
from trainwatch_dashboard.live import Broker, LiveFeed
from trainwatch_dashboard.settings import DashboardSettings

ADMIN_COOKIE = "tw_admin"


@dataclass(slots=True)
class Ui:
    settings: DashboardSettings
    backends: Backends
    broker: Broker
    feed: LiveFeed
    templates: Jinja2Templates


def build_templates() -> Jinja2Templates:
    directory = resources.files("trainwatch_dashboard") / "templates"
    templates = Jinja2Templates(directory=str(directory))
    env = templates.env
    env.globals.update(
        format_time=presenters.format_time,
        format_duration=presenters.format_duration,
        job_duration=presenters.job_duration,
        phase_class=presenters.phase_class,
        query_string=presenters.query_string,
        format_labels=presenters.format_labels,
        sorted_phase_counts=presenters.sorted_phase_counts,
        PHASES=presenters.PHASES,
        KIND_CHOICES=presenters.KIND_CHOICES,
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


def admin_token(request: Request) -> str | None:
    """The admin token to forward: the signed-in admin's own, else the configured one, else none."""
    token = request.cookies.get(ADMIN_COOKIE)
    if token:
        return token
    configured = ui_of(request).settings.dashboard_admin_token.get_secret_value()
    return configured or None


def admin_mode(request: Request) -> str | None:
    if request.cookies.get(ADMIN_COOKIE):
        return "signed-in"
    return "configured" if ui_of(request).settings.dashboard_admin_token.get_secret_value() else None


def same_origin(request: Request) -> bool:
    """A state-changing request must come from our own pages (with the SameSite=Strict cookie,
    this keeps another site from driving an admin's browser)."""
    origin = request.headers.get("origin") or request.headers.get("referer")
    if not origin:
        return True  # non-browser clients (curl, tests) send neither; they hold the token anyway
    return urlsplit(origin).netloc == request.headers.get("host", request.url.netloc)


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
