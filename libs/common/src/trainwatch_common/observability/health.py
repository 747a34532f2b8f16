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
from nats.aio.client import Client as NatsClient
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from trainwatch_common.tasks import ServiceTasks

log = logging.getLogger(__name__)

CheckOutcome = bool | str
"""What a readiness check answers: True or ``OK`` when ready; False ("not ready") or a string
saying what is wrong ("disconnected", "rules file not loaded yet"). /readyz returns the string as
is, so it must never carry a secret or a raw driver message (which can hold a DSN)."""
ReadinessCheck = Callable[[], Awaitable[CheckOutcome] | CheckOutcome]
OK = "ok"
CHECK_TIMEOUT = 2.0  # a dependency that does not answer within this is reported as such


def describe(outcome: CheckOutcome) -> str:
    """A check's outcome as /readyz shows it: "ok" or why not."""
    if outcome is True:
        return OK
    if outcome is False:
        return "not ready"
    return outcome


def nats_status(nc: NatsClient | None) -> str:
    """A NATS connection's state in /readyz's words."""
    if nc is None:
        return "not connected yet"
    if nc.is_connected:
        return OK
    if nc.is_reconnecting:
        return "disconnected, reconnecting"
    if nc.is_closed:
        return "closed"
    return "connecting"


def failure(exc: BaseException) -> str:
    """Why a dependency failed, by the exception's class only: its message may hold a DSN."""
    if isinstance(exc, TimeoutError):
        return f"no answer within {CHECK_TIMEOUT:g} s"
    return f"failing ({type(exc).__name__})"


async def _run_check(check: ReadinessCheck) -> str:
    try:
        async with asyncio.timeout(CHECK_TIMEOUT):
            outcome = check()
            return describe(await outcome if isinstance(outcome, Awaitable) else outcome)
    except Exception as exc:  # a failing check means "not ready", never a 500
        return failure(exc)


def health_routes(
    checks: Mapping[str, ReadinessCheck] | None = None,
    registry: CollectorRegistry = REGISTRY,
    *,
    tasks: ServiceTasks | None = None,
) -> list[Route]:
    """Liveness is "the process answers"; readiness runs every named check and, given the
    service's ``tasks``, requires each of them running.

    /readyz answers 200 when ready and 503 when not, with the same body either way:
    ``{"ready": bool, "checks": {name: "ok" or why not}, "tasks": {name: state}}``; with tasks,
    ``checks["tasks"]`` names those not running."""
    checks = dict(checks or {})

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> Response:
        results = {name: await _run_check(check) for name, check in checks.items()}
        body: dict[str, object] = {"checks": results}
        if tasks is not None:
            states = tasks.states()
            down = ", ".join(f"{name} {state}" for name, state in states.items() if state != "running")
            results["tasks"] = OK if tasks.ready else (f"not running: {down}" if down else "stopping")
            body["tasks"] = states
        ready = all(result == OK for result in results.values())
        for name, result in results.items():
            if result != OK:
                log.debug("not ready", extra={"check": name, "reason": result})
        return JSONResponse({"ready": ready, **body}, status_code=200 if ready else 503)

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
