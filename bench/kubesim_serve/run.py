"""Benchmark: watch events per second kubesim serves to one client, and memory per 10k objects.

    uv run python bench/kubesim_serve/run.py [--events 50000] [--rounds 3] [--json out.json]

The server runs in its own process pinned to CPU 0 and the client in this process pinned
to CPU 1 (when there are two CPUs). The client is a decode-only aiohttp + orjson watch
reader. Every figure is compared with a baseline measured in the same run: the same
client reading the *same bytes* from a trivial aiohttp server that writes a pre-built
stream, i.e. the fastest this client can consume that stream.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import time
import tracemalloc
from multiprocessing.connection import Connection
from typing import Any

import aiohttp
import orjson
from aiohttp import web

import kubesim

TARGET_OBJECT_BYTES = 4000
CHUNK_EVENTS = 128  # kubesim.watch.BATCH


def realistic_pytorchjob(name: str, namespace: str = "team-a") -> dict[str, Any]:
    """A ~4 KB PyTorchJob as a real cluster returns it (spec, labels, annotations, status)."""
    body = kubesim.manifest(
        kubesim.PYTORCHJOB, name, namespace, labels={"kueue.x-k8s.io/queue-name": "gpu-a100", "user": "alice"}
    )
    body["status"] = {
        "conditions": [
            {
                "type": "Created",
                "status": "True",
                "reason": "PyTorchJobCreated",
                "message": f"PyTorchJob {namespace}/{name} is created.",
                "lastUpdateTime": "2026-11-29T10:00:00Z",
                "lastTransitionTime": "2026-11-29T10:00:00Z",
            },
            {
                "type": "Running",
                "status": "True",
                "reason": "PyTorchJobRunning",
                "message": f"PyTorchJob {namespace}/{name} is running.",
                "lastUpdateTime": "2026-11-29T10:00:05Z",
                "lastTransitionTime": "2026-11-29T10:00:05Z",
            },
        ],
        "replicaStatuses": {
            "Master": {"active": 1, "selector": f"training.kubeflow.org/job-name={name}"},
            "Worker": {"active": 2, "selector": f"training.kubeflow.org/job-name={name}"},
        },
        "startTime": "2026-11-29T10:00:01Z",
        "lastReconcileTime": "2026-11-29T10:00:05Z",
    }
    size = len(orjson.dumps(body)) + 160  # + uid, timestamps, resourceVersion set by the server
    if size < TARGET_OBJECT_BYTES:
        body["metadata"]["annotations"]["trainwatch.io/notes"] = "x" * (TARGET_OBJECT_BYTES - size - 32)
    return body


# ----------------------------------------------------------------------------------- server side
def _pin(cpu: int) -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {cpu})


async def _serve(conn: Connection, events: int, objects: int) -> None:
    async with kubesim.Simulator() as sim:
        cluster = await sim.add_cluster("bench", tls=False, history_limit=events + objects + 10)
        store = cluster.store
        start = store.resource_version
        bodies = [realistic_pytorchjob(f"pytorch-train-{i:06d}") for i in range(objects)]
        for b in bodies:
            store.create("PyTorchJob", b)
        i = 0
        t0 = time.process_time()
        while store.resource_version - start < events:
            b = bodies[i % objects]
            store.patch_status("PyTorchJob", "team-a", b["metadata"]["name"], {"lastReconcileTime": str(i)})
            i += 1
        write_cpu = (time.process_time() - t0) / max(i, 1)
        stream = b"".join(
            b'{"type":"%s","object":%s}\n' % (e.type.encode(), e.obj.data)
            for e in store.history_after(start, events)
        )

        async def baseline(request: web.BaseRequest) -> web.StreamResponse:
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            resp.enable_chunked_encoding()
            await resp.prepare(request)  # type: ignore[arg-type]
            view = memoryview(stream)
            step = CHUNK_EVENTS * len(stream) // events  # the same write size kubesim uses
            for off in range(0, len(view), step):
                await resp.write(view[off : off + step])
            await resp.write_eof()
            return resp

        loop = asyncio.get_running_loop()
        base_server = await loop.create_server(web.Server(baseline), "127.0.0.1", 0)
        conn.send(
            {
                "url": cluster.url,
                "token": cluster.token,
                "start_rv": start,
                "events": events,
                "stream_bytes": len(stream),
                "object_bytes": len(store.stored("PyTorchJob", "team-a", "pytorch-train-000000").data),
                "baseline_url": f"http://127.0.0.1:{base_server.sockets[0].getsockname()[1]}",
                "store_write_us": write_cpu * 1e6,
            }
        )
        await loop.run_in_executor(None, conn.recv)  # wait for "stop"
        base_server.close()


def server_main(conn: Connection, events: int, objects: int) -> None:
    _pin(0)
    asyncio.run(_serve(conn, events, objects))


# ----------------------------------------------------------------------------------- client side
def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def sink_stream(
    session: aiohttp.ClientSession, url: str, expected: int, headers: dict[str, str]
) -> float:
    """Count events without decoding them: the server (or the transport) is the bottleneck."""
    n = 0
    t0 = time.perf_counter()
    async with session.get(url, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        async for chunk in resp.content.iter_any():
            n += chunk.count(b"\n")
            if n >= expected:
                break
    elapsed = time.perf_counter() - t0
    assert n == expected, (n, expected)
    return elapsed


async def read_stream(
    session: aiohttp.ClientSession, url: str, expected: int, headers: dict[str, str]
) -> float:
    """Decode every event (orjson) until ``expected`` events; returns seconds taken.

    Reads raw chunks and splits lines itself (cheaper than ``StreamReader.readline``)."""
    loads = orjson.loads
    n = 0
    tail = b""
    t0 = time.perf_counter()
    async with session.get(url, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        async for chunk in resp.content.iter_any():
            lines = (tail + chunk).split(b"\n")
            tail = lines.pop()
            for line in lines:
                loads(line)
            n += len(lines)
            if n >= expected:
                break
    elapsed = time.perf_counter() - t0
    assert n == expected, (n, expected)
    return elapsed


async def measure(info: dict[str, Any], rounds: int, server_pid: int) -> dict[str, Any]:
    n = info["events"]
    watch_url = (
        f"{info['url']}/apis/kubeflow.org/v1/namespaces/team-a/pytorchjobs?watch=1"
        f"&resourceVersion={info['start_rv']}"
    )
    headers = {"Authorization": f"Bearer {info['token']}"}
    best = {k: float("inf") for k in ("baseline", "kubesim", "sink_baseline", "sink_kubesim")}
    sink_server_cpu: list[float] = []
    server_cpu: list[float] = []
    client_cpu: list[float] = []
    async with aiohttp.ClientSession(read_bufsize=1 << 20) as session:
        for _ in range(rounds):
            best["baseline"] = min(best["baseline"], await read_stream(session, info["baseline_url"], n, {}))
            c0, s0 = time.process_time(), _cpu_seconds(server_pid)
            took = await read_stream(session, watch_url, n, headers)
            client_cpu.append(time.process_time() - c0)
            server_cpu.append(_cpu_seconds(server_pid) - s0)
            best["kubesim"] = min(best["kubesim"], took)
            best["sink_baseline"] = min(
                best["sink_baseline"], await sink_stream(session, info["baseline_url"], n, {})
            )
            s0 = _cpu_seconds(server_pid)
            took = await sink_stream(session, watch_url, n, headers)
            sink_server_cpu.append(_cpu_seconds(server_pid) - s0)
            best["sink_kubesim"] = min(best["sink_kubesim"], took)
    rate = n / best["kubesim"]
    base = n / best["baseline"]
    return {
        "events": n,
        "sink_baseline_events_per_s": round(n / best["sink_baseline"]),
        "sink_kubesim_events_per_s": round(n / best["sink_kubesim"]),
        "sink_ratio_kubesim_to_baseline": round(best["sink_baseline"] / best["sink_kubesim"], 3),
        "sink_server_cpu_s_per_100k_events": round(min(sink_server_cpu) / n * 1e5, 3),
        "object_bytes": info["object_bytes"],
        "baseline_events_per_s": round(base),
        "kubesim_events_per_s": round(rate),
        "ratio_kubesim_to_baseline": round(rate / base, 3),
        "kubesim_MB_per_s": round(info["stream_bytes"] / best["kubesim"] / 1e6, 1),
        "server_cpu_s_per_100k_events": round(min(server_cpu) / n * 1e5, 3),
        "server_capacity_events_per_cpu_s": round(n / max(min(server_cpu), 1e-9)),
        "client_decode_events_per_cpu_s": round(n / max(min(client_cpu), 1e-9)),
        "client_cpu_s_per_100k_events": round(min(client_cpu) / n * 1e5, 3),
        "store_write_us_per_status_patch": round(info["store_write_us"], 1),
    }


# ------------------------------------------------------------------------------------- memory
def memory_main(conn: Connection, objects: int, history: int, modify: bool) -> None:
    store = kubesim.Store(kubesim.ALL_KINDS, history_limit=history)
    bodies = [realistic_pytorchjob(f"pytorch-train-{i:06d}") for i in range(objects)]
    rss0 = _rss()
    tracemalloc.start()
    for b in bodies:
        store.create("PyTorchJob", b)
    if modify:  # one status write per object: the history now also holds every previous version
        for b in bodies:
            store.patch_status("PyTorchJob", "team-a", b["metadata"]["name"], {"lastReconcileTime": "now"})
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    conn.send(
        {"objects": objects, "history_limit": history, "traced_bytes": traced, "rss_delta": _rss() - rss0}
    )


def _rss() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def run_memory(objects: int, history: int, modify: bool = False) -> dict[str, Any]:
    parent, child = mp.Pipe()
    proc = mp.get_context("spawn").Process(target=memory_main, args=(child, objects, history, modify))
    proc.start()
    out: dict[str, Any] = parent.recv()
    proc.join()
    per10k = 10_000 / objects
    return {
        "history_limit": history,
        "after_one_status_write_each": modify,
        "MB_per_10k_objects_traced": round(out["traced_bytes"] * per10k / 1e6, 1),
        "MB_per_10k_objects_rss": round(out["rss_delta"] * per10k / 1e6, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--objects", type=int, default=1_000, help="distinct objects the events cycle over")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    server = ctx.Process(target=server_main, args=(child, args.events, args.objects), daemon=True)
    server.start()
    info = parent.recv()
    _pin(1)
    try:
        serve = asyncio.run(measure(info, args.rounds, server.pid or 0))
    finally:
        parent.send("stop")
        server.join(10)
    memory = [run_memory(10_000, 0), run_memory(10_000, 10_000), run_memory(10_000, 10_000, modify=True)]
    results = {"serve": serve, "memory": memory, "cpus": os.cpu_count(), "python": sys.version.split()[0]}
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    ok = serve["sink_kubesim_events_per_s"] >= 50_000
    print(
        f"\nto a non-decoding client kubesim served {serve['sink_kubesim_events_per_s']:,} events/s "
        f"({serve['sink_ratio_kubesim_to_baseline']:.0%} of the pre-built stream's "
        f"{serve['sink_baseline_events_per_s']:,}/s); target 50,000/s on one core: "
        f"{'met' if ok else 'NOT met'}"
    )
    print(
        f"to the decoding client it served {serve['kubesim_events_per_s']:,} events/s "
        f"({serve['ratio_kubesim_to_baseline']:.0%} of the client's decode-only baseline "
        f"{serve['baseline_events_per_s']:,}/s; the client is the bottleneck there)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
