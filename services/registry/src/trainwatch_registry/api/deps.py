"""Dependencies of the routes: the registry's services and the caller's role."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials

from trainwatch_common.api_auth import bearer_scheme, client_address, require_role
from trainwatch_common.auth import Role, token_id
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

_bearer = bearer_scheme("A token from TRAINWATCH_{ADMIN,VIEWER,WATCHER}_TOKENS")


AdminDep = Annotated[Role, Depends(require_role(Role.ADMIN, _bearer))]


@dataclass(frozen=True, slots=True)
class Actor:
    """Who made an admin change, for the audit log: the token's id (never the token) and address."""

    token: str
    client: str


async def _actor(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Actor:
    return Actor(
        token=token_id(credentials.credentials) if credentials else "-", client=client_address(request)
    )


ActorDep = Annotated[Actor, Depends(_actor)]
ViewerDep = Annotated[Role, Depends(require_role(Role.VIEWER, _bearer))]
WatcherDep = Annotated[Role, Depends(require_role(Role.WATCHER, _bearer))]
