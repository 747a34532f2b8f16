"""Dependencies of the routes: the caller's role and a database connection."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from trainwatch_common.api_auth import bearer_scheme, require_role
from trainwatch_common.auth import Role

_bearer = bearer_scheme("A viewer or admin token of the registry's token set")


async def connection(request: Request) -> AsyncIterator[AsyncConnection]:
    engine: AsyncEngine = request.app.state.engine
    async with engine.connect() as conn:
        yield conn


ViewerDep = Annotated[Role, Depends(require_role(Role.VIEWER, _bearer))]
ConnectionDep = Annotated[AsyncConnection, Depends(connection)]
