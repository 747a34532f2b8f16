"""Domain errors as HTTP answers. Every 422 names the problem in the shape FastAPI uses."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request, status
from fastapi.responses import JSONResponse

from trainwatch_registry.crypto import EncryptionKeyError
from trainwatch_registry.kubeconfig import KubeconfigRefused
from trainwatch_registry.registrations import ClusterConflict, ClusterNotFound, ServerConflict

log = logging.getLogger(__name__)

ERROR_RESPONSES: dict[int | str, dict[str, str]] = {
    401: {"description": "No or unknown bearer token"},
    403: {"description": "The token's role may not do this"},
}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(KubeconfigRefused)
    async def refused(_: Request, exc: KubeconfigRefused) -> JSONResponse:
        detail = [
            {"type": f"kubeconfig.{r.code}", "loc": ["body", "kubeconfig"], "msg": r.message}
            for r in exc.refusals
        ]
        return JSONResponse({"detail": detail}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)

    @app.exception_handler(ClusterNotFound)
    async def not_found(_: Request, exc: ClusterNotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=status.HTTP_404_NOT_FOUND)

    @app.exception_handler(ServerConflict)
    async def server_conflict(_: Request, exc: ServerConflict) -> JSONResponse:
        # In the 422 shape, so a client can tell it from a taken id by its type and offer force.
        ctx = {"reason": exc.reason, "server": exc.server, "clusters": exc.clusters}
        detail = [{"type": exc.code, "loc": ["body", "kubeconfig"], "msg": str(exc), "ctx": ctx}]
        return JSONResponse({"detail": detail}, status_code=status.HTTP_409_CONFLICT)

    @app.exception_handler(ClusterConflict)
    async def conflict(_: Request, exc: ClusterConflict) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=status.HTTP_409_CONFLICT)

    @app.exception_handler(EncryptionKeyError)
    async def undecryptable(_: Request, exc: EncryptionKeyError) -> JSONResponse:
        log.error("stored secret unreadable", extra={"error": str(exc)})
        return JSONResponse({"detail": str(exc)}, status_code=status.HTTP_500_INTERNAL_SERVER_ERROR)
