"""WATCH: initial events, resumption, bookmarks, 410, sendInitialEvents, selectors, fan-out."""

from __future__ import annotations

import asyncio
from typing import Any

import kubesim

PJ = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs"
PJ_ALL = "/apis/kubeflow.org/v1/pytorchjobs"


def pj(name: str, namespace: str = "default", **labels: str) -> dict[str, Any]:
    return kubesim.manifest(kubesim.PYTORCHJOB, name, namespace, labels=labels)


def rv(ev: dict[str, Any]) -> int:
    return int(ev["object"]["metadata"]["resourceVersion"])


def is_end(ev: dict[str, Any]) -> bool:
    ann = ev["object"]["metadata"].get("annotations") or {}
    return ev["type"] == "BOOKMARK" and ann.get("k8s.io/initial-events-end") == "true"


async def test_plain_watch_initial_events_bookmark_and_changes(
    cluster: kubesim.Cluster, client: Any, watch: Any
) -> None:
    store = cluster.store
    store.create("PyTorchJob", pj("a"))
    store.create("PyTorchJob", pj("b"))
    async with watch(client, PJ, allowWatchBookmarks="true", timeoutSeconds="30") as w:
        first = await w.until(is_end)
        assert [e["type"] for e in first] == ["ADDED", "ADDED", "BOOKMARK"]
        end = first[-1]["object"]
        assert end == {
            "kind": "PyTorchJob",
            "apiVersion": "kubeflow.org/v1",
            "metadata": {
                "annotations": {"k8s.io/initial-events-end": "true"},
                "resourceVersion": str(store.resource_version),
            },
        }
        for phase in ("Created", "Running", "Succeeded"):
            store.patch_status(
                "PyTorchJob", "default", "a", {"conditions": [{"type": phase, "status": "True"}]}
            )
        mods = await w.until(
            lambda e: (
                e["type"] == "MODIFIED" and e["object"]["status"]["conditions"][0]["type"] == "Succeeded"
            )
        )
        mods = [e for e in mods if e["type"] == "MODIFIED"]
        assert len(mods) == 3
        assert rv(mods[0]) < rv(mods[1]) < rv(mods[2])
        store.delete("PyTorchJob", "default", "b")
        deleted = (await w.until(lambda e: e["type"] == "DELETED"))[-1]
        assert deleted["object"]["metadata"]["name"] == "b"
        assert rv(deleted) == store.resource_version
        # periodic bookmarks carry only the resourceVersion
        bm = (await w.until(lambda e: e["type"] == "BOOKMARK"))[-1]
        assert bm["object"]["metadata"] == {"resourceVersion": str(store.resource_version)}


async def test_watch_rv_zero_has_no_end_bookmark(cluster: kubesim.Cluster, client: Any) -> None:
    cluster.store.create("PyTorchJob", pj("a"))
    events = await client.watch(PJ, resourceVersion="0", timeoutSeconds="1")
    assert [e["type"] for e in events] == ["ADDED"]


async def test_watch_resumes_from_resource_version(cluster: kubesim.Cluster, client: Any) -> None:
    store = cluster.store
    store.create("PyTorchJob", pj("a"))
    start = store.resource_version
    store.patch_status("PyTorchJob", "default", "a", {"n": 1})
    store.create("TFJob", kubesim.manifest(kubesim.TFJOB, "other-kind", "default"))
    store.create("PyTorchJob", pj("c", "elsewhere"))
    store.delete("PyTorchJob", "default", "a")
    events = await client.watch(PJ, resourceVersion=str(start), max_events=2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("MODIFIED", "a"),
        ("DELETED", "a"),
    ]
    events = await client.watch(PJ_ALL, resourceVersion=str(start), max_events=3)
    assert [e["type"] for e in events] == ["MODIFIED", "ADDED", "DELETED"]


async def test_watch_too_old_gets_error_event_410(cluster: kubesim.Cluster, client: Any) -> None:
    store = cluster.store
    store.create("PyTorchJob", pj("a"))
    old = store.resource_version
    store.patch_status("PyTorchJob", "default", "a", {"n": 1})
    cluster.compact()
    events = await client.watch(PJ, resourceVersion=str(old - 1), timeoutSeconds="5")
    assert events == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"too old resource version: {old - 1} ({store.resource_version + 1})",
                "reason": "Expired",
                "code": 410,
            },
        }
    ]
    # The compacted point itself is still fine.
    assert await client.watch(PJ, resourceVersion=str(store.resource_version), timeoutSeconds="1") == []


