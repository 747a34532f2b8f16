"""Dependencies of the routes: the caller's role and a database connection."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from trainwatch_common.auth import ApiTokens, Role

log = logging.getLogger(__name__)
_bearer = HTTPBearer(auto_error=False, description="A viewer or admin token of the registry's token set")


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _failed(request: Request) -> None:
    """Log a failed authentication: who and where, never the token. (Limiting is the dashboard's,
    per browser address, and the edge's for direct API clients: see the registry's deps.)"""
    log.warning("authentication failed", extra={"client": _client(request), "path": request.url.path})


def require_viewer(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Role:
    tokens: ApiTokens = request.app.state.tokens
    role = tokens.role_of(credentials.credentials) if credentials is not None else None
    if role is None:
        _failed(request)
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "a valid bearer token is required",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if not ApiTokens.allows(role, Role.VIEWER):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, "this token may not read jobs (viewer or admin needed)"
        )
    return role


async def connection(request: Request) -> AsyncIterator[AsyncConnection]:
    engine: AsyncEngine = request.app.state.engine
    async with engine.connect() as conn:
        yield conn


ViewerDep = Annotated[Role, Depends(require_viewer)]
ConnectionDep = Annotated[AsyncConnection, Depends(connection)]
