from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
import pytest

import kubesim


class Client:
    """A minimal raw HTTP client for wire-level assertions."""

    def __init__(
        self, cluster: kubesim.Cluster, session: aiohttp.ClientSession, token: str | None = None
    ) -> None:
        self.cluster = cluster
        self.session = session
        self.token = token
        self.ssl: ssl.SSLContext | bool = (
            ssl.create_default_context(cadata=cluster.ca_pem.decode()) if cluster.ca_pem else False
        )

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        h = {"Accept": "application/json"}
        token = self.token if self.token is not None else self.cluster.token
        if token:
            h["Authorization"] = f"Bearer {token}"
        h.update(extra or {})
        return h

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        data = orjson.dumps(body) if body is not None else None
        async with self.session.request(
            method,
            self.cluster.url + path,
            data=data,
            params=params,
            ssl=self.ssl,
            headers=self._headers({"Content-Type": content_type} if data else None),
        ) as resp:
            raw = await resp.read()
            try:
                return resp.status, orjson.loads(raw)
            except orjson.JSONDecodeError:
                return resp.status, raw.decode()

    async def get(self, path: str, **params: str) -> tuple[int, Any]:
        return await self.request("GET", path, params=params or None)

    async def watch(self, path: str, *, max_events: int | None = None, **params: str) -> list[dict[str, Any]]:
        """Read a watch stream until it ends (or ``max_events``)."""
        events: list[dict[str, Any]] = []
        params = {"watch": "1", **params}
        async with self.session.get(
            self.cluster.url + path, params=params, ssl=self.ssl, headers=self._headers()
        ) as resp:
            assert resp.status == 200, await resp.text()
            async for line in resp.content:
                if line.strip():
                    events.append(orjson.loads(line))
                    if max_events is not None and len(events) >= max_events:
                        break
        return events


class WatchStream:
    """An open watch; ``await next()`` returns the next event (or None at the end)."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp

    async def next(self, wait: float = 5.0) -> dict[str, Any] | None:
        async with asyncio.timeout(wait):
            while True:
                line = await self.resp.content.readline()
                if not line:
                    return None
                if line.strip():
                    event: dict[str, Any] = orjson.loads(line)
                    return event

    async def until(self, pred: Callable[[dict[str, Any]], bool], wait: float = 5.0) -> list[dict[str, Any]]:
        """Events up to and including the first one matching ``pred``."""
        seen: list[dict[str, Any]] = []
        async with asyncio.timeout(wait):
            while True:
                ev = await self.next(wait)
                assert ev is not None, f"stream ended; saw {seen}"
                seen.append(ev)
                if pred(ev):
                    return seen


@contextlib.asynccontextmanager
async def open_watch(client: Client, path: str, **params: str) -> AsyncIterator[WatchStream]:
    async with client.session.get(
        client.cluster.url + path, params={"watch": "1", **params}, ssl=client.ssl, headers=client._headers()
    ) as resp:
        assert resp.status == 200, await resp.text()
        yield WatchStream(resp)


@pytest.fixture
async def sim() -> AsyncIterator[kubesim.Simulator]:
    async with kubesim.Simulator() as s:
        yield s


@pytest.fixture
async def cluster(sim: kubesim.Simulator) -> kubesim.Cluster:
    return await sim.add_cluster("alpha", tls=True, seed=1, bookmark_interval=0.2)


@pytest.fixture
async def plain(sim: kubesim.Simulator) -> kubesim.Cluster:
    return await sim.add_cluster("plain", tls=False, seed=2, bookmark_interval=0.2)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
def client(cluster: kubesim.Cluster, session: aiohttp.ClientSession) -> Client:
    return Client(cluster, session)


@pytest.fixture
def make_client(session: aiohttp.ClientSession) -> Callable[..., Client]:
    def make(cluster: kubesim.Cluster, token: str | None = None) -> Client:
        return Client(cluster, session, token)

    return make


@pytest.fixture
def watch() -> Callable[..., contextlib.AbstractAsyncContextManager[WatchStream]]:
    """``async with watch(client, path, **params) as stream``."""
    return open_watch
