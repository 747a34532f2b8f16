"""python -m trainwatch_dashboard: serve the dashboard from TRAINWATCH_* settings."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from types import FrameType

import uvicorn

from trainwatch_common.auth import refuse_weak_tokens
from trainwatch_common.observability.logging import configure_logging
from trainwatch_dashboard.app import create_app
from trainwatch_dashboard.settings import DashboardSettings


def main() -> None:
    settings = DashboardSettings()
    configure_logging(service="dashboard", level=settings.log_level, fmt=settings.log_format)
    configured = {
        "TRAINWATCH_DASHBOARD_API_TOKEN": settings.dashboard_api_token.get_secret_value(),
        "TRAINWATCH_DASHBOARD_ADMIN_TOKEN": settings.dashboard_admin_token.get_secret_value(),
    }
    try:  # a placeholder token such as replace-me stops the start with one clear line
        refuse_weak_tokens({name: [value] for name, value in configured.items() if value})
    except ValueError as exc:
        raise SystemExit(f"dashboard: {exc}") from None
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.http_host,
        port=settings.http_port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    DashboardServer(config, close_streams=app.state.broker.close_all).run()


class DashboardServer(uvicorn.Server):
    """uvicorn, but SIGTERM/SIGINT first ends the open SSE streams.

    A graceful shutdown waits for open responses to finish, and a live stream never finishes by
    itself; ending them at once lets the process stop in well under a second.
    """

    def __init__(self, config: uvicorn.Config, *, close_streams: Callable[[], None]) -> None:
        super().__init__(config)
        self._close_streams = close_streams
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._loop is not None:  # a signal handler: hand the work to the loop
            self._loop.call_soon_threadsafe(self._close_streams)
        super().handle_exit(sig, frame)


if __name__ == "__main__":
    main()
