"""The wire protocol: discovery, CRUD, Status errors, auth, LIST semantics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import kubesim
from kubesim.listing import decode_continue

PJ = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs"
PJ_ALL = "/apis/kubeflow.org/v1/pytorchjobs"


def pj(name: str, namespace: str = "default", **labels: str) -> dict[str, Any]:
    return kubesim.manifest(kubesim.PYTORCHJOB, name, namespace, labels=labels)


def _status(body: Any, code: int, reason: str) -> None:
    assert body["kind"] == "Status"
    assert body["apiVersion"] == "v1"
    assert body["status"] == "Failure"
    assert (body["code"], body["reason"]) == (code, reason), body


async def test_version_and_discovery(client: Any) -> None:
    code, v = await client.get("/version")
    assert code == 200
    assert v["major"] == "1"
    assert v["gitVersion"].startswith("v1.")
    _, api = await client.get("/api")
    assert api["kind"] == "APIVersions"
    assert api["versions"] == ["v1"]
    _, apis = await client.get("/apis")
    groups = {g["name"]: [v["version"] for v in g["versions"]] for g in apis["groups"]}
    assert groups["kubeflow.org"] == ["v1", "v2beta1"]
    assert {"batch", "trainer.kubeflow.org", "jobset.x-k8s.io", "batch.volcano.sh", "ray.io"} <= set(groups)
    _, rl = await client.get("/apis/kubeflow.org/v2beta1")
    assert [r["name"] for r in rl["resources"]] == ["mpijobs", "mpijobs/status"]
    _, rl = await client.get("/apis/batch.volcano.sh/v1alpha1")
    assert rl["resources"][0]["shortNames"] == ["vcjob", "vj"]
    code, body = await client.get("/apis/kubeflow.org/v9")
    assert code == 404
    _status(body, 404, "NotFound")


async def test_crud_round_trip(client: Any) -> None:
    code, created = await client.request("POST", PJ, {**pj("a"), "status": {"sneaky": True}})
    assert code == 201
    assert "status" not in created
    meta = created["metadata"]
    assert meta["uid"]
    assert meta["generation"] == 1
    assert meta["resourceVersion"]
    code, got = await client.get(f"{PJ}/a")
    assert code == 200
    assert got == created
    _, body = await client.request("POST", PJ, pj("a"))
    _status(body, 409, "AlreadyExists")
    assert body["message"] == 'pytorchjobs.kubeflow.org "a" already exists'
    # PATCH status (merge), then JSON patch of the spec.
    code, o = await client.request(
        "PATCH",
        f"{PJ}/a/status",
        {"status": {"conditions": [{"type": "Created"}]}},
        content_type="application/merge-patch+json",
    )
    assert code == 200
    assert o["status"]["conditions"] == [{"type": "Created"}]
    code, o = await client.request(
        "PATCH",
        f"{PJ}/a",
        [{"op": "replace", "path": "/spec/runPolicy/suspend", "value": True}],
        content_type="application/json-patch+json",
    )
    assert code == 200
    assert o["spec"]["runPolicy"]["suspend"] is True
    assert o["metadata"]["generation"] == 2
    # Strategic merge patch is not supported for custom resources (415), but is for batch Jobs.
    _, body = await client.request(
        "PATCH",
        f"{PJ}/a",
        {"metadata": {"labels": {"x": "y"}}},
        content_type="application/strategic-merge-patch+json",
    )
    _status(body, 415, "UnsupportedMediaType")
    # PUT with a stale resourceVersion conflicts; with the current one it works.
    stale = dict(created)
    _, body = await client.request("PUT", f"{PJ}/a", stale)
    _status(body, 409, "Conflict")
    o["metadata"]["labels"]["new"] = "1"
    code, o2 = await client.request("PUT", f"{PJ}/a", o)
    assert code == 200
    assert o2["metadata"]["labels"]["new"] == "1"
    o2["metadata"].pop("resourceVersion")
    _, body = await client.request("PUT", f"{PJ}/a", o2)
    _status(body, 422, "Invalid")
    code, gone = await client.request("DELETE", f"{PJ}/a")
    assert code == 200
    assert gone["metadata"]["name"] == "a"
    _, body = await client.get(f"{PJ}/a")
    _status(body, 404, "NotFound")
    assert body["details"] == {"name": "a", "group": "kubeflow.org", "kind": "pytorchjobs"}


async def test_batch_job_strategic_patch_and_list_items(client: Any) -> None:
    path = "/apis/batch/v1/namespaces/default/jobs"
    code, _ = await client.request("POST", path, kubesim.manifest(kubesim.BATCH_JOB, "j", "default"))
    assert code == 201
    code, o = await client.request(
        "PATCH",
        f"{path}/j",
        {"spec": {"suspend": True}},
        content_type="application/strategic-merge-patch+json",
    )
    assert code == 200
    assert o["spec"]["suspend"] is True
    _, lst = await client.get(path)
    assert lst["kind"] == "JobList"
    assert "kind" not in lst["items"][0]


async def test_bad_requests(client: Any) -> None:
    _, body = await client.request(
        "POST", PJ, {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "Bad_Name"}}
    )
    _status(body, 422, "Invalid")
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    _, body = await client.request("POST", PJ, {"kind": "TFJob", "metadata": {"name": "x"}})
    _status(body, 400, "BadRequest")
    _, body = await client.get(PJ, labelSelector="a in ()")
    _status(body, 400, "BadRequest")
    _, body = await client.get(PJ, fieldSelector="status.phase=Running")
    _status(body, 400, "BadRequest")
    _, body = await client.request("POST", "/apis/kubeflow.org/v1/pytorchjobs/x/y/z", {})
    _status(body, 404, "NotFound")


async def test_auth(cluster: kubesim.Cluster, make_client: Callable[..., Any]) -> None:
    bad = make_client(cluster, token="wrong")
    code, body = await bad.get(PJ)
    assert code == 401
    _status(body, 401, "Unauthorized")
    noperm = make_client(cluster, token=cluster.add_token(allowed=False))
    code, body = await noperm.get("/apis")
    assert code == 200  # discovery is allowed to every authenticated user
    _, body = await noperm.get(PJ)
    _status(body, 403, "Forbidden")
    assert (
        'cannot list resource "pytorchjobs" in API group "kubeflow.org" in the namespace' in body["message"]
    )
    anonymous = make_client(cluster, token="")
    assert (await anonymous.get("/version"))[0] == 200
    assert (await anonymous.get(PJ))[0] == 403


async def _seed(cluster: kubesim.Cluster, n: int) -> None:
    for i in range(n):
        ns = "default" if i % 2 == 0 else "other"
        cluster.store.create("PyTorchJob", pj(f"job-{i:02d}", ns, parity=str(i % 2), idx=str(i)))


async def test_list_selectors_and_namespaces(cluster: kubesim.Cluster, client: Any) -> None:
    await _seed(cluster, 10)
    _, lst = await client.get(PJ_ALL)
    assert lst["kind"] == "PyTorchJobList"
    assert len(lst["items"]) == 10
    assert int(lst["metadata"]["resourceVersion"]) == cluster.store.resource_version
    keys = [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in lst["items"]]
    assert keys == sorted(keys)
    _, lst = await client.get(PJ)
    assert {o["metadata"]["namespace"] for o in lst["items"]} == {"default"}
    _, lst = await client.get(PJ_ALL, labelSelector="parity=1,idx notin (1,3)")
    assert [o["metadata"]["name"] for o in lst["items"]] == ["job-05", "job-07", "job-09"]
    _, lst = await client.get(PJ_ALL, fieldSelector="metadata.name=job-04")
    assert [o["metadata"]["name"] for o in lst["items"]] == ["job-04"]
    _, lst = await client.get(PJ_ALL, fieldSelector="metadata.namespace=other")
    assert len(lst["items"]) == 5


async def test_list_paging_is_consistent(cluster: kubesim.Cluster, client: Any) -> None:
    await _seed(cluster, 7)
    _, page = await client.get(PJ_ALL, limit="3")
    assert len(page["items"]) == 3
    assert page["metadata"]["remainingItemCount"] == 4
    rv = page["metadata"]["resourceVersion"]
    assert decode_continue(page["metadata"]["continue"])[0] == int(rv)
    names = [o["metadata"]["name"] for o in page["items"]]
    cluster.store.create("PyTorchJob", pj("zzz-late"))  # after the snapshot: must not appear
    cluster.store.delete("PyTorchJob", "other", "job-05")  # still in the snapshot
    token = page["metadata"]["continue"]
    while token:
        code, page = await client.get(PJ_ALL, limit="3", **{"continue": token})
        assert code == 200
        assert page["metadata"]["resourceVersion"] == rv
        names += [o["metadata"]["name"] for o in page["items"]]
        token = page["metadata"].get("continue")
    assert sorted(names) == sorted(f"job-{i:02d}" for i in range(7))
    # A continue token older than the history is 410 Expired.
    _, page = await client.get(PJ_ALL, limit="3")
    cluster.store.patch_status("PyTorchJob", "default", "job-00", {"x": 1})
    cluster.compact()
    _, body = await client.get(PJ_ALL, limit="3", **{"continue": page["metadata"]["continue"]})
    _status(body, 410, "Expired")
    assert body["message"].startswith("The provided continue parameter is too old")


async def test_list_resource_version_semantics(cluster: kubesim.Cluster, client: Any) -> None:
    await _seed(cluster, 2)
    old_rv = cluster.store.resource_version
    cluster.store.create("PyTorchJob", pj("later"))
    for rv in ("", "0", str(old_rv)):
        code, lst = await client.get(PJ_ALL, resourceVersion=rv) if rv else await client.get(PJ_ALL)
        assert code == 200
        assert len(lst["items"]) == 3
    _, lst = await client.get(PJ_ALL, resourceVersion=str(old_rv), resourceVersionMatch="Exact")
    assert len(lst["items"]) == 2
    assert lst["metadata"]["resourceVersion"] == str(old_rv)
    _, body = await client.get(PJ_ALL, resourceVersionMatch="Exact")
    _status(body, 422, "Invalid")
    cluster.compact()
    _, body = await client.get(PJ_ALL, resourceVersion=str(old_rv), resourceVersionMatch="Exact")
    _status(body, 410, "Expired")
    assert body["message"] == "The resourceVersion for the provided list is too old."


@pytest.mark.parametrize("kind", kubesim.ALL_KINDS, ids=str)
async def test_every_kind_is_served(cluster: kubesim.Cluster, client: Any, kind: kubesim.KindSpec) -> None:
    base = f"/apis/{kind.group}/{kind.version}/namespaces/ns1/{kind.plural}"
    code, obj = await client.request("POST", base, kubesim.manifest(kind, "x", "ns1"))
    assert code == 201
    assert obj["kind"] == kind.kind
    assert obj["apiVersion"] == kind.api_version
    code, obj = await client.request(
        "PATCH", f"{base}/x/status", {"status": {"probe": 1}}, content_type="application/merge-patch+json"
    )
    assert code == 200
    assert obj["status"] == {"probe": 1}
    _, lst = await client.get(f"/apis/{kind.group}/{kind.version}/{kind.plural}")
    assert lst["kind"] == f"{kind.kind}List"
    assert len(lst["items"]) == 1


async def test_kinds_can_change_at_run_time(cluster: kubesim.Cluster, client: Any) -> None:
    mpi_v2 = "/apis/kubeflow.org/v2beta1/namespaces/default/mpijobs"
    assert (await client.get(mpi_v2))[0] == 200
    cluster.serve_kind(kubesim.MPIJOB_V1, replace=True)
    assert (await client.get(mpi_v2))[0] == 404
    assert (await client.get("/apis/kubeflow.org/v1/namespaces/default/mpijobs"))[0] == 200
    _, rl = await client.get("/apis/kubeflow.org/v1")
    assert "mpijobs" in [r["name"] for r in rl["resources"]]
    cluster.remove_kind("RayJob")
    assert (await client.get("/apis/ray.io/v1/rayjobs"))[0] == 404
    assert "ray.io" not in [g["name"] for g in (await client.get("/apis"))[1]["groups"]]
    cluster.serve_kind(kubesim.RAYJOB)
    assert (await client.get("/apis/ray.io/v1/rayjobs"))[0] == 200


async def test_raw_objects_are_served_as_stored(cluster: kubesim.Cluster, client: Any) -> None:
    cluster.store.put_raw(
        "PyTorchJob",
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "weird", "namespace": "default"},
            "status": {"conditions": "oops", "replicaStatuses": [1, 2]},
        },
    )
    _, obj = await client.get(f"{PJ}/weird")
    assert obj["status"] == {"conditions": "oops", "replicaStatuses": [1, 2]}
    _, lst = await client.get(PJ)
    assert lst["items"][0]["metadata"]["name"] == "weird"


async def test_delete_preconditions(cluster: kubesim.Cluster, client: Any) -> None:
    cluster.store.create("PyTorchJob", pj("a"))
    _, body = await client.request(
        "DELETE",
        f"{PJ}/a",
        {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "not-the-uid"}},
    )
    _status(body, 409, "Conflict")
    code, _ = await client.request("DELETE", f"{PJ}/a")
    assert code == 200
