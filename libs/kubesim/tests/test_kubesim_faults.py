"""Each fault knob does what it says."""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import Any

import aiohttp
import pytest

import kubesim
from trainwatch_common.testing.waiting import eventually

PJ = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs"


def pj(name: str) -> dict[str, Any]:
    return kubesim.manifest(kubesim.PYTORCHJOB, name, "default")


def is_end(ev: dict[str, Any]) -> bool:
    return ev["type"] == "BOOKMARK" and "annotations" in ev["object"]["metadata"]


async def _read_until_broken(w: Any) -> str:
    try:
        while (await w.next()) is not None:
            pass
    except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
        return "broken"
    return "eof"


async def test_drop_watches(cluster: kubesim.Cluster, client: Any, watch: Any) -> None:
    cluster.store.create("PyTorchJob", pj("a"))
    async with watch(client, PJ, allowWatchBookmarks="true") as w1, watch(client, PJ) as w2:
        await w1.until(is_end)
        assert (await w2.next())["type"] == "ADDED"  # type: ignore[index]
        await eventually(lambda: cluster.hub.count == 2)
        assert cluster.faults.drop_watches() == 2
        assert await _read_until_broken(w1) == "broken"  # no final chunk: the connection just dies
        assert await _read_until_broken(w2) == "broken"
    assert cluster.hub.count == 0
    assert (await client.get(PJ))[0] == 200  # the server itself is fine


async def test_delay(cluster: kubesim.Cluster, client: Any) -> None:
    cluster.faults.delay(0.3)
    t0 = time.monotonic()
    assert (await client.get(PJ))[0] == 200
    assert time.monotonic() - t0 >= 0.3
    cluster.faults.delay(0.3, duration=0)
    t0 = time.monotonic()
    await client.get(PJ)
    assert time.monotonic() - t0 < 0.3


@pytest.mark.parametrize(
    ("code", "reason"), [(429, "TooManyRequests"), (500, "InternalError"), (503, "ServiceUnavailable")]
)
async def test_error_responses(cluster: kubesim.Cluster, client: Any, code: int, reason: str) -> None:
    cluster.faults.error_responses(code, count=2)
    for _ in range(2):
        async with client.session.get(cluster.url + PJ, ssl=client.ssl, headers=client._headers()) as resp:
            body = await resp.json()
            assert resp.status == code
            assert body["code"] == code
            assert body["reason"] == reason
            if code in (429, 503):
                assert resp.headers["Retry-After"] == "1"
                assert body["details"]["retryAfterSeconds"] == 1
    assert (await client.get(PJ))[0] == 200
    cluster.faults.error_responses(code, seconds=30)
    assert (await client.get(PJ))[0] == code
    await cluster.faults.clear()
    assert (await client.get(PJ))[0] == 200


async def test_error_responses_only_for_the_requests_a_filter_accepts(
    cluster: kubesim.Cluster, client: Any
) -> None:
    """One kind of request fails (here: LISTs at an exact resourceVersion), the others go through,
    and only the failed ones are counted."""
    seen: list[tuple[str, str, dict[str, str]]] = []

    def exact_lists(method: str, path: str, query: Any) -> bool:
        seen.append((method, path, dict(query)))
        return query.get("resourceVersionMatch") == "Exact"

    cluster.faults.error_responses(500, count=2, only=exact_lists)
    assert (await client.get(PJ))[0] == 200
    assert cluster.faults.errors_left() == 2
    rv = (await client.get(PJ))[1]["metadata"]["resourceVersion"]
    for _ in range(2):
        assert (await client.get(PJ, resourceVersion=rv, resourceVersionMatch="Exact"))[0] == 500
    assert cluster.faults.errors_left() == 0
    assert (await client.get(PJ, resourceVersion=rv, resourceVersionMatch="Exact"))[0] == 200
    assert ("GET", PJ, {"resourceVersion": rv, "resourceVersionMatch": "Exact"}) in seen


async def test_refuse_connections(cluster: kubesim.Cluster, client: Any) -> None:
    port = cluster.port
    await cluster.faults.refuse_connections()
    with pytest.raises(aiohttp.ClientConnectorError):
        await client.get(PJ)
    await cluster.faults.accept_connections()
    assert cluster.port == port
    assert (await client.get(PJ))[0] == 200
    await cluster.faults.refuse_connections(seconds=0.2)
    with pytest.raises(aiohttp.ClientConnectorError):
        await client.get(PJ)

    async def up() -> bool:
        return (await client.get(PJ))[0] == 200

    await eventually(up, timeout=5)
    await cluster.faults.refuse_connections(seconds=30)  # still pending at teardown: the simulator cancels it


