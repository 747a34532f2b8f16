"""/healthz, /readyz and /metrics for every service.

A service with its own FastAPI app mounts ``health_routes(...)``; a service with no HTTP API
(the watcher) runs ``serve_health(...)`` beside its work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from trainwatch_common.tasks import ServiceTasks

log = logging.getLogger(__name__)

ReadinessCheck = Callable[[], Awaitable[bool] | bool]


def health_routes(
    checks: Mapping[str, ReadinessCheck] | None = None,
    registry: CollectorRegistry = REGISTRY,
    *,
    tasks: ServiceTasks | None = None,
) -> list[Route]:
    """Liveness is "the process answers"; readiness runs every named check and, given the
    service's ``tasks``, requires each of them running (the answer names every task's state)."""
    checks = dict(checks or {})

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> Response:
        results: dict[str, bool] = {}
        for name, check in checks.items():
            try:
                outcome = check()
                results[name] = bool(await outcome) if isinstance(outcome, Awaitable) else bool(outcome)
            except Exception as exc:  # a failing check means "not ready", never a 500
                log.debug("readiness check failed", extra={"check": name, "error": repr(exc)})
                results[name] = False
        ready = all(results.values())
        body: dict[str, object] = {"ready": ready, "checks": results}
        if tasks is not None:
            ready = ready and tasks.ready
            body.update(ready=ready, tasks=tasks.states())
        return JSONResponse(body, status_code=200 if ready else 503)

    async def metrics(_: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]


def health_app(checks: Mapping[str, ReadinessCheck] | None = None) -> Starlette:
    return Starlette(routes=health_routes(checks))


class EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves SIGINT/SIGTERM to the service that embeds it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class HealthServer:
    """Runs a health app under uvicorn until cancelled; ``port`` is known once started."""

    def __init__(self, app: Starlette, *, host: str, port: int) -> None:
        self._config = uvicorn.Config(
            app, host=host, port=port, log_config=None, access_log=False, lifespan="off"
        )
        self._server = EmbeddedServer(self._config)
        self.port: int | None = None

    async def serve(self, started: asyncio.Event | None = None) -> None:
        # A fresh server each time: a uvicorn server that has exited does not serve again, and
        # ServiceTasks restarts a crashed health server by calling this again.
        self._server = EmbeddedServer(self._config)
        serve_task = asyncio.create_task(self._server.serve(), name="health-server")
        try:
            while not self._server.started:
                if serve_task.done():
                    await serve_task  # re-raise a bind failure
                    return
                await asyncio.sleep(0.01)
            sockets = [s for server in self._server.servers for s in server.sockets]
            self.port = sockets[0].getsockname()[1] if sockets else None
            if started is not None:
                started.set()
            # Shielded: on cancellation uvicorn must still close its sockets in its own shutdown.
            await asyncio.shield(serve_task)
        finally:
            self._server.should_exit = True
            await asyncio.gather(serve_task, return_exceptions=True)