async def test_bounded_history_expires_old_versions(sim: kubesim.Simulator, make_client: Any) -> None:
    c = await sim.add_cluster("small", tls=False, history_limit=3)
    client = make_client(c)
    c.store.create("PyTorchJob", pj("a"))
    start = c.store.resource_version
    for i in range(5):
        c.store.patch_status("PyTorchJob", "default", "a", {"n": i})
    events = await client.watch(PJ, resourceVersion=str(start), timeoutSeconds="1")
    assert events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410


async def test_send_initial_events(cluster: kubesim.Cluster, client: Any, watch: Any) -> None:
    store = cluster.store
    store.create("PyTorchJob", pj("a"))
    async with watch(
        client,
        PJ,
        sendInitialEvents="true",
        resourceVersionMatch="NotOlderThan",
        allowWatchBookmarks="true",
        resourceVersion="",
    ) as w:
        first = await w.until(is_end)
        assert [e["type"] for e in first] == ["ADDED", "BOOKMARK"]
        store.create("PyTorchJob", pj("b"))
        assert (await w.next())["type"] == "ADDED"  # type: ignore[index]
    code, body = await client.get(PJ, watch="1", sendInitialEvents="true")
    assert code == 422
    assert body["reason"] == "Invalid"
    code, body = await client.get(
        PJ, watch="1", sendInitialEvents="true", resourceVersionMatch="NotOlderThan"
    )
    assert code == 422
    assert "allowWatchBookmarks" in body["message"]
    code, body = await client.get(PJ, watch="1", resourceVersionMatch="NotOlderThan")
    assert code == 422


async def test_label_selector_transitions(cluster: kubesim.Cluster, client: Any, watch: Any) -> None:
    store = cluster.store
    store.create("PyTorchJob", pj("a", team="x"))
    start = store.resource_version
    store.patch("PyTorchJob", "default", "a", {"metadata": {"labels": {"team": "y"}}})  # leaves the selector
    store.patch("PyTorchJob", "default", "a", {"metadata": {"labels": {"team": "x"}}})  # enters it again
    store.patch_status("PyTorchJob", "default", "a", {"n": 1})
    store.delete("PyTorchJob", "default", "a")
    events = await client.watch(PJ, resourceVersion=str(start), labelSelector="team=x", max_events=4)
    assert [e["type"] for e in events] == ["DELETED", "ADDED", "MODIFIED", "DELETED"]
    events = await client.watch(
        PJ, resourceVersion=str(start), fieldSelector="metadata.name=zzz", timeoutSeconds="1"
    )
    assert events == []


async def test_timeout_ends_watch_after_a_final_bookmark(sim: kubesim.Simulator, make_client: Any) -> None:
    c = await sim.add_cluster("slowbm", tls=False, bookmark_interval=60)
    events = await make_client(c).watch(
        PJ, resourceVersion="0", allowWatchBookmarks="true", timeoutSeconds="3"
    )
    assert [e["type"] for e in events] == ["BOOKMARK"]


async def test_removing_a_kind_ends_its_watches(cluster: kubesim.Cluster, client: Any, watch: Any) -> None:
    cluster.store.create("PyTorchJob", pj("a"))
    async with watch(client, PJ, allowWatchBookmarks="true") as w:
        await w.until(is_end)
        cluster.remove_kind("PyTorchJob")
        assert (await w.next())["type"] == "DELETED"  # type: ignore[index]
        assert await w.next() is None  # the stream ends
    assert (await client.get(PJ))[0] == 404


async def test_fan_out_to_many_watchers(cluster: kubesim.Cluster, client: Any, watch: Any) -> None:
    n_watchers, n_events = 20, 200
    store = cluster.store
    store.create("PyTorchJob", pj("a"))
    start = store.resource_version

    async def consume() -> int:
        async with watch(client, PJ, resourceVersion=str(start)) as w:
            seen = 0
            while seen < n_events:
                ev = await w.next()
                assert ev is not None
                assert ev["object"]["status"]["n"] == seen
                seen += 1
            return seen

    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(consume()) for _ in range(n_watchers)]
        for i in range(n_events):
            store.patch_status("PyTorchJob", "default", "a", {"n": i})
            if i % 50 == 0:
                await asyncio.sleep(0)
    assert all(t.result() == n_events for t in tasks)


async def test_invalid_resource_version_is_400(client: Any) -> None:
    code, body = await client.get(PJ, watch="1", resourceVersion="abc")
    assert code == 400
    assert body["reason"] == "BadRequest"
