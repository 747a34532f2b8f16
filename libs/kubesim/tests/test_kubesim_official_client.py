"""The official (synchronous) ``kubernetes`` client against kubesim over TLS, run in threads."""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.rest import ApiException

import kubesim

G, V, P = "kubeflow.org", "v1", "pytorchjobs"


@pytest.fixture
def api(cluster: kubesim.Cluster) -> k8s.ApiClient:
    return k8s_config.new_client_from_config_dict(cluster.kubeconfig())


def pj(name: str, namespace: str = "default") -> dict[str, Any]:
    return kubesim.manifest(kubesim.PYTORCHJOB, name, namespace)


async def test_list_and_page_custom_objects(cluster: kubesim.Cluster, api: k8s.ApiClient) -> None:
    for i in range(5):
        cluster.store.create("PyTorchJob", pj(f"job-{i}"))
    co = k8s.CustomObjectsApi(api)

    def pages() -> list[str]:
        names: list[str] = []
        token = None
        while True:
            kw = {"_continue": token} if token else {}
            page = co.list_namespaced_custom_object(G, V, "default", P, limit=2, **kw)
            names += [o["metadata"]["name"] for o in page["items"]]
            token = page["metadata"].get("continue")
            if not token:
                return names

    assert await asyncio.to_thread(pages) == [f"job-{i}" for i in range(5)]
    obj = await asyncio.to_thread(co.get_namespaced_custom_object, G, V, "default", P, "job-0")
    assert obj["metadata"]["uid"]
    created = await asyncio.to_thread(
        co.create_namespaced_custom_object, G, V, "default", P, pj("via-client")
    )
    assert created["metadata"]["generation"] == 1
    patched = await asyncio.to_thread(
        co.patch_namespaced_custom_object_status,
        G,
        V,
        "default",
        P,
        "via-client",
        {"status": {"conditions": [{"type": "Created", "status": "True"}]}},
    )
    assert patched["status"]["conditions"][0]["type"] == "Created"
    with pytest.raises(ApiException) as e:
        await asyncio.to_thread(co.get_namespaced_custom_object, G, V, "default", P, "nope")
    assert e.value.status == 404


async def test_batch_v1_api(cluster: kubesim.Cluster, api: k8s.ApiClient) -> None:
    cluster.store.create("Job", kubesim.manifest(kubesim.BATCH_JOB, "j1", "default"))
    cluster.store.patch_status(
        "Job", "default", "j1", {"active": 1, "ready": 1, "startTime": "2026-11-29T10:00:00Z"}
    )
    batch = k8s.BatchV1Api(api)
    jobs = await asyncio.to_thread(batch.list_namespaced_job, "default")
    assert [j.metadata.name for j in jobs.items] == ["j1"]
    assert jobs.items[0].status.ready == 1
    allj = await asyncio.to_thread(batch.list_job_for_all_namespaces)
    assert len(allj.items) == 1
    assert allj.metadata.resource_version
    job = await asyncio.to_thread(batch.read_namespaced_job_status, "j1", "default")
    assert job.status.active == 1


def _watch_into(q: queue.Queue[Any], stop: threading.Event, func: Any, *args: Any, **kwargs: Any) -> None:
    w = k8s_watch.Watch()
    try:
        for ev in w.stream(func, *args, **kwargs):
            q.put(ev)
            if stop.is_set():
                w.stop()
    except Exception as exc:
        q.put(exc)
    q.put(None)


async def _get(q: queue.Queue[Any]) -> Any:
    return await asyncio.to_thread(q.get, True, 10)


async def test_watch_bookmarks_resume_and_410(cluster: kubesim.Cluster, api: k8s.ApiClient) -> None:
    co = k8s.CustomObjectsApi(api)
    store = cluster.store
    store.create("PyTorchJob", pj("a"))
    q: queue.Queue[Any] = queue.Queue()
    stop = threading.Event()
    thread = asyncio.create_task(
        asyncio.to_thread(
            _watch_into,
            q,
            stop,
            co.list_namespaced_custom_object,
            G,
            V,
            "default",
            P,
            allow_watch_bookmarks=True,
            timeout_seconds=20,
        )
    )
    first = await _get(q)
    assert first["type"] == "ADDED"
    assert first["object"]["metadata"]["name"] == "a"
    bookmark = await _get(q)
    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["raw_object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    store.patch_status("PyTorchJob", "default", "a", {"conditions": [{"type": "Running", "status": "True"}]})
    ev = await _get(q)
    while ev["type"] == "BOOKMARK":
        ev = await _get(q)
    assert ev["type"] == "MODIFIED"
    assert ev["object"]["status"]["conditions"][0]["type"] == "Running"
    resume_from = ev["object"]["metadata"]["resourceVersion"]
    stop.set()
    store.patch_status("PyTorchJob", "default", "a", {"x": 1})  # wakes the stream so it sees stop
    while (await _get(q)) is not None:
        pass
    await thread
    # Resume from a resourceVersion: only what happened after it.
    store.patch_status("PyTorchJob", "default", "a", {"y": 2})
    q2: queue.Queue[Any] = queue.Queue()
    t2 = asyncio.create_task(
        asyncio.to_thread(
            _watch_into,
            q2,
            threading.Event(),
            co.list_namespaced_custom_object,
            G,
            V,
            "default",
            P,
            resource_version=resume_from,
            timeout_seconds=1,
        )
    )
    events = []
    while (ev := await _get(q2)) is not None:
        events.append(ev)
    await t2
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED"]
    assert events[-1]["object"]["status"]["y"] == 2
    # After compaction the same resumption is 410 Gone.
    cluster.compact()
    q3: queue.Queue[Any] = queue.Queue()
    t3 = asyncio.create_task(
        asyncio.to_thread(
            _watch_into,
            q3,
            threading.Event(),
            co.list_namespaced_custom_object,
            G,
            V,
            "default",
            P,
            resource_version=resume_from,
            timeout_seconds=5,
        )
    )
    err = await _get(q3)
    await _get(q3)
    await t3
    assert isinstance(err, ApiException)
    assert err.status == 410


async def test_batch_watch(cluster: kubesim.Cluster, api: k8s.ApiClient) -> None:
    batch = k8s.BatchV1Api(api)
    cluster.store.create("Job", kubesim.manifest(kubesim.BATCH_JOB, "j1", "default"))
    q: queue.Queue[Any] = queue.Queue()
    t = asyncio.create_task(
        asyncio.to_thread(
            _watch_into,
            q,
            threading.Event(),
            batch.list_namespaced_job,
            "default",
            resource_version="0",
            timeout_seconds=1,
        )
    )
    ev = await _get(q)
    assert ev["type"] == "ADDED"
    assert ev["object"].metadata.name == "j1"
    assert await _get(q) is None
    await t


async def test_unauthorized_client(cluster: kubesim.Cluster) -> None:
    api = k8s_config.new_client_from_config_dict(cluster.kubeconfig(token="nope"))
    with pytest.raises(ApiException) as e:
        await asyncio.to_thread(k8s.CustomObjectsApi(api).list_cluster_custom_object, G, V, P)
    assert e.value.status == 401
