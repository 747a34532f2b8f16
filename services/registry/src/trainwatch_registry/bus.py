"""The registry's NATS connection: connect with retries, create the streams, stay connected.

The API never waits for NATS: changes go to the outbox, and the relay publishes once the bus
is connected. ``connected`` tells the relay and the health consumer when they can work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from trainwatch_common.streams import ensure_clusters_bucket, ensure_streams

log = logging.getLogger(__name__)


def reraise_if_cancelling() -> None:
    """nats-py sometimes turns a cancellation into its own errors (or swallows it); a task that
    was asked to stop must stop, so every retry loop calls this before retrying."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class Bus:
    def __init__(self, servers: list[str], *, name: str, auth: dict[str, Any] | None = None) -> None:
        self._servers = servers
        self._name = name
        self._auth = auth or {}  # user/password or token (ServiceSettings.nats_auth); never logged
        self.client: Client | None = None
        self.js: JetStreamContext | None = None
        self.kv: KeyValue | None = None
        self.ready = asyncio.Event()  # streams and bucket exist; the client may be reconnecting

    @property
    def connected(self) -> bool:
        return self.ready.is_set() and self.client is not None and self.client.is_connected

    async def run(self) -> None:
        """Connect (retrying forever, with back-off), then hold the connection until cancelled."""
        delay = 0.2
        try:
            while True:
                try:
                    await self._connect()
                    break
                except (OSError, TimeoutError, nats.errors.Error) as exc:
                    reraise_if_cancelling()
                    log.warning("NATS not reachable yet", extra={"error": repr(exc), "retry_in": delay})
                    await self._close()
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
            reraise_if_cancelling()
            await asyncio.Event().wait()  # held open until cancelled; nats-py reconnects by itself
        finally:
            await self._close()

    async def _connect(self) -> None:
        # Keep hold of the client before connecting: a cancellation mid-handshake must still close it.
        client = self.client = Client()
        await client.connect(
            servers=self._servers,
            name=self._name,
            connect_timeout=2,
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            reconnect_time_wait=1,
            error_cb=self._on_error,
            disconnected_cb=self._on_disconnect,
            reconnected_cb=self._on_reconnect,
            **self._auth,
        )
        js = client.jetstream(timeout=5)
        await ensure_streams(js)
        self.kv = await ensure_clusters_bucket(js)
        self.js = js
        self.ready.set()
        log.info("connected to NATS", extra={"servers": self._servers})

    async def _close(self) -> None:
        client, self.client = self.client, None
        self.ready.clear()
        if client is not None and not client.is_closed:
            with contextlib.suppress(Exception):  # closing a half-open connection at shutdown
                await client.close()
            if client._transport is not None:  # a handshake cut short leaves the socket open
                client._transport.close()  # type: ignore[no-untyped-call]

    async def _on_error(self, exc: Exception) -> None:
        log.debug("NATS error", extra={"error": repr(exc)})

    async def _on_disconnect(self) -> None:
        log.warning("NATS disconnected")

    async def _on_reconnect(self) -> None:
        log.info("NATS reconnected")
