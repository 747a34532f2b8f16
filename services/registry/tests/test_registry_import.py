"""Import from disk: every kubeconfig file of a folder, on start and on demand, idempotently."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import Bus, make_settings, running_registry
from registry_kubeconfigs import ADMIN, VIEWER, as_json, as_yaml, create_body, kubeconfig

from trainwatch_common.testing import eventually


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "kubeconfigs"
    folder.mkdir()
    (folder / "gpu-east.yaml").write_text(as_yaml(kubeconfig(server="https://east.example.com")))
    (folder / "GPU West.json").write_text(as_json(kubeconfig(server="https://west.example.com")))
    (folder / "cpu-batch").write_text(as_yaml(kubeconfig(server="https://batch.example.com")))
    (folder / "broken.yaml").write_text("users: [\n")
    (folder / "unsafe.yaml").write_text(as_yaml(kubeconfig(server="http://plain.example.com")))
    (folder / ".hidden.yaml").write_text(as_yaml(kubeconfig()))
    for path in folder.iterdir():
        os.utime(path, (1_000_000_000, 1_000_000_000))
    return folder


def _stat(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.iterdir()}


async def test_import_on_start_and_again_on_demand_is_idempotent(
    tmp_path: Path, sqlite_url: str, nats_url: str, encryption_key: str, bus: Bus
) -> None:
    folder = _folder(tmp_path)
    files_before = _stat(folder)
    settings = make_settings(
        database_url=sqlite_url, nats_url=nats_url, encryption_key=encryption_key, registry_import_dir=folder
    )
    async with running_registry(settings) as registry:
        listing = (await registry.client.get("/v1/clusters", headers=VIEWER)).json()
        assert sorted(c["id"] for c in listing["data"]) == ["cpu-batch", "gpu-east", "gpu-west"]
        east = (await registry.client.get("/v1/clusters/gpu-east", headers=VIEWER)).json()
        assert east["source"] == "import:gpu-east.yaml"
        assert east["server"] == "https://east.example.com"

        report = (await registry.client.post("/v1/clusters:import", headers=ADMIN)).json()
        outcomes = {item["file"]: item["outcome"] for item in report["files"]}
        assert outcomes == {
            "GPU West.json": "unchanged",
            "broken.yaml": "refused",
            "cpu-batch": "unchanged",
            "gpu-east.yaml": "unchanged",
            "unsafe.yaml": "refused",
        }
        reasons = {item["file"]: item["reasons"] for item in report["files"]}
        assert any("https" in reason for reason in reasons["unsafe.yaml"])
        assert len(await registry.outbox_rows()) == 3  # the second import wrote nothing

        # A changed file updates its cluster's connection; an API-registered id is left alone.
        (folder / "gpu-east.yaml").write_text(as_yaml(kubeconfig(server="https://east2.example.com")))
        await registry.create(create_body("api-made"))
        (folder / "api-made.yaml").write_text(as_yaml(kubeconfig(server="https://elsewhere.example.com")))
        report = (await registry.client.post("/v1/clusters:import", headers=ADMIN)).json()
        outcomes = {item["file"]: item["outcome"] for item in report["files"]}
        assert outcomes["gpu-east.yaml"] == "updated"
        assert outcomes["api-made.yaml"] == "skipped"
        east = (await registry.client.get("/v1/clusters/gpu-east", headers=VIEWER)).json()
        assert east["server"] == "https://east2.example.com"
        assert east["revision"] == 2
        # While the registry runs: its relay publishes after the commit, and one stopped before
        # it got to the last two rows leaves them for its next start (a loaded machine did).
        await eventually(lambda: _count(bus, 5), message="3 added + 1 api-made + 1 updated event")

    files_now = _stat(folder)
    assert {k: v for k, v in files_now.items() if k not in ("gpu-east.yaml", "api-made.yaml")} == {
        k: v for k, v in files_before.items() if k != "gpu-east.yaml"
    }  # import only reads


async def _count(bus: Bus, expected: int) -> bool:
    return await bus.stream_messages() == expected


async def test_import_without_a_folder_is_a_clear_error(
    tmp_path: Path, sqlite_url: str, nats_url: str, encryption_key: str
) -> None:
    settings = make_settings(database_url=sqlite_url, nats_url=nats_url, encryption_key=encryption_key)
    async with running_registry(settings) as registry:
        response = await registry.client.post("/v1/clusters:import", headers=ADMIN)
        assert response.status_code == 409
        assert "TRAINWATCH_REGISTRY_IMPORT_DIR" in response.json()["detail"]
