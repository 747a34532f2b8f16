"""Behaviours observed on a real kube-apiserver v1.36.2 that kubesim once did differently
(``shared/reference/real-apiserver-behaviour.md``, issue 14)."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

import kubesim
from trainwatch_common.testing import eventually

PJ = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs"
JOBS = "/apis/batch/v1/namespaces/default/jobs"


def pj(name: str) -> dict[str, Any]:
    return kubesim.manifest(kubesim.PYTORCHJOB, name, "default")


async def _no_event_within(stream: Any, seconds: float) -> None:
    """Asserting an absence needs a window: nothing may arrive within it."""
    try:
        event = await stream.next(seconds)
    except TimeoutError:
        return
    raise AssertionError(f"unexpected {event}")


async def test_periodic_bookmarks_only_when_the_resource_changed(
    sim: kubesim.Simulator, make_client: Any, watch: Any
) -> None:
    c = await sim.add_cluster("bm", tls=False, bookmark_interval=0.1)
    c.store.create("PyTorchJob", pj("a"))
    c.store.create("Job", kubesim.manifest(kubesim.BATCH_JOB, "other", "default"))
    start = str(c.store.resource_version)
    async with watch(make_client(c), PJ, resourceVersion=start, allowWatchBookmarks="true") as w:
        # Idle resource: no bookmark, even though another resource (batch Jobs) changes.
        c.store.patch_status("Job", "default", "other", {"active": 1})
        await _no_event_within(w, 0.6)
        c.store.patch_status("PyTorchJob", "default", "a", {"n": 1})
        assert (await w.next())["type"] == "MODIFIED"  # type: ignore[index]
        bookmark = await w.next(2)
        assert bookmark is not None
        assert bookmark["type"] == "BOOKMARK"
        await _no_event_within(w, 0.6)  # and none again until the next change


async def test_no_periodic_bookmarks_without_the_watch_cache(
    sim: kubesim.Simulator, make_client: Any, watch: Any
) -> None:
    c = await sim.add_cluster("nocache", tls=False, bookmark_interval=0.1, watch_cache=False)
    c.store.create("PyTorchJob", pj("a"))
    start = str(c.store.resource_version)
    async with watch(make_client(c), PJ, resourceVersion=start, allowWatchBookmarks="true") as w:
        c.store.patch_status("PyTorchJob", "default", "a", {"n": 1})
        assert (await w.next())["type"] == "MODIFIED"  # type: ignore[index]
        await _no_event_within(w, 0.6)


async def test_watch_from_a_future_resource_version_is_200_and_silence(
    sim: kubesim.Simulator, make_client: Any, watch: Any
) -> None:
    c = await sim.add_cluster("future", tls=False, bookmark_interval=0.1)
    c.store.create("PyTorchJob", pj("a"))
    ahead = c.store.resource_version + 3
    async with watch(make_client(c), PJ, resourceVersion=str(ahead), allowWatchBookmarks="true") as w:
        for n in range(3):  # the server's revision reaches the requested one: still nothing
            c.store.patch_status("PyTorchJob", "default", "a", {"n": n})
        await _no_event_within(w, 0.5)
        c.store.patch_status("PyTorchJob", "default", "a", {"n": 3})  # passes it: delivered
        event = await w.next()
        assert event is not None
        assert event["type"] == "MODIFIED"
        assert int(event["object"]["metadata"]["resourceVersion"]) == ahead + 1


async def test_storage_initializing_429_on_first_use_of_a_crd_and_after_a_restart(
    sim: kubesim.Simulator, make_client: Any
) -> None:
    c = await sim.add_cluster("init", tls=False, storage_init_seconds=0.3)
    client = make_client(c)
    status, body = await client.get(PJ)
    assert status == 429
    assert body["message"] == "storage is (re)initializing"
    assert body["details"]["retryAfterSeconds"] == 1
    assert (await client.get(JOBS))[0] == 200  # built-in kinds are ready before the server is
    assert (await client.get("/apis"))[0] == 200  # discovery is not storage
    await _eventually_status(client, PJ, 200)
    await c.restart()
    assert (await client.get(JOBS))[0] == 429  # after a restart: every kind
    assert (await client.get(PJ))[0] == 429
    await _eventually_status(client, JOBS, 200)
    c.remove_kind("PyTorchJob")
    assert (await client.get(PJ))[0] == 404
    c.serve_kind(kubesim.PYTORCHJOB)  # a re-created CRD initializes again
    assert (await client.get(PJ))[0] == 429


async def _eventually_status(client: Any, path: str, want: int) -> None:
    async def answered() -> bool:
        return bool((await client.get(path))[0] == want)

    await eventually(answered, timeout=5, message=f"{path} answers {want}")


async def test_restart_forgets_the_watch_cache_history(sim: kubesim.Simulator, make_client: Any) -> None:
    c = await sim.add_cluster("restart", tls=False)
    c.store.create("PyTorchJob", pj("a"))
    old = c.store.resource_version
    c.store.patch_status("PyTorchJob", "default", "a", {"n": 1})
    await c.restart()
    events = await make_client(c).watch(PJ, resourceVersion=str(old - 1))
    assert [e["type"] for e in events] == ["ERROR"]
    assert events[0]["object"]["code"] == 410


async def test_etcd_restore_lowers_resource_versions_and_changes_objects(
    sim: kubesim.Simulator, make_client: Any, watch: Any
) -> None:
    c = await sim.add_cluster("restore", tls=False)
    c.store.create("PyTorchJob", pj("kept"))
    c.store.create("PyTorchJob", pj("deleted-later"))
    backup = c.backup()
    c.store.delete("PyTorchJob", "default", "deleted-later")
    c.store.create("PyTorchJob", pj("created-later"))
    for n in range(5):
        c.store.patch_status("PyTorchJob", "default", "kept", {"n": n})
    ahead = c.store.resource_version
    client = make_client(c)
    async with watch(client, PJ, resourceVersion=str(ahead), allowWatchBookmarks="true") as w:
        await c.restore(backup, restart=False)  # etcd swapped under a running server
        status, listing = await client.get(PJ)
        assert status == 200
        assert int(listing["metadata"]["resourceVersion"]) == backup.resource_version < ahead
        assert sorted(i["metadata"]["name"] for i in listing["items"]) == ["deleted-later", "kept"]
        c.store.create("PyTorchJob", pj("new-after-restore"))
        await _no_event_within(w, 0.5)  # the open watch is ahead of the server: silence
    await c.restore(backup)  # the usual procedure restarts the apiserver: watches drop
    assert c.hub.count == 0


async def test_batch_job_terminal_conditions_need_their_interim_condition(sim: kubesim.Simulator) -> None:
    c = await sim.add_cluster("jobs", tls=False)
    c.store.create("Job", kubesim.manifest(kubesim.BATCH_JOB, "j", "default"))

    def condition(kind: str) -> dict[str, str]:
        return {"type": kind, "status": "True", "reason": kind, "message": ""}

    for terminal, interim in (("Complete", "SuccessCriteriaMet"), ("Failed", "FailureTarget")):
        with pytest.raises(kubesim.ApiError) as refused:
            c.store.patch_status("Job", "default", "j", {"conditions": [condition(terminal)]})
        assert refused.value.code == 422
        assert f"cannot set {terminal}=True condition without the {interim}=true condition" in str(
            refused.value
        )
    c.store.patch_status("Job", "default", "j", {"conditions": [condition("FailureTarget")]})
    c.store.patch_status(
        "Job", "default", "j", {"conditions": [condition("FailureTarget"), condition("Failed")]}
    )
    # The scenario driver writes them in the real order.
    driver = kubesim.ScenarioDriver(c, seed=3, rate=None)
    await driver.run_lifecycle("Job", outcome="succeeded")
    await driver.run_lifecycle("Job", outcome="failed")


async def test_a_sigtermed_server_keeps_open_watch_streams_and_refuses_new_connections(
    sim: kubesim.Simulator, make_client: Any, watch: Any
) -> None:
    c = await sim.add_cluster("term", tls=False, bookmark_interval=0.1)
    c.store.create("PyTorchJob", pj("a"))
    start = str(c.store.resource_version)
    client = make_client(c)
    async with watch(client, PJ, resourceVersion=start, allowWatchBookmarks="true") as w:
        await c.terminate()
        with pytest.raises(aiohttp.ClientConnectionError):
            await make_client(c).get(PJ)  # a fresh session: no pooled connection
        c.store.patch_status("PyTorchJob", "default", "a", {"n": 1})
        await _no_event_within(w, 0.5)  # open, but nothing more comes
        assert c.hub.count == 1
        await c.restart(kill_old=False)  # the new process serves while the old one lingers
        assert (await make_client(c).get(PJ))[0] == 200
        assert c.hub.count == 1
        await c.kill_streams()  # SIGKILL: the connection is gone, without a last chunk
        with pytest.raises(aiohttp.ClientPayloadError):
            await w.next()


CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


async def test_crds_are_listed_and_watched_as_kinds_come_and_go(
    sim: kubesim.Simulator, make_client: Any, watch: Any
) -> None:
    c = await sim.add_cluster("crds", tls=False, kinds=[kubesim.PYTORCHJOB, kubesim.BATCH_JOB])
    client = make_client(c)
    status, listing = await client.get(CRDS)
    assert status == 200
    assert [i["metadata"]["name"] for i in listing["items"]] == ["pytorchjobs.kubeflow.org"]  # not batch
    start = listing["metadata"]["resourceVersion"]
    async with watch(client, CRDS, resourceVersion=start) as w:
        c.store.create("PyTorchJob", pj("a"))
        c.remove_kind("PyTorchJob")  # its objects are deleted, then the CRD
        c.serve_kind(kubesim.PYTORCHJOB)
        events = [await w.next() for _ in range(2)]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events if e] == [
        ("DELETED", "pytorchjobs.kubeflow.org"),
        ("ADDED", "pytorchjobs.kubeflow.org"),
    ]
    c.crds_readable = False  # RBAC without access to CRDs
    assert (await client.get(CRDS))[0] == 403