async def test_refuse_connections_kills_open_watches(
    cluster: kubesim.Cluster, client: Any, watch: Any
) -> None:
    async with watch(client, PJ, allowWatchBookmarks="true") as w:
        await w.until(is_end)
        await cluster.faults.refuse_connections()
        assert await _read_until_broken(w) == "broken"
    await cluster.faults.clear()


async def test_stall_watches(cluster: kubesim.Cluster, client: Any, watch: Any) -> None:
    store = cluster.store
    async with watch(client, PJ, allowWatchBookmarks="true") as w:
        await w.until(is_end)
        cluster.faults.stall_watches()
        store.create("PyTorchJob", pj("a"))
        with pytest.raises(TimeoutError):  # silent: no event, no bookmark, no close
            await w.next(wait=0.6)
        cluster.faults.unstall_watches()
        ev = (await w.until(lambda e: e["type"] != "BOOKMARK"))[-1]
        assert ev["type"] == "ADDED"
        assert ev["object"]["metadata"]["name"] == "a"
        cluster.faults.stall_watches(seconds=0.2)
        store.create("PyTorchJob", pj("b"))
        ev = (await w.until(lambda e: e["type"] != "BOOKMARK"))[-1]  # resumes by itself when the stall ends
        assert ev["object"]["metadata"]["name"] == "b"
    cluster.faults.stall_watches()
    async with watch(client, PJ, allowWatchBookmarks="true") as w:  # a new watch is silent from the start
        with pytest.raises(TimeoutError):
            await w.next(wait=0.4)
        cluster.faults.unstall_watches()
        assert [e["type"] for e in await w.until(is_end)] == ["ADDED", "ADDED", "BOOKMARK"]


async def test_rotate_token(cluster: kubesim.Cluster, make_client: Any) -> None:
    old = make_client(cluster, token=cluster.token)
    assert (await old.get(PJ))[0] == 200
    new_token = cluster.rotate_token()
    assert (await old.get(PJ))[0] == 401
    assert (await make_client(cluster, token=new_token).get(PJ))[0] == 200
    assert cluster.kubeconfig()["users"][0]["user"]["token"] == new_token


async def test_replace_ca(cluster: kubesim.Cluster, session: aiohttp.ClientSession) -> None:
    old_ctx = ssl.create_default_context(cadata=cluster.ca_pem.decode())  # type: ignore[union-attr]
    headers = {"Authorization": f"Bearer {cluster.token}"}
    async with session.get(cluster.url + PJ, ssl=old_ctx, headers=headers) as r:
        assert r.status == 200
    await cluster.replace_ca()
    async with aiohttp.ClientSession() as fresh:  # no pooled connection
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await fresh.get(cluster.url + PJ, ssl=old_ctx, headers=headers)
        new_ctx = ssl.create_default_context(cadata=cluster.ca_pem.decode())  # type: ignore[union-attr]
        async with fresh.get(cluster.url + PJ, ssl=new_ctx, headers=headers) as r:
            assert r.status == 200


async def test_plain_http_cluster(plain: kubesim.Cluster, make_client: Any) -> None:
    assert plain.url.startswith("http://")
    assert "certificate-authority-data" not in plain.kubeconfig()["clusters"][0]["cluster"]
    assert (await make_client(plain).get(PJ))[0] == 200


async def test_many_clusters_on_their_own_ports(sim: kubesim.Simulator, make_client: Any) -> None:
    clusters = [await sim.add_cluster(f"c{i}", tls=i % 2 == 0) for i in range(4)]
    assert len({c.port for c in clusters}) == 4
    clusters[1].store.create("PyTorchJob", pj("only-here"))
    counts = [len((await make_client(c).get(PJ))[1]["items"]) for c in clusters]
    assert counts == [0, 1, 0, 0]
    await sim.remove_cluster("c3")
    with pytest.raises(aiohttp.ClientConnectorError):
        await make_client(clusters[3]).get(PJ)
    await asyncio.sleep(0)
