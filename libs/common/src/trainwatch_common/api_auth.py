"""The bearer-token role check of the HTTP APIs (registry, persister), as FastAPI dependencies.

``require_role(Role.VIEWER, scheme)`` answers 401 (with ``WWW-Authenticate: Bearer``) for a
missing or unknown token and 403 for a token whose role does not grant the one required, and
gives the route the caller's role. The token set is the app's ``state.tokens`` (``ApiTokens``).
A failed authentication is logged with the client's address and the path, never the token.

Not rate-limited here: the dashboard checks every sign-in with these APIs, so a per-address limit
would let ten bad sign-ins lock every user out; the dashboard limits per browser address, and
direct API clients are for the edge (ingress) to rate-limit.
"""

# No "from __future__ import annotations": FastAPI reads the dependency's annotations at run
# time, and ``Depends(scheme)`` names a local of ``require_role`` that a string would lose.
import logging
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from trainwatch_common.auth import ApiTokens, Role

log = logging.getLogger(__name__)


def bearer_scheme(description: str) -> HTTPBearer:
    """The OpenAPI security scheme; a missing header is the dependency's to refuse (401, not 403)."""
    return HTTPBearer(auto_error=False, description=description)


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def require_role(required: Role, scheme: HTTPBearer) -> Callable[..., Awaitable[Role]]:
    """A dependency: the caller's role, if its bearer token grants ``required``."""

    async def caller_role(
        request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(scheme)]
    ) -> Role:
        tokens: ApiTokens = request.app.state.tokens
        role = tokens.role_of(credentials.credentials) if credentials is not None else None
        if role is None:
            log.warning(
                "authentication failed", extra={"client": client_address(request), "path": request.url.path}
            )
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                "a valid bearer token is required",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not ApiTokens.allows(role, required):
            raise HTTPException(
                status.HTTP_403_FORBIDDEN, f"this needs the {required.value} role; you are {role.value}"
            )
        return role

    return caller_role
