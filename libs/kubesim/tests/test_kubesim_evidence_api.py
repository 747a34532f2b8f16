"""The evidence APIs: pods, Events (both groups), pods/log, Kueue visibility, PodGroups, RBAC per resource."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import kubesim
from kubesim.objects import now

Client = Any  # conftest.Client: conftest modules are not importable when suites run together

PODS = "/api/v1/namespaces/default/pods"
EVENTS = "/api/v1/namespaces/default/events"
EVENTS_V1 = "/apis/events.k8s.io/v1/namespaces/default/events"


def pod(name: str, *, node: str | None = None, phase: str | None = None, **labels: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], "restartPolicy": "Never"},
    }
    if node:
        body["spec"]["nodeName"] = node
    if phase:
        body["status"] = {"phase": phase}
    return body


def names(body: dict[str, Any]) -> list[str]:
    return [i["metadata"]["name"] for i in body["items"]]


async def test_discovery_serves_core_kinds_and_gates_the_optional_ones(
    sim: kubesim.Simulator, make_client: Callable[..., Client]
) -> None:
    bare = make_client(await sim.add_cluster("bare", tls=False))
    full = make_client(
        await sim.add_cluster("full", tls=False, kueue=True, volcano_podgroups=True, coscheduling=True)
    )
    _, core = await bare.get("/api/v1")
    resources = {r["name"]: r for r in core["resources"]}
    assert {"pods", "pods/log", "pods/status", "events"} <= set(resources)
    assert resources["pods"]["shortNames"] == ["po"]
    assert resources["pods/log"]["verbs"] == ["get"]
    assert "events/status" not in resources
    _, apis = await bare.get("/apis")
    groups = {g["name"] for g in apis["groups"]}
    assert "events.k8s.io" in groups
    assert "" not in groups
    hidden = {"kueue.x-k8s.io", "visibility.kueue.x-k8s.io", "scheduling.volcano.sh", "scheduling.x-k8s.io"}
    assert not hidden & groups
    for path in ("/apis/kueue.x-k8s.io/v1beta1", "/apis/visibility.kueue.x-k8s.io/v1beta1"):
        assert (await bare.get(path))[0] == 404
    assert (await bare.get("/apis/kueue.x-k8s.io/v1beta1/workloads"))[0] == 404
    _, apis = await full.get("/apis")
    assert hidden <= {g["name"] for g in apis["groups"]}
    _, vis = await full.get("/apis/visibility.kueue.x-k8s.io/v1beta1")
    assert {r["name"] for r in vis["resources"]} >= {
        "clusterqueues/pendingworkloads",
        "localqueues/pendingworkloads",
    }
    _, kq = await full.get("/apis/kueue.x-k8s.io/v1beta1")
    assert {r["name"] for r in kq["resources"]} >= {"workloads", "workloads/status", "localqueues"}
    # Job kinds only: the evidence kinds are not scenarios' kinds.
    assert all(k.job for k in full.cluster.kinds)
    assert kubesim.POD in full.cluster.served
    # CRDs exist for the optional kinds, not for the built-in ones.
    _, crds = await full.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
    crd_names = set(names(crds))
    assert {
        "workloads.kueue.x-k8s.io",
        "podgroups.scheduling.volcano.sh",
        "podgroups.scheduling.x-k8s.io",
    } <= crd_names
    assert "pods" not in crd_names


async def test_serving_kueue_at_run_time_changes_discovery(
    sim: kubesim.Simulator, make_client: Callable[..., Client]
) -> None:
    c = make_client(await sim.add_cluster("c", tls=False))
    for spec in kubesim.KUEUE_KINDS:
        c.cluster.serve_kind(spec)
    _, apis = await c.get("/apis")
    assert "visibility.kueue.x-k8s.io" in {g["name"] for g in apis["groups"]}
    c.cluster.remove_kind(kubesim.WORKLOAD)
    _, apis = await c.get("/apis")
    assert "visibility.kueue.x-k8s.io" not in {g["name"] for g in apis["groups"]}


async def test_pods_list_with_label_and_field_selectors(client: Client) -> None:
    code, created = await client.request("POST", PODS, pod("a", node="n1", app="x"))
    assert code == 201
    assert created["status"] == {"phase": "Pending", "qosClass": "BestEffort"}  # set on create
    store = client.cluster.store
    store.create(kubesim.POD, pod("b", node="n2", phase="Running", app="x"))
    store.create(kubesim.POD, pod("c", phase="Pending", app="y"))
    _, body = await client.get("/api/v1/pods")
    assert body["kind"] == "PodList"
    assert "kind" not in body["items"][0]  # built-in list items carry no apiVersion/kind
    assert names(body) == ["a", "b", "c"]
    _, body = await client.get(PODS, labelSelector="app=x")
    assert names(body) == ["a", "b"]
    _, body = await client.get(PODS, fieldSelector="spec.nodeName=n2")
    assert names(body) == ["b"]
    _, body = await client.get(PODS, fieldSelector="spec.nodeName=")  # unscheduled pods
    assert names(body) == ["c"]
    _, body = await client.get(PODS, fieldSelector="status.phase!=Running,metadata.name!=c")
    assert names(body) == ["a"]
    _, body = await client.get(PODS, fieldSelector="status.phase=Running", labelSelector="app=x")
    assert names(body) == ["b"]
    code, body = await client.get(PODS, fieldSelector="status.reason=Evicted")
    assert (code, body["message"]) == (400, "field label not supported: status.reason")
    # A custom resource still answers with the CRD wording.
    code, body = await client.get("/apis/kubeflow.org/v1/pytorchjobs", fieldSelector="status.phase=x")
    assert code == 400
    assert "is not a known field selector" in body["message"]


async def test_pod_watch_follows_field_selector_membership(client: Client, watch: Any) -> None:
    store = client.cluster.store
    store.create(kubesim.POD, pod("p", phase="Pending"))
    async with watch(client, PODS, fieldSelector="status.phase=Running", allowWatchBookmarks="true") as w:
        first = await w.next()
        assert first is not None
        assert first["type"] == "BOOKMARK"  # no pod runs yet: only the initial-events-end bookmark
        store.patch_status(kubesim.POD, "default", "p", {"phase": "Running"})
        ev = await w.next()
        assert ev is not None
        assert (ev["type"], ev["object"]["metadata"]["name"]) == ("ADDED", "p")
        store.patch_status(kubesim.POD, "default", "p", {"phase": "Failed", "reason": "Evicted"})
        ev = await w.next()
        assert ev is not None
        assert ev["type"] == "DELETED"  # it left the selection
        assert ev["object"]["status"]["reason"] == "Evicted"


async def test_events_are_one_store_seen_through_two_apis(client: Client, watch: Any) -> None:
    store = client.cluster.store
    p = store.create(kubesim.POD, pod("p", node="n1"))
    rec = kubesim.Recorder(store)
    old = rec.record(
        p,
        "Warning",
        "BackOff",
        "Back-off restarting failed container main in pod p",
        component="kubelet",
        host="n1",
    )
    rec.record(
        p,
        "Warning",
        "BackOff",
        "Back-off restarting failed container main in pod p",
        component="kubelet",
        host="n1",
    )
    new = rec.record(
        p,
        "Warning",
        "FailedScheduling",
        "0/8 nodes are available",
        component="default-scheduler",
        style="events",
        action="Scheduling",
    )
    rec.record(p, "Normal", "Pulled", "Container image pulled", component="kubelet", host="n1")
    _, core = await client.get(EVENTS, fieldSelector="involvedObject.name=p,type=Warning")
    assert [e["reason"] for e in core["items"]] == ["BackOff", "FailedScheduling"]
    backoff = core["items"][0]
    assert backoff["count"] == 2
    assert backoff["source"] == {"component": "kubelet", "host": "n1"}
    assert backoff["firstTimestamp"]
    assert backoff["lastTimestamp"]
    assert backoff["eventTime"] is None
    assert backoff["involvedObject"]["uid"] == p["metadata"]["uid"]
    sched = core["items"][1]
    assert sched["eventTime"]
    assert sched["firstTimestamp"] is None
    assert "count" not in sched
    _, v1 = await client.get(EVENTS_V1, fieldSelector="regarding.name=p,type=Warning")
    assert v1["apiVersion"] == "events.k8s.io/v1"
    first = v1["items"][0]
    assert first["regarding"] == backoff["involvedObject"]
    assert first["note"] == backoff["message"]
    assert first["deprecatedCount"] == 2
    assert first["deprecatedSource"] == {"component": "kubelet", "host": "n1"}
    assert "message" not in first
    assert "involvedObject" not in first
    assert v1["items"][1]["reportingController"] == "default-scheduler"
    assert v1["items"][1]["action"] == "Scheduling"
    assert v1["metadata"]["resourceVersion"] == core["metadata"]["resourceVersion"]
    # The same object by name, with the same resourceVersion.
    _, one = await client.get(f"{EVENTS_V1}/{new['metadata']['name']}")
    assert one["kind"] == "Event"
    assert one["apiVersion"] == "events.k8s.io/v1"
    assert one["metadata"]["resourceVersion"] == new["metadata"]["resourceVersion"]
    # Field selectors: each API's own names; source falls back to reportingController.
    _, by_source = await client.get(EVENTS, fieldSelector="source=default-scheduler")
    assert [e["reason"] for e in by_source["items"]] == ["FailedScheduling"]
    _, by_controller = await client.get(EVENTS_V1, fieldSelector="reportingController=kubelet")
    assert {e["reason"] for e in by_controller["items"]} == {"BackOff", "Pulled"}
    code, body = await client.get(EVENTS_V1, fieldSelector="involvedObject.name=p")
    assert (code, body["message"]) == (400, "field label not supported: involvedObject.name")
    code, _ = await client.get(EVENTS, fieldSelector="regarding.name=p")
    assert code == 400
    # Watches of both APIs see the same change, each in its own shape.
    rv = old["metadata"]["resourceVersion"]
    async with watch(client, EVENTS_V1, resourceVersion=rv) as w:
        ev = await w.next()
        assert ev is not None
        assert ev["type"] == "MODIFIED"
        assert ev["object"]["deprecatedCount"] == 2
    # A create through events.k8s.io is a core/v1 Event too.
    body = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "x.1"},
        "eventTime": "2026-12-01T00:00:00.000000Z",
        "reportingController": "kueue",
        "reportingInstance": "kueue-1",
        "action": "Pending",
        "reason": "Pending",
        "note": "couldn't assign flavors",
        "type": "Warning",
        "regarding": {"kind": "Workload", "name": "w", "namespace": "default"},
    }
    code, created = await client.request("POST", EVENTS_V1, body)
    assert code == 201
    assert created["note"] == "couldn't assign flavors"
    _, core_one = await client.get(f"{EVENTS}/x.1")
    assert core_one["message"] == "couldn't assign flavors"
    assert core_one["involvedObject"]["kind"] == "Workload"
    assert core_one["reportingComponent"] == "kueue"


async def _logs_pod(cluster: kubesim.Cluster) -> None:
    store = cluster.store
    body = pod("p", node="n1")
    body["spec"]["containers"].append({"name": "side", "image": "busybox"})
    store.create(kubesim.POD, body)
    cluster.logs.write("containerd://old", ["old-1", "old-2"], at=1_800_000_000.0)
    cluster.logs.write("containerd://new", ["l1", "l2", "l3", "l4"], at=1_800_000_100.5)
    store.patch_status(
        kubesim.POD,
        "default",
        "p",
        {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "main",
                    "containerID": "containerd://new",
                    "restartCount": 1,
                    "state": {"running": {"startedAt": now()}},
                    "lastState": {
                        "terminated": {
                            "exitCode": 137,
                            "reason": "OOMKilled",
                            "containerID": "containerd://old",
                        }
                    },
                },
                {
                    "name": "side",
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}},
                    "lastState": {},
                },
            ],
        },
    )


async def test_pod_log_parameters(client: Client, session: Any) -> None:
    await _logs_pod(client.cluster)
    log = f"{PODS}/p/log"
    headers = {"Authorization": f"Bearer {client.cluster.token}"}
    async with session.get(
        client.cluster.url + log, params={"container": "main"}, ssl=client.ssl, headers=headers
    ) as resp:
        assert resp.status == 200
        assert resp.content_type == "text/plain"
        assert await resp.text() == "l1\nl2\nl3\nl4\n"
    assert (await client.get(log, container="main", tailLines="2")) == (200, "l3\nl4\n")
    assert (await client.get(log, container="main", tailLines="0"))[0] == 200
    assert (await client.get(log, container="main", limitBytes="4")) == (200, "l1\nl")
    assert (await client.get(log, container="main", previous="true")) == (200, "old-1\nold-2\n")
    _, stamped = await client.get(log, container="main", timestamps="true", tailLines="1")
    assert stamped == "2027-01-15T08:01:40.500000000Z l4\n"
    assert (await client.get(log, container="main", sinceTime="2027-01-15T08:01:00Z")) == (
        200,
        "l1\nl2\nl3\nl4\n",
    )
    code, body = await client.get(log)
    assert (code, body["reason"]) == (400, "BadRequest")
    assert body["message"] == "a container name must be specified for pod p, choose one of: [main side]"
    code, body = await client.get(log, container="nope")
    assert (code, body["message"]) == (400, "container nope is not valid for pod p")
    code, body = await client.get(log, container="side", previous="true")
    assert (code, body["message"]) == (400, 'previous terminated container "side" in pod "p" not found')
    code, body = await client.get(log, container="side")
    assert (code, body["message"]) == (
        400,
        'container "side" in pod "p" is waiting to start: trying and failing to pull image',
    )
    code, body = await client.get(log, container="main", tailLines="-1")
    assert (code, body["reason"]) == (422, "Invalid")
    assert "tailLines: Invalid value: -1: must be greater than or equal to 0" in body["message"]
    code, body = await client.get(log, container="main", limitBytes="0")
    assert code == 422
    code, body = await client.get(log, container="main", sinceSeconds="10", sinceTime="2027-01-01T00:00:00Z")
    assert code == 422
    code, body = await client.get(f"{PODS}/missing/log")
    assert (code, body["message"]) == (404, 'pods "missing" not found')
    client.cluster.store.create(kubesim.POD, pod("unscheduled"))
    assert (await client.get(f"{PODS}/unscheduled/log"))[0] == 204  # no node: no kubelet to ask


async def test_forbidden_per_resource(sim: kubesim.Simulator, make_client: Callable[..., Client]) -> None:
    cluster = await sim.add_cluster("rbac", tls=False, kueue=True, forbidden=["pods/log"])
    user = "system:serviceaccount:trainwatch:watcher"
    c = make_client(cluster, cluster.add_token(user=user))
    await _logs_pod(cluster)
    assert (await c.get(PODS))[0] == 200
    code, body = await c.get(f"{PODS}/p/log", container="main")
    assert (code, body["reason"]) == (403, "Forbidden")
    assert body["message"] == (
        f'pods "p" is forbidden: User "{user}" cannot get resource "pods/log" in API group "" '
        'in the namespace "default"'
    )
    cluster.forbid("pods")
    code, body = await c.get("/api/v1/pods")
    assert code == 403
    assert body["message"] == (
        f'pods is forbidden: User "{user}" cannot list resource "pods" in API group "" at the cluster scope'
    )
    assert body["details"] == {"group": "", "kind": "pods"}
    code, body = await c.get("/api/v1/pods", watch="1")
    assert code == 403
    assert "cannot watch resource" in body["message"]
    assert (await c.get(EVENTS))[0] == 200
    cluster.forbid("events")
    assert (await c.get(EVENTS))[0] == 403
    assert (await c.get(EVENTS_V1))[0] == 200  # a separate RBAC resource
    cluster.forbid("events.events.k8s.io")
    code, body = await c.get(EVENTS_V1)
    assert code == 403
    assert 'in API group "events.k8s.io"' in body["message"]
    assert (await c.get("/apis/kubeflow.org/v1/pytorchjobs"))[0] == 200  # jobs stay readable
    assert (await c.get("/api/v1"))[0] == 200  # discovery too
    cluster.forbid("clusterqueues/pendingworkloads.visibility.kueue.x-k8s.io")
    code, body = await c.get("/apis/visibility.kueue.x-k8s.io/v1beta1/clusterqueues/cq/pendingworkloads")
    assert code == 403
    cluster.allow("pods")
    assert (await c.get(PODS))[0] == 200


async def test_visibility_pending_workloads(
    sim: kubesim.Simulator, make_client: Callable[..., Client]
) -> None:
    cluster = await sim.add_cluster("kq", tls=False, kueue=True)
    c = make_client(cluster)
    store = cluster.store
    store.create(kubesim.CLUSTER_QUEUE, {"metadata": {"name": "cq"}, "spec": {}})
    for ns, lq in (("a", "lq"), ("b", "lq")):
        store.create(
            kubesim.LOCAL_QUEUE, {"metadata": {"name": lq, "namespace": ns}, "spec": {"clusterQueue": "cq"}}
        )
    for i, (ns, prio) in enumerate((("a", 0), ("b", 10), ("a", 0), ("b", 0))):
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"j{i}", "namespace": ns, "uid": f"u{i}"},
        }
        store.create(
            kubesim.WORKLOAD, kubesim.kueue_workload(job, "lq", [{"name": "main", "count": 1}], priority=prio)
        )
    admitted = store.list_objects(kubesim.WORKLOAD, "a")[0]
    store.patch_status(
        kubesim.WORKLOAD,
        "a",
        admitted["metadata"]["name"],
        {"conditions": [{"type": "QuotaReserved", "status": "True"}]},
    )
    base = "/apis/visibility.kueue.x-k8s.io/v1beta1"
    code, body = await c.get(f"{base}/clusterqueues/cq/pendingworkloads")
    assert code == 200
    assert body["kind"] == "PendingWorkloadsSummary"
    rows = [
        (i["metadata"]["namespace"], i["priority"], i["positionInClusterQueue"], i["positionInLocalQueue"])
        for i in body["items"]
    ]
    assert rows[0] == ("b", 10, 0, 0)  # higher priority first
    assert [r[2] for r in rows] == [0, 1, 2]
    assert sorted(r[0] for r in rows) == ["a", "b", "b"]
    assert body["items"][0]["metadata"]["ownerReferences"][0]["kind"] == "Job"
    _, local = await c.get(f"{base}/namespaces/b/localqueues/lq/pendingworkloads")
    assert [(i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in local["items"]] == [
        (0, 0),
        (1 if rows[1][0] == "b" else 2, 1),
    ]
    _, page = await c.get(f"{base}/clusterqueues/cq/pendingworkloads", limit="1", offset="1")
    assert [i["positionInClusterQueue"] for i in page["items"]] == [1]
    code, body = await c.get(f"{base}/clusterqueues/nope/pendingworkloads")
    assert (code, body["reason"]) == (404, "NotFound")
    code, _ = await c.get(f"{base}/namespaces/a/localqueues/nope/pendingworkloads")
    assert code == 404


@pytest.mark.parametrize("spec", [kubesim.VOLCANO_PODGROUP, kubesim.COSCHEDULING_PODGROUP], ids=str)
async def test_podgroups_list_and_watch(
    sim: kubesim.Simulator, make_client: Callable[..., Client], watch: Any, spec: kubesim.KindSpec
) -> None:
    cluster = await sim.add_cluster("pg", tls=False, volcano_podgroups=True, coscheduling=True)
    c = make_client(cluster)
    path = f"/apis/{spec.group}/{spec.version}/namespaces/default/podgroups"
    code, _ = await c.request(
        "POST",
        path,
        {
            "apiVersion": spec.api_version,
            "kind": "PodGroup",
            "metadata": {"name": "g"},
            "spec": {"minMember": 3},
        },
    )
    assert code == 201
    async with watch(c, path) as w:
        added = await w.next()
        assert added is not None
        assert added["type"] == "ADDED"
        cluster.store.patch_status(spec, "default", "g", {"phase": "Inqueue"})
        ev = await w.next()
        assert ev is not None
        assert ev["object"]["status"]["phase"] == "Inqueue"
