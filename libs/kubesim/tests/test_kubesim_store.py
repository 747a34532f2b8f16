"""The store on its own: versions, history, compaction, the registry's write rules."""

from __future__ import annotations

import pytest

import kubesim
from kubesim.errors import ApiError
from kubesim.patches import apply_json_patch, merge_patch
from kubesim.selectors import parse_field_selector, parse_label_selector


def _store(**kw: object) -> kubesim.Store:
    return kubesim.Store(kubesim.ALL_KINDS, seed=3, **kw)  # type: ignore[arg-type]


def test_create_sets_system_metadata_and_counter() -> None:
    s = _store()
    a = s.create("PyTorchJob", kubesim.manifest(kubesim.PYTORCHJOB, "a", "default"))
    b = s.create("TFJob", kubesim.manifest(kubesim.TFJOB, "b", "ns1"))
    ma, mb = a["metadata"], b["metadata"]
    assert ma["generation"] == 1
    assert ma["uid"]
    assert ma["creationTimestamp"].endswith("Z")
    assert int(mb["resourceVersion"]) == int(ma["resourceVersion"]) + 1  # one counter per cluster
    assert a["apiVersion"] == "kubeflow.org/v1"
    assert a["kind"] == "PyTorchJob"
    with pytest.raises(ApiError) as e:
        s.create("PyTorchJob", kubesim.manifest(kubesim.PYTORCHJOB, "a", "default"))
    assert e.value.code == 409
    assert e.value.reason == "AlreadyExists"


def test_seeded_uids_are_reproducible() -> None:
    uids = []
    for _ in range(2):
        s = _store()
        uids.append(s.create("PyTorchJob", kubesim.manifest(kubesim.PYTORCHJOB, "a", "d"))["metadata"]["uid"])
    assert uids[0] == uids[1]


def test_generate_name_and_invalid_names() -> None:
    s = _store()
    obj = s.create("PyTorchJob", {"metadata": {"generateName": "train-"}, "spec": {}})
    assert obj["metadata"]["name"].startswith("train-")
    assert len(obj["metadata"]["name"]) == 11
    for bad in ({"metadata": {}}, {"metadata": {"name": "Upper_Case"}}):
        with pytest.raises(ApiError) as e:
            s.create("PyTorchJob", bad)
        assert e.value.code == 422
        assert e.value.reason == "Invalid"
    with pytest.raises(ApiError) as e:
        s.create("PyTorchJob", {"apiVersion": "kubeflow.org/v2", "metadata": {"name": "x"}})
    assert e.value.code == 400


def test_status_subresource_split_and_generation() -> None:
    s = _store()
    s.create(
        "PyTorchJob", {**kubesim.manifest(kubesim.PYTORCHJOB, "a", "d"), "status": {"x": 1}}, drop_status=True
    )
    assert "status" not in s.get("PyTorchJob", "d", "a")
    o = s.patch_status("PyTorchJob", "d", "a", {"conditions": [{"type": "Created", "status": "True"}]})
    assert o["metadata"]["generation"] == 1
    assert o["status"]["conditions"][0]["type"] == "Created"
    # A main-resource write ignores status; a spec change bumps generation.
    o = s.patch(
        "PyTorchJob", "d", "a", {"spec": {"runPolicy": {"suspend": True}}, "status": {"hacked": True}}
    )
    assert o["metadata"]["generation"] == 2
    assert "hacked" not in o["status"]
    # A status write ignores everything else.
    o = s.patch("PyTorchJob", "d", "a", {"spec": {"x": 1}, "status": {"y": 2}}, subresource="status")
    assert "x" not in o["spec"]
    assert o["status"]["y"] == 2
    assert o["metadata"]["generation"] == 2
    # Labels change metadata only: no generation bump.
    o = s.patch("PyTorchJob", "d", "a", {"metadata": {"labels": {"l": "v"}}})
    assert o["metadata"]["generation"] == 2
    assert o["metadata"]["labels"]["l"] == "v"


def test_update_conflict_and_noop() -> None:
    s = _store()
    o = s.create("PyTorchJob", kubesim.manifest(kubesim.PYTORCHJOB, "a", "d"))
    stale = dict(o)
    o2 = s.patch_status("PyTorchJob", "d", "a", {"p": 1})
    with pytest.raises(ApiError) as e:
        s.update("PyTorchJob", stale)
    assert e.value.code == 409
    assert e.value.reason == "Conflict"
    rv = s.resource_version
    assert s.update("PyTorchJob", o2)["metadata"]["resourceVersion"] == o2["metadata"]["resourceVersion"]
    assert s.resource_version == rv  # no-op writes do not bump the counter


def test_delete_with_finalizers() -> None:
    s = _store()
    body = kubesim.manifest(kubesim.PYTORCHJOB, "a", "d")
    body["metadata"]["finalizers"] = ["example.com/keep"]
    s.create("PyTorchJob", body)
    obj, gone = s.delete("PyTorchJob", "d", "a")
    assert not gone
    assert obj["metadata"]["deletionTimestamp"]
    obj["metadata"]["finalizers"] = []
    s.update("PyTorchJob", obj)
    with pytest.raises(ApiError) as e:
        s.get("PyTorchJob", "d", "a")
    assert e.value.code == 404


