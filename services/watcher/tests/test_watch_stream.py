"""Reading a watch stream: lines split exactly however the reads cut them, (over TLS, against
kubesim) the read buffer of a stream that is behind grows for the burst and is given back when
the stream ends, and a bookmark or an ERROR saying the server is behind us means a relist."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import kubesim
from kubesim import errors as kubesim_errors
from trainwatch_common.kinds import PYTORCH_JOB
from trainwatch_watcher import errors
from trainwatch_watcher.kube import client as kube_client
from trainwatch_watcher.kube import watching
from trainwatch_watcher.kube.client import KubeClient, load_kubeconfig
from trainwatch_watcher.kube.watching import Watcher, WatchTarget
from trainwatch_watcher.settings import WatchTimings

JOBS = 300


class _Body:
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def readany(self) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""


class _Response:
    connection = None  # no TLS protocol to size

    def __init__(self, chunks: list[bytes]) -> None:
        self.content = _Body(chunks)


@pytest.mark.parametrize("chunk_size", [1, 3, 1000, 16384, 10**6])
async def test_lines_are_split_exactly_however_the_reads_cut_them(chunk_size: int) -> None:
    # An empty line (no event), a line longer than most reads, and a last line without "\n".
    body = b'{"a":1}\n\n{"b":"' + "ü".encode() * 20000 + b'"}\n{"c":3}\n{"d":4}'
    chunks = [body[i : i + chunk_size] for i in range(0, len(body), chunk_size)]
    response: Any = _Response(chunks)
    lines = [line async for line in kube_client._lines(response, "/p")]
    assert lines == [line for line in body.split(b"\n") if line]


async def test_a_stream_that_is_behind_reads_big_and_gives_the_buffer_back(sim: kubesim.Simulator) -> None:
    cluster = await sim.add_cluster("burst", kinds=[kubesim.PYTORCHJOB])
    start = cluster.store.resource_version
    for i in range(JOBS):  # ~1 MB of events waiting before the watch starts
        cluster.store.create(
            kubesim.PYTORCHJOB, kubesim.manifest(kubesim.PYTORCHJOB, f"job-{i:03d}", "default")
        )
    client = KubeClient(
        load_kubeconfig(cluster.kubeconfig_yaml()), timings=WatchTimings(allow_loopback_servers=True)
    )
    names: list[str] = []
    busy_seen = 0
    try:
        params = {"watch": "1", "resourceVersion": str(start), "timeoutSeconds": "30"}
        async with client.stream_lines(f"{PYTORCH_JOB.api_path}/{PYTORCH_JOB.plural}", params) as lines:
            async for line in lines:
                names.append(orjson.loads(line)["object"]["metadata"]["name"])
                busy_seen = max(busy_seen, kube_client._ReadBufferSizer.busy_streams)
                if len(names) == JOBS:
                    break
    finally:
        await client.close()
    assert names == [f"job-{i:03d}" for i in range(JOBS)]
    assert busy_seen == 1
    assert kube_client._ReadBufferSizer.busy_streams == 0


# -- a server behind our resourceVersion, as a bookmark or an ERROR event says it -------------------
# (v1.36 answers a watch from the future with silence, which the check before each resumed watch
# and the silence watchdog catch: test_watcher_apiserver.py. These two answers come from other
# servers; each must lead to the same relist.)


async def test_a_bookmark_below_our_resource_version_means_the_server_went_back(
    sim: kubesim.Simulator,
) -> None:
    cluster = await sim.add_cluster("behind", kinds=[kubesim.PYTORCHJOB])
    client = KubeClient(
        load_kubeconfig(cluster.kubeconfig_yaml()), timings=WatchTimings(allow_loopback_servers=True)
    )
    try:
        watcher = Watcher(
            client=client, target=WatchTarget(PYTORCH_JOB), timings=WatchTimings(), resume_from="495"
        )
        watcher._check_bookmark("495")  # level with ours, or past it: progress
        watcher._check_bookmark("500")
        with pytest.raises(errors.ResourceVersionAhead, match="495 is ahead of the server's 243"):
            watcher._check_bookmark("243")
    finally:
        await client.close()


def test_a_watch_error_too_large_resource_version_means_the_server_went_back() -> None:
    # The Status an apiserver's watch cache answers a resourceVersion it has not reached, as
    # kubesim's LIST gives it (libs/kubesim listing.py).
    too_large = kubesim_errors.ApiError(
        504,
        "Too large resource version: 495, current: 243",
        reason="Timeout",
        details={"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]},
    )
    assert isinstance(watching._error_event(too_large.status()), errors.ResourceVersionAhead)
    # A timeout for another cause is the server's trouble, not ours: retried, no relist.
    timeout = kubesim_errors.ApiError(504, "request timed out", reason="Timeout")
    assert type(watching._error_event(timeout.status())) is errors.Unreachable
