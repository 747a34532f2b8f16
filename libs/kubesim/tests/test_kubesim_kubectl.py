"""``kubectl`` can get and patch the objects (over TLS, with the generated kubeconfig)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

import kubesim

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


async def _kubectl(kubeconfig: Path, cache: Path, *args: str) -> tuple[int, str, str]:
    assert KUBECTL is not None
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        f"--kubeconfig={kubeconfig}",
        f"--cache-dir={cache}",
        "--request-timeout=10s",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_kubectl_get_and_patch(cluster: kubesim.Cluster, tmp_path: Path) -> None:
    kc = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    cache = tmp_path / "cache"
    cluster.store.create("PyTorchJob", kubesim.manifest(kubesim.PYTORCHJOB, "train-1", "default"))
    cluster.store.create("vcjob", kubesim.manifest(kubesim.VOLCANO_JOB, "vc-1", "default"))

    rc, out, err = await _kubectl(kc, cache, "get", "pytorchjobs", "-o", "json")
    assert rc == 0, err
    items = json.loads(out)["items"]
    assert [i["metadata"]["name"] for i in items] == ["train-1"]

    rc, out, err = await _kubectl(kc, cache, "get", "pytorchjob", "train-1")
    assert (rc, "train-1" in out) == (0, True), err

    rc, out, err = await _kubectl(kc, cache, "get", "vcjob", "-A", "-o", "name")
    assert (rc, out.strip()) == (0, "job.batch.volcano.sh/vc-1"), err

    rc, out, err = await _kubectl(
        kc,
        cache,
        "patch",
        "pytorchjob",
        "train-1",
        "--type=merge",
        "-p",
        '{"metadata":{"labels":{"patched":"yes"}}}',
    )
    assert rc == 0, err
    assert cluster.store.get("PyTorchJob", "default", "train-1")["metadata"]["labels"]["patched"] == "yes"

    rc, out, err = await _kubectl(
        kc,
        cache,
        "patch",
        "pytorchjob",
        "train-1",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"conditions":[{"type":"Running","status":"True"}]}}',
    )
    assert rc == 0, err
    status = cluster.store.get("PyTorchJob", "default", "train-1")["status"]
    assert status["conditions"][0]["type"] == "Running"

    rc, out, err = await _kubectl(
        kc,
        cache,
        "patch",
        "pytorchjob",
        "train-1",
        "--type=json",
        "-p",
        '[{"op":"add","path":"/spec/runPolicy/suspend","value":true}]',
    )
    assert rc == 0, err
    assert cluster.store.get("PyTorchJob", "default", "train-1")["metadata"]["generation"] == 2

    rc, out, err = await _kubectl(kc, cache, "get", "pytorchjob", "missing")
    assert rc != 0
    assert 'pytorchjobs.kubeflow.org "missing" not found' in err


async def test_kubectl_wrong_token(cluster: kubesim.Cluster, tmp_path: Path) -> None:
    kc = cluster.write_kubeconfig(tmp_path / "kubeconfig", token="wrong")
    rc, _out, err = await _kubectl(kc, tmp_path / "cache", "get", "pytorchjobs")
    assert rc != 0
    assert "You must be logged in to the server" in err


async def test_kubectl_get_watch(cluster: kubesim.Cluster, tmp_path: Path) -> None:
    assert KUBECTL is not None
    kc = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    cluster.store.create("PyTorchJob", kubesim.manifest(kubesim.PYTORCHJOB, "a", "default"))
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        f"--kubeconfig={kc}",
        f"--cache-dir={tmp_path / 'cache'}",
        "get",
        "pytorchjobs",
        "-w",
        "-o",
        "name",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        assert await asyncio.wait_for(proc.stdout.readline(), 20) == b"pytorchjob.kubeflow.org/a\n"
        cluster.store.create("PyTorchJob", kubesim.manifest(kubesim.PYTORCHJOB, "b", "default"))
        assert await asyncio.wait_for(proc.stdout.readline(), 20) == b"pytorchjob.kubeflow.org/b\n"
    finally:
        proc.terminate()
        await proc.wait()


async def test_kubectl_apply_and_delete(cluster: kubesim.Cluster, tmp_path: Path) -> None:
    kc = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    cache = tmp_path / "cache"
    example = "/work/shared/reference/examples/kubeflow_training-operator__examples__pytorch__simple.yaml"
    manifest = Path(example)
    if not manifest.exists():
        manifest = tmp_path / "job.json"
        manifest.write_text(json.dumps(kubesim.manifest(kubesim.PYTORCHJOB, "pytorch-simple", "kubeflow")))
    # kubesim serves no OpenAPI, so client-side validation must be off (see README)
    rc, _, err = await _kubectl(kc, cache, "apply", "--validate=false", "-f", str(manifest))
    assert rc == 0, err
    obj = cluster.store.get("PyTorchJob", "kubeflow", "pytorch-simple")
    assert "kubectl.kubernetes.io/last-applied-configuration" in obj["metadata"]["annotations"]
    rc, _, err = await _kubectl(kc, cache, "delete", "pytorchjob", "-n", "kubeflow", "pytorch-simple")
    assert rc == 0, err
    assert cluster.store.list_objects("PyTorchJob") == []
