"""Dependencies of the routes: the registry's services and the caller's role."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from trainwatch_common.auth import ApiTokens, Role, token_id
from trainwatch_registry.kubeconfig import SanitizedKubeconfig
from trainwatch_registry.lease_proofs import LeaseProofs
from trainwatch_registry.models import ConnectivityReport
from trainwatch_registry.registrations import Registry
from trainwatch_registry.settings import RegistrySettings

ConnectivityCheck = Callable[[SanitizedKubeconfig], Awaitable[ConnectivityReport]]


@dataclass(frozen=True, slots=True)
class Services:
    """What the lifespan builds and the routes use (kept on ``app.state.services``)."""

    settings: RegistrySettings
    registry: Registry
    check_connectivity: ConnectivityCheck
    lease_proofs: LeaseProofs | None = None  # None: any watcher-role caller reads any cluster


def get_services(request: Request) -> Services:
    services: Services | None = getattr(request.app.state, "services", None)
    if services is None:  # requests that arrive before start-up finished or after shutdown
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "the registry is starting or stopping")
    return services


ServicesDep = Annotated[Services, Depends(get_services)]

log = logging.getLogger(__name__)
_bearer = HTTPBearer(auto_error=False, description="A token from TRAINWATCH_{ADMIN,VIEWER,WATCHER}_TOKENS")


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _failed(request: Request) -> None:
    """Log a failed authentication: who and where, never the token.

    Not limited here: the dashboard checks every sign-in with this API, so a per-address limit
    would let ten bad sign-ins lock every user out; the dashboard limits per browser address,
    and direct API clients are for the edge (ingress) to rate-limit."""
    log.warning("authentication failed", extra={"client": _client(request), "path": request.url.path})


def _caller_role(required: Role) -> Callable[..., Awaitable[Role]]:
    async def caller_role(
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
        if not ApiTokens.allows(role, required):
            raise HTTPException(
                status.HTTP_403_FORBIDDEN, f"this needs the {required.value} role; you are {role.value}"
            )
        return role

    return caller_role


AdminDep = Annotated[Role, Depends(_caller_role(Role.ADMIN))]


@dataclass(frozen=True, slots=True)
class Actor:
    """Who made an admin change, for the audit log: the token's id (never the token) and address."""

    token: str
    client: str


async def _actor(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Actor:
    return Actor(token=token_id(credentials.credentials) if credentials else "-", client=_client(request))


ActorDep = Annotated[Actor, Depends(_actor)]
ViewerDep = Annotated[Role, Depends(_caller_role(Role.VIEWER))]
WatcherDep = Annotated[Role, Depends(_caller_role(Role.WATCHER))]
