"""``python -m kubesim``: clusters from the command line, kubeconfigs printed, clean SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import aiohttp
import yaml

from trainwatch_common.testing.waiting import eventually


async def test_cli_runs_clusters_with_demo(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kubesim",
        "--clusters",
        "2",
        "--scenario",
        "demo",
        "--rate",
        "200",
        "--no-tls",
        "--kubeconfig-dir",
        str(tmp_path),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        lines = [(await asyncio.wait_for(proc.stdout.readline(), 20)).decode().split() for _ in range(2)]
        assert [name for name, _, _ in lines] == ["sim-1", "sim-2"]
        for name, url, path in lines:
            cfg = yaml.safe_load(await asyncio.to_thread(Path(path).read_text))
            assert cfg["clusters"][0]["cluster"]["server"] == url
            assert cfg["current-context"] == name
        name, url, path = lines[0]
        token = yaml.safe_load(await asyncio.to_thread(Path(path).read_text))["users"][0]["user"]["token"]
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as s:

            async def rv() -> int:
                async with s.get(url + "/apis/batch/v1/jobs") as r:
                    return int((await r.json())["metadata"]["resourceVersion"])

            first = await rv()
            await eventually(lambda: _grew(rv, first), timeout=10, message="the demo writes")
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0


async def _grew(rv: object, first: int) -> bool:
    value = await rv()  # type: ignore[operator]
    return bool(value > first + 20)
