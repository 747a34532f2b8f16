"""Watch ingest benchmark: the watcher's full path against decode-only baselines, plus memory.

    uv run python bench/watch_ingest/run.py [--events 50000] [--clusters 1000] [--cached-jobs 100000]
    uv run python bench/watch_ingest/run.py --skip-memory     # the three rates only
    BENCH_PROFILE=tottime [BENCH_PROFILE_OUT=full.prof] ...   # cProfile the full path

Everything runs on loopback and stops by itself. A kubesim cluster in a child process holds a
history of realistic PyTorchJob status updates (one in five changes the phase); three
consumers read the same watch stream (from the same resourceVersion) in turn, in this process:

1. plain orjson decoding of the raw lines (the ceiling);
2. the official ``kubernetes`` client's ``Watch().stream`` over ``list_cluster_custom_object``
   (decode only: no normalization, no publishing);
3. the watcher's full path: one ``Informer`` (aiohttp + orjson, normalize, transitions,
   JetStream publish with Nats-Msg-Id, ack awaited, then the epoch-fenced Redis checkpoint), as a
   replica holding the cluster's lease, against a real nats-server and redis-server.

Then, each in a fresh child process: RSS of one watcher holding ``--clusters`` x 4 kinds of idle
TLS watches (against kubesim clusters in another process), and RSS of a cache of
``--cached-jobs`` jobs built by the informer's own code path.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

KIND_PLURAL = "pytorchjobs"
JOBS = 1000


def raise_fd_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- the kubesim side (child process) ---------------------------------------------------------
def _status(round_: int, phase_running: bool) -> dict[str, Any]:
    now = "2026-11-29T12:00:00Z"
    conditions = [
        {
            "type": "Created",
            "status": "True",
            "reason": "PyTorchJobCreated",
            "message": "PyTorchJob is created.",
            "lastUpdateTime": now,
            "lastTransitionTime": now,
        },
        {
            "type": "Running" if phase_running else "Restarting",
            "status": "True",
            "reason": "PyTorchJobRunning" if phase_running else "PyTorchJobRestarting",
            "message": f"PyTorchJob default/job is {'running' if phase_running else 'restarting'}.",
            "lastUpdateTime": now,
            "lastTransitionTime": now,
        },
    ]
    return {
        "conditions": conditions,
        "replicaStatuses": {
            "Master": {
                "active": 1,
                "selector": "training.kubeflow.org/job-name=job,training.kubeflow.org/replica-type=master",
            },
            "Worker": {
                "active": 3 + round_ % 5,
                "failed": round_ // 5,
                "selector": "training.kubeflow.org/job-name=job,training.kubeflow.org/replica-type=worker",
            },
        },
        "startTime": now,
        "lastReconcileTime": f"2026-11-29T12:{round_ % 60:02d}:00Z",
    }


def serve_stream(conn: Any, events: int, workdir: str) -> None:
    raise_fd_limit()
    import kubesim

    async def main() -> None:
        async with kubesim.Simulator(workdir) as sim:
            cluster = await sim.add_cluster(
                "bench", kinds=[kubesim.PYTORCHJOB], history_limit=events + 10, bookmark_interval=5.0
            )
            store = cluster.store
            for j in range(JOBS):
                store.create(
                    kubesim.PYTORCHJOB, kubesim.manifest(kubesim.PYTORCHJOB, f"job-{j:05d}", "default")
                )
            start_rv = store.resource_version
            for i in range(events):
                job, round_ = i % JOBS, i // JOBS
                # Each job's phase flips (Running <-> Restarting) every fifth update; the others
                # change only counters and timestamps.
                running = (round_ // 5) % 2 == 0
                store.replace_status(
                    kubesim.PYTORCHJOB, "default", f"job-{job:05d}", _status(round_, running)
                )
            conn.send((cluster.kubeconfig_yaml(), str(start_rv), str(store.resource_version)))
            loop = asyncio.get_running_loop()
            stop = asyncio.Event()
            loop.add_reader(conn.fileno(), stop.set)
            await stop.wait()

    asyncio.run(main())


def serve_idle_clusters(conn: Any, count: int, workdir: str) -> None:
    raise_fd_limit()
    import kubesim

    async def main() -> None:
        async with kubesim.Simulator(workdir) as sim:
            kinds = [kubesim.BATCH_JOB, kubesim.PYTORCHJOB, kubesim.TFJOB, kubesim.MPIJOB_V2BETA1]
            configs = []
            for i in range(count):
                cluster = await sim.add_cluster(f"idle{i}", kinds=kinds, bookmark_interval=60.0)
                configs.append(cluster.kubeconfig_yaml())
            conn.send(configs)
            loop = asyncio.get_running_loop()
            stop = asyncio.Event()
            loop.add_reader(conn.fileno(), stop.set)
            await stop.wait()

    asyncio.run(main())


# -- the three consumers ----------------------------------------------------------------------
async def fetch_raw_lines(kubeconfig: str, start_rv: str, events: int) -> list[bytes]:
    from trainwatch_watcher.kube.client import KubeClient, load_kubeconfig
    from trainwatch_watcher.settings import WatchTimings

    client = KubeClient(load_kubeconfig(kubeconfig), timings=WatchTimings(allow_loopback_servers=True))
    lines: list[bytes] = []
    try:
        params = {"watch": "1", "resourceVersion": start_rv, "timeoutSeconds": "120"}
        async with client.stream_lines(f"/apis/kubeflow.org/v1/{KIND_PLURAL}", params) as stream:
            async for line in stream:
                if b'"BOOKMARK"' in line[:30]:
                    continue
                lines.append(line)
                if len(lines) >= events:
                    break
    finally:
        await client.close()
    return lines


def bench_orjson(lines: list[bytes]) -> tuple[float, float]:
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for line in lines:
        orjson.loads(line)
    return time.process_time() - cpu0, time.perf_counter() - wall0


def bench_official(kubeconfig: str, start_rv: str, events: int) -> tuple[float, float]:
    import yaml
    from kubernetes import client as kclient
    from kubernetes import config as kconfig
    from kubernetes import watch as kwatch

    api_client = kconfig.new_client_from_config_dict(yaml.safe_load(kubeconfig))
    api = kclient.CustomObjectsApi(api_client)
    seen = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    stream = kwatch.Watch().stream(
        api.list_cluster_custom_object,
        "kubeflow.org",
        "v1",
        KIND_PLURAL,
        resource_version=start_rv,
        timeout_seconds=120,
    )
    for event in stream:
        if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
            seen += 1
            if seen >= events:
                break
    result = time.process_time() - cpu0, time.perf_counter() - wall0
    api_client.close()
    return result


async def bench_full_path(
    kubeconfig: str, start_rv: str, events: int, nats_url: str, redis_url: str
) -> dict[str, float]:
    import nats
    from redis.asyncio import Redis

    from trainwatch_common.events.clusters import WatchOptions
    from trainwatch_common.kinds import PYTORCH_JOB
    from trainwatch_common.streams import ensure_streams
    from trainwatch_watcher.informer import Informer
    from trainwatch_watcher.informer_spec import InformerSpec
    from trainwatch_watcher.kube.client import KubeClient, load_kubeconfig
    from trainwatch_watcher.metrics import WatcherMetrics
    from trainwatch_watcher.publishing import Publisher
    from trainwatch_watcher.records import StateWrite
    from trainwatch_watcher.settings import WatcherSettings
    from trainwatch_watcher.state import StateStore

    settings = WatcherSettings(
        read_timeout=60.0, watch_timeout_seconds=120, use_watch_list=False, allow_loopback_servers=True
    )
    nc = await nats.connect(nats_url)
    redis = Redis.from_url(redis_url)
    await ensure_streams(nc.jetstream())
    # As a replica holding the cluster's lease: checkpoints through the epoch-fenced store (a Lua
    # script a write), and the lease's proof asked before each publish, as the claim loop answers.
    epoch = 1
    await redis.set("bench:epoch", str(epoch))
    store = StateStore(redis).fenced("bench:epoch", epoch)
    proven_until = time.monotonic() + 3600

    def lease_proven(cluster_id: str, of_epoch: int) -> bool:
        return of_epoch == epoch and time.monotonic() < proven_until

    # Resume from the stream's start: every stored update arrives as a watch event.
    await store.apply("bench", "pytorchjob", StateWrite(resource_versions={"*": start_rv}))
    metrics = WatcherMetrics()
    client = KubeClient(load_kubeconfig(kubeconfig), timings=settings)
    spec = InformerSpec("bench", PYTORCH_JOB, None, WatchOptions(), epoch, "bench")
    informer = Informer(
        spec,
        client=client,
        store=store,
        publisher=Publisher(nc, metrics=metrics),
        metrics=metrics,
        timings=settings,
        max_in_flight=4000,
        fence=lease_proven,
    )
    received = metrics.events_received.labels("pytorchjob")
    profiler = None
    if os.environ.get("BENCH_PROFILE"):
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    task = asyncio.create_task(informer.run(), name="bench informer")
    while received._value.get() < events:  # noqa: ASYNC110 - polling our own counter
        await asyncio.sleep(0.005)
    await informer.drain()  # everything published is acknowledged and checkpointed
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    if profiler is not None:
        import pstats

        profiler.disable()
        if out := os.environ.get("BENCH_PROFILE_OUT"):
            profiler.dump_stats(out)
        pstats.Stats(profiler).sort_stats(os.environ.get("BENCH_PROFILE", "tottime")).print_stats(45)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    emitted = sum(
        s.value
        for m in metrics.registry.collect()
        for s in m.samples
        if s.name == "trainwatch_watcher_transitions_emitted_total"
    )
    await client.close()
    await nc.close()
    await redis.aclose()
    return {"cpu": cpu, "wall": wall, "published": emitted}


# -- memory ------------------------------------------------------------------------------------
def idle_streams_rss(conn: Any, configs: list[str], clusters: int, nats_url: str, redis_url: str) -> None:
    raise_fd_limit()

    async def main() -> dict[str, float]:
        from trainwatch_common.events.clusters import ClusterSpec
        from trainwatch_watcher.app import WatcherApp
        from trainwatch_watcher.connections import StaticConnections
        from trainwatch_watcher.settings import WatcherSettings

        connections = StaticConnections()
        desired: dict[str, ClusterSpec] = {}
        for i in range(clusters):
            cluster_id = f"c{i:05d}"
            fp = connections.set(cluster_id, configs[i % len(configs)])
            desired[cluster_id] = ClusterSpec(
                id=cluster_id, name=cluster_id, revision=1, connection_fingerprint=fp
            )

        class FixedFeed:
            async def run(self, apply: Any) -> None:
                await apply(desired)
                await asyncio.Event().wait()

        settings = WatcherSettings(
            nats_url=nats_url,
            redis_url=redis_url,
            http_port=0,
            instance_id="bench",
            read_timeout=600,
            health_interval=600,
            rediscovery_interval=600,
            allow_loopback_servers=True,
        )
        app = WatcherApp(settings, connections=connections, feed_factory=lambda nc: FixedFeed())
        before = rss_mb()
        stop = asyncio.Event()
        task = asyncio.create_task(app.run(stop), name="bench watcher")
        started = time.perf_counter()
        while True:
            await asyncio.sleep(0.5)
            sup = app.supervisor
            if sup is not None and len(sup.workers) == clusters:
                informers = [i for w in sup.workers.values() for i in w.informers.values()]
                if len(informers) == clusters * 4 and all(i.status.synced for i in informers):
                    break
            if time.perf_counter() - started > 240:
                raise RuntimeError("idle watches not all open within 240 s")
        opened = time.perf_counter() - started
        cpu0 = time.process_time()
        await asyncio.sleep(5)  # idle
        idle_cpu = (time.process_time() - cpu0) / 5
        rss = rss_mb()
        stop.set()
        await task
        return {
            "rss": rss,
            "baseline": before,
            "open_s": opened,
            "idle_cpu": idle_cpu,
            "streams": clusters * 4,
        }

    conn.send(asyncio.run(main()))


def cache_rss(conn: Any, jobs: int) -> None:
    import copy

    import kubesim
    from trainwatch_common.kinds import PYTORCH_JOB
    from trainwatch_watcher import transitions
    from trainwatch_watcher.kinds.catalog import normalize_object
    from trainwatch_watcher.kinds.kubeflow_v1 import decision_inputs
    from trainwatch_watcher.records import JobRecord, trim

    template = kubesim.manifest(kubesim.PYTORCHJOB, "job", "default")
    template["status"] = _status(3, True)
    before = rss_mb()
    records: dict[str, JobRecord] = {}
    cpu0 = time.process_time()
    for j in range(jobs):
        obj = copy.deepcopy(template)
        obj["metadata"].update(
            {
                "name": f"job-{j:06d}",
                "uid": f"00000000-0000-0000-0000-{j:012d}",
                "resourceVersion": str(j + 1),
                "creationTimestamp": "2026-11-29T12:00:00Z",
            }
        )
        raw = orjson.dumps(obj)  # as it arrives: bytes, decoded once, dropped after use
        decoded = orjson.loads(raw)
        status = normalize_object(PYTORCH_JOB, decoded, None)
        emission = transitions.observe(None, status, namespace="default", name=decoded["metadata"]["name"])
        assert emission is not None
        # As the informer keeps it: with the decision inputs that let it skip normalizing.
        records[decoded["metadata"]["uid"]] = JobRecord(
            slot=emission.slot, last=trim(status), inputs=decision_inputs(decoded)
        )
    build_s = time.process_time() - cpu0
    after = rss_mb()
    conn.send(
        {
            "rss": after,
            "baseline": before,
            "per_job": (after - before) * 1024 * 1024 / jobs,
            "build_us": build_s / jobs * 1e6,
            "jobs": len(records),
            "object_bytes": len(raw),
        }
    )


# -- orchestration ------------------------------------------------------------------------------
def child(target: Any, *args: Any) -> tuple[Any, Any]:
    parent_conn, child_conn = mp.Pipe()
    process = mp.get_context("spawn").Process(target=target, args=(child_conn, *args), daemon=True)
    process.start()
    return process, parent_conn


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--clusters", type=int, default=1000, help="clusters of idle watches (x4 kinds)")
    parser.add_argument("--sim-clusters", type=int, default=50, help="kubesim servers behind those clusters")
    parser.add_argument("--cached-jobs", type=int, default=100_000)
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
    raise_fd_limit()

    import trainwatch_watcher.app  # noqa: F401
    from trainwatch_common.testing.servers import NatsServer, RedisServer

    # What ``python -m trainwatch_watcher`` does once it has imported the watcher: freeze that heap
    # out of the cyclic collector's way. Before all three measurements, so the official client
    # runs under the same settings (it keeps nothing alive between events: it measured the same
    # either way).
    gc.freeze()

    workdir = Path(tempfile.mkdtemp(prefix="bench-watch-ingest-"))
    nats_server = NatsServer(workdir=workdir / "nats")
    redis_server = RedisServer(workdir=workdir / "redis")
    for server in (nats_server, redis_server):
        server.workdir.mkdir(parents=True)
        server.start()
    rows: list[tuple[str, float, float]] = []
    try:
        print(f"kubesim: writing {args.events:,} PyTorchJob updates over {JOBS} jobs ...", flush=True)
        sim_process, sim_conn = child(serve_stream, args.events, str(workdir / "sim"))
        kubeconfig, start_rv, _ = sim_conn.recv()

        wall0 = time.perf_counter()
        lines = asyncio.run(fetch_raw_lines(kubeconfig, start_rv, args.events))
        # The wire's own limit: kubesim serving this stream, read as raw lines (no decoding).
        serve_rate = len(lines) / (time.perf_counter() - wall0)
        avg = sum(map(len, lines)) / len(lines)
        cpu, wall = bench_orjson(lines)
        rows.append(("orjson.loads of the same lines (ceiling)", cpu, wall))
        del lines
        cpu, wall = bench_official(kubeconfig, start_rv, args.events)
        rows.append(("kubernetes client Watch().stream, decode only", cpu, wall))
        full = asyncio.run(
            bench_full_path(kubeconfig, start_rv, args.events, nats_server.url, redis_server.url)
        )
        rows.append(("watcher full path (normalize + publish + checkpoint)", full["cpu"], full["wall"]))
        sim_conn.send(b"stop")
        sim_process.join(10)

        n = args.events
        print(
            f"\n{n:,} watch events, {avg / 1024:.2f} KB each on average; "
            f"{int(full['published']):,} job events published by the full path; kubesim serves the "
            f"stream at {serve_rate:,.0f} events/s (raw lines read, nothing decoded)\n"
        )
        print("| consumer | events/s | CPU-s per 100k events |\n|---|---:|---:|")
        for name, cpu, wall in rows:
            print(f"| {name} | {n / wall:,.0f} | {cpu / n * 100_000:.2f} |")
        official_rate = n / rows[1][2]
        full_rate = n / rows[2][2]
        print(
            f"\nfull path vs official decode-only: {full_rate / official_rate:.2f}x events/s "
            f"(target >= 2x); CPU per event {rows[2][1] / rows[1][1]:.2f}x the official client's"
        )

        if not args.skip_memory:
            print(
                f"\nkubesim: {args.sim_clusters} TLS clusters for {args.clusters} x 4 idle watches ...",
                flush=True,
            )
            idle_process, idle_conn = child(serve_idle_clusters, args.sim_clusters, str(workdir / "idle"))
            configs = idle_conn.recv()
            watcher_process, watcher_conn = child(
                idle_streams_rss, configs, args.clusters, nats_server.url, redis_server.url
            )
            idle = watcher_conn.recv()
            watcher_process.join(30)
            idle_conn.send(b"stop")
            idle_process.join(10)
            print(
                f"RSS with {idle['streams']:,} idle TLS watches ({args.clusters} clusters x 4 kinds): "
                f"{idle['rss']:.0f} MB (target < 500 MB; {idle['baseline']:.0f} MB before starting); "
                f"all open in {idle['open_s']:.1f} s; idle CPU {idle['idle_cpu'] * 100:.1f}% of a core"
            )

            cache_process, cache_conn = child(cache_rss, args.cached_jobs)
            cache = cache_conn.recv()
            cache_process.join(10)
            print(
                f"RSS with {cache['jobs']:,} cached jobs: {cache['rss']:.0f} MB (target < 300 MB; "
                f"{cache['baseline']:.0f} MB before), {cache['per_job']:.0f} bytes per job "
                f"(objects of {cache['object_bytes'] / 1024:.1f} KB), {cache['build_us']:.1f} us per job"
            )
    finally:
        nats_server.close()
        redis_server.close()


if __name__ == "__main__":
    sys.exit(main())
