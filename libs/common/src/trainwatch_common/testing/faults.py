"""Network faults between a client and a real server, for tests.

:class:`TcpProxy` forwards a loopback port to a server. A test can make it a black hole (what
the client sends is read and thrown away, as on a partition the client has not noticed yet) and
cut every connection (as a server restart or a reset does), so a fault can land between two
chosen writes instead of wherever a process kill happens to fall.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._blackholed = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._pumps: set[asyncio.Task[None]] = set()
        self._names = itertools.count(1)
        self.swallowed = bytearray()  # what the client sent while this was a black hole
        self.connections_accepted = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._on_client, "127.0.0.1", 0)

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def blackhole(self) -> None:
        """From now on, drop what clients send (the server's side still reaches them)."""
        self._blackholed = True

    def cut(self) -> None:
        """Close every open connection and forward normally again; clients may reconnect."""
        self._blackholed = False
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.cut()
        for pump in list(self._pumps):
            pump.cancel()
        for pump in list(self._pumps):
            with contextlib.suppress(BaseException):
                await pump
        if self._server is not None:
            await self._server.wait_closed()

    async def _on_client(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        self.connections_accepted += 1
        try:
            server_reader, server_writer = await asyncio.open_connection(*self._target)
        except OSError:
            client_writer.transport.abort()
            return
        self._writers.update((client_writer, server_writer))
        number = next(self._names)
        for name, pump in (
            (f"tcp-proxy-{number}-to-server", self._pump(client_reader, server_writer, to_server=True)),
            (f"tcp-proxy-{number}-to-client", self._pump(server_reader, client_writer, to_server=False)),
        ):
            task = asyncio.create_task(pump, name=name)
            self._pumps.add(task)
            task.add_done_callback(self._pumps.discard)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, to_server: bool
    ) -> None:
        try:
            while data := await reader.read(65536):
                if to_server and self._blackholed:
                    self.swallowed += data
                    continue
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()
