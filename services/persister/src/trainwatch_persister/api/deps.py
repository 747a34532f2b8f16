"""Dependencies of the routes: the caller's role and a database connection."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from trainwatch_common.api_auth import bearer_scheme, require_role
from trainwatch_common.auth import Role

log = logging.getLogger(__name__)
_bearer = bearer_scheme("A viewer or admin token of the registry's token set")


async def connection(request: Request) -> AsyncIterator[AsyncConnection]:
    engine: AsyncEngine = request.app.state.engine
    async with engine.connect() as conn:
        yield conn


ViewerDep = Annotated[Role, Depends(require_role(Role.VIEWER, _bearer, log))]
ConnectionDep = Annotated[AsyncConnection, Depends(connection)]
