"""A database that is away answers 503, not 500 (issue 17).

During a PostgreSQL restart or failover the API's requests fail with connection errors: refused
connections, connections the server closed ("terminating connection due to administrator
command"), "the database system is starting up". Those are not the request's fault and they end
by themselves, so the answer is ``503 Service Unavailable`` with ``Retry-After``; the pool's
pre-ping then replaces the dead connections once the server is back. Any other database error
stays a 500.
"""

from __future__ import annotations

import errno
import logging
import socket

import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5

# SQLSTATE classes that mean "the server or the connection", not "this statement":
# 08 connection exception, 53 insufficient resources, 57 operator intervention (shutdown,
# "cannot connect now"), 40001/40P01 are not here: they are retried by their callers.
_UNAVAILABLE_SQLSTATE_CLASSES = ("08", "53", "57")
_UNREACHABLE_ERRNOS = {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.ETIMEDOUT}


def database_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` means the database cannot be reached right now (retrying later helps)."""
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError | sa.exc.DisconnectionError):
        return True
    if isinstance(exc, sa.exc.TimeoutError):  # the pool had no connection to give in time
        return True
    if isinstance(exc, ConnectionError | TimeoutError | socket.gaierror):  # refused, reset, timed out
        return True
    if isinstance(exc, OSError) and exc.errno in _UNREACHABLE_ERRNOS:
        return True
    for candidate in (exc, getattr(exc, "orig", None)):
        sqlstate = getattr(candidate, "sqlstate", None)
        if isinstance(sqlstate, str) and sqlstate[:2] in _UNAVAILABLE_SQLSTATE_CLASSES:
            return True
    return False


def _exception_classes() -> tuple[type[Exception], ...]:
    classes: list[type[Exception]] = [sa.exc.DBAPIError, sa.exc.TimeoutError, OSError, TimeoutError]
    try:  # asyncpg raises its own errors (unwrapped) while a new connection is being opened
        import asyncpg
    except ImportError:  # pragma: no cover - a service without PostgreSQL support
        return tuple(classes)
    classes += [asyncpg.PostgresError, asyncpg.InterfaceError]
    return tuple(classes)


def install_database_unavailable_handler(app: Starlette, *, service: str) -> None:
    """Answer 503 with ``Retry-After`` for every request that failed because the database is away."""

    async def unavailable(request: Request, exc: Exception) -> Response:
        if not database_unavailable(exc):
            raise exc
        log.warning(
            "database unavailable; answered 503",
            extra={"service": service, "path": request.url.path, "error": repr(exc)[:300]},
        )
        return JSONResponse(
            {"detail": "the database is unavailable; retry shortly"},
            status_code=503,
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )

    for cls in _exception_classes():
        app.add_exception_handler(cls, unavailable)