def test_history_is_bounded_and_compaction() -> None:
    s = _store(history_limit=5)
    start = s.resource_version
    for i in range(12):
        s.create("PyTorchJob", kubesim.manifest(kubesim.PYTORCHJOB, f"j{i}", "d"))
    assert s.compacted_rv == start + 7
    assert [e.rv for e in s.history_after(start + 7, 100)] == list(range(start + 8, start + 13))
    with pytest.raises(ApiError) as e:
        s.history_after(start + 6, 100)
    assert e.value.code == 410
    assert e.value.reason == "Expired"
    s.compact()
    assert s.compacted_rv == s.resource_version
    assert s.history_after(s.resource_version, 10) == []


def test_snapshot_at_an_older_resource_version() -> None:
    s = _store()
    s.create("PyTorchJob", kubesim.manifest(kubesim.PYTORCHJOB, "a", "d"))
    rv = s.resource_version
    s.create("PyTorchJob", kubesim.manifest(kubesim.PYTORCHJOB, "b", "d"))
    s.patch_status("PyTorchJob", "d", "a", {"x": 1})
    s.delete("PyTorchJob", "d", "a")
    at, objs = s.snapshot(s.spec("PyTorchJob"), rv)
    assert at == rv
    assert [o.name for o in objs] == ["a"]
    assert b'"x"' not in objs[0].data
    s.compact()
    with pytest.raises(ApiError) as e:
        s.snapshot(s.spec("PyTorchJob"), rv)
    assert e.value.code == 410


def test_put_raw_accepts_malformed_objects() -> None:
    s = _store()
    raw = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "m", "namespace": "d"},
        "status": {"conditions": "not-a-list", "replicaStatuses": 7},
    }
    out = s.put_raw("PyTorchJob", raw)
    assert out["status"]["conditions"] == "not-a-list"
    s.put_raw("PyTorchJob", {"kind": "PyTorchJob", "metadata": "garbage"}, namespace="d", name="g")
    assert {o["metadata"].get("name") for o in s.list_objects("PyTorchJob")} == {"m", None}


def test_kinds_mpijob_versions_are_exclusive() -> None:
    s = kubesim.Store(kubesim.ALL_KINDS)
    with pytest.raises(ValueError, match="already served"):
        s.serve_kind(kubesim.MPIJOB_V1)
    s.create("MPIJob", kubesim.manifest(kubesim.MPIJOB_V2BETA1, "m", "d"))
    s.serve_kind(kubesim.MPIJOB_V1, replace=True)
    assert s.spec("MPIJob") == kubesim.MPIJOB_V1
    assert s.list_objects("MPIJob") == []
    s.remove_kind("MPIJob")
    with pytest.raises(KeyError):
        s.spec("MPIJob")


def test_resolve_kind_names() -> None:
    assert kubesim.resolve_kind("pytorchjobs.kubeflow.org") is kubesim.PYTORCHJOB
    assert kubesim.resolve_kind("vcjob") is kubesim.VOLCANO_JOB
    assert kubesim.resolve_kind("Job") is kubesim.BATCH_JOB
    assert kubesim.resolve_kind("batch.volcano.sh/v1alpha1/Job") is kubesim.VOLCANO_JOB
    assert kubesim.resolve_kind("Pod") is kubesim.POD  # the evidence kinds resolve too
    assert kubesim.resolve_kind("events.events.k8s.io") is kubesim.EVENT_V1
    with pytest.raises(KeyError):
        kubesim.resolve_kind("Deployment")


def test_selectors() -> None:
    sel = parse_label_selector("app=web,tier!=db,env in (prod, staging),!legacy,team")
    assert sel.matches({"app": "web", "env": "prod", "team": "x"})
    assert not sel.matches({"app": "web", "env": "dev", "team": "x"})
    assert not sel.matches({"app": "web", "env": "prod", "team": "x", "legacy": "1"})
    for bad in ("app=", "a in ()", "=x", "a b"):
        if bad == "app=":
            assert parse_label_selector(bad).matches({"app": ""})
            continue
        with pytest.raises(ApiError):
            parse_label_selector(bad)
    f = parse_field_selector("metadata.name=a,metadata.namespace!=kube-system")
    assert f.matches("default", "a")
    assert not f.matches("kube-system", "a")
    assert not f.matches("default", "b")
    with pytest.raises(ApiError) as e:
        parse_field_selector("status.phase=Running")
    assert e.value.code == 400


def test_patches() -> None:
    doc = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    assert merge_patch(doc, {"a": {"b": None, "c": [3]}, "e": 2}) == {"a": {"c": [3]}, "d": 1, "e": 2}
    out = apply_json_patch(
        doc,
        [
            {"op": "add", "path": "/a/c/-", "value": 3},
            {"op": "remove", "path": "/d"},
            {"op": "replace", "path": "/a/b", "value": 5},
            {"op": "test", "path": "/a/b", "value": 5},
        ],
    )
    assert out == {"a": {"b": 5, "c": [1, 2, 3]}}
    with pytest.raises(ApiError):
        apply_json_patch(doc, [{"op": "test", "path": "/d", "value": 2}])
    with pytest.raises(ApiError):
        apply_json_patch(doc, [{"op": "replace", "path": "/zz", "value": 2}])


def test_batch_job_defaulting() -> None:
    s = _store()
    job = s.create("Job", {"metadata": {"name": "j"}, "spec": {"template": {"spec": {"containers": []}}}})
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert job["spec"]["backoffLimit"] == 6
    assert job["spec"]["completions"] == 1
    assert job["spec"]["suspend"] is False
    assert job["spec"]["template"]["metadata"]["labels"]["job-name"] == "j"
    assert job["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "j"
