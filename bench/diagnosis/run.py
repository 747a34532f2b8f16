"""Diagnosis benchmark (issue 16): watcher CPU and RSS with and without diagnosis, and latency.

    uv run python bench/diagnosis/run.py [--jobs 10000] [--pods-per-job 10] [--pod-churn 100000]
        [--job-churn 100000] [--pairs 3] [--rate 200] [--paced 2000] [--burst 2000]

Everything runs on loopback and stops by itself. Two stacks side by side, one per mode, each its
own kubesim cluster (a child process holding ``--jobs`` running PyTorchJobs, each with
``--pods-per-job`` running pods: 1 master + workers, the labels, owners and container statuses
the training operator and kubelet write; the same seeded content in both), nats-server,
redis-server and watcher. The watcher runs its real code path (``WatcherApp``: claim, discovery,
informers, evidence watches, JetStream publish with the fenced Redis checkpoint) in a child
process:

* ``TRAINWATCH_DIAGNOSIS_ENABLED=false`` (the baseline: no evidence watches at all);
* diagnosis on (the default): pod and Warning-event watches feeding the evidence cache.

Both watchers list everything first (RSS taken then). Then ``--pairs`` interleaved rounds, off,
on, off, on, ...: each round is the same workload against one stack while the other idles, pod
status churn (pods re-written running with a new IP and readiness flips: changes diagnosis does
not read), then job status churn (counters, one in five flips Running <-> Restarting), each
unpaced, the watcher's CPU-seconds taken from the first write until it is quiet again. A machine
whose load moves moves both rounds of a pair alike: the figure is each pair's on/off ratio and
their median. With diagnosis on, then, the latency of a terminal pod status (a worker OOMKilled,
written with its wall-clock time) to the job's event carrying ``OOMKilled`` on JetStream: paced
at ``--rate`` pod changes/s spread over the jobs, then a burst of ``--burst`` unpaced. The load
average is printed with every phase.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import multiprocessing as mp
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

NS = "default"


def raise_fd_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def job_name(j: int) -> str:
    return f"job-{j:05d}"


def _job_status(round_: int, running: bool) -> dict[str, Any]:
    now = "2026-11-29T12:00:00Z"
    phase = "Running" if running else "Restarting"
    return {
        "conditions": [
            {
                "type": "Created",
                "status": "True",
                "reason": "PyTorchJobCreated",
                "message": "PyTorchJob is created.",
                "lastUpdateTime": now,
                "lastTransitionTime": now,
            },
            {
                "type": phase,
                "status": "True",
                "reason": f"PyTorchJob{phase}",
                "message": f"PyTorchJob default/job is {phase.lower()}.",
                "lastUpdateTime": now,
                "lastTransitionTime": now,
            },
        ],
        "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 9, "failed": round_ % 3}},
        "startTime": now,
        "lastReconcileTime": f"2026-11-29T12:{round_ % 60:02d}:00Z",
    }


# -- the kubesim side (child process) ---------------------------------------------------------
def serve(conn: Any, jobs: int, pods_per_job: int, workdir: str) -> None:
    raise_fd_limit()
    import kubesim
    from kubesim.pods import PodState, layout

    async def main() -> None:
        async with kubesim.Simulator(workdir) as sim:
            cluster = await sim.add_cluster(
                "bench", kinds=[kubesim.PYTORCHJOB], history_limit=400_000, bookmark_interval=5.0
            )
            store = cluster.store
            rand = random.Random(16)
            pods: list[list[Any]] = []
            t0 = time.perf_counter()
            for j in range(jobs):
                body = kubesim.manifest(kubesim.PYTORCHJOB, job_name(j), NS)
                body["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = pods_per_job - 1
                job = store.create(kubesim.PYTORCHJOB, body)
                store.replace_status(kubesim.PYTORCHJOB, NS, job_name(j), _job_status(0, True))
                states = []
                for slot in layout(kubesim.PYTORCHJOB, job, rand):
                    ps = PodState(store, slot, NS, rand)
                    ps.bind(f"node-{rand.randint(1, 64):02d}")
                    ps.running()
                    states.append(ps)
                pods.append(states)
                if j % 200 == 0:
                    await asyncio.sleep(0)
            setup_s = time.perf_counter() - t0
            total_pods = sum(map(len, pods))
            conn.send((cluster.kubeconfig_yaml(), total_pods, setup_s))
            flat = [p for states in pods for p in states]
            job_round = 0
            loop = asyncio.get_running_loop()
            while True:
                cmd = await loop.run_in_executor(None, conn.recv)
                op = cmd[0]
                if op == "stop":
                    return
                if op == "pod_churn":
                    t = time.perf_counter()
                    for i in range(cmd[1]):
                        ps = flat[(i * 7919) % len(flat)]
                        ps.ip = f"10.{i % 250}.{(i // 250) % 250}.{rand.randint(2, 250)}"
                        if i % 2:
                            ps.running()
                        else:  # readiness flips: a probe failing, containers still running
                            st = dict(ps.obj["status"])
                            st["podIP"] = ps.ip
                            st["conditions"] = [
                                {**c, "status": "False"} if c["type"] in ("Ready", "ContainersReady") else c
                                for c in st["conditions"]
                            ]
                            ps.obj = store.replace_status(kubesim.POD, NS, ps.name, st)
                        if i % 500 == 0:
                            await asyncio.sleep(0)
                    conn.send(time.perf_counter() - t)
                elif op == "job_churn":
                    t = time.perf_counter()
                    for i in range(cmd[1]):
                        j = i % jobs
                        round_ = job_round + i // jobs + 1
                        running = (round_ // 5) % 2 == 0 if i % 5 else (round_ // 5) % 2 != 0
                        store.replace_status(
                            kubesim.PYTORCHJOB, NS, job_name(j), _job_status(round_, running)
                        )
                        if i % 500 == 0:
                            await asyncio.sleep(0)
                    job_round += cmd[1] // jobs + 1
                    # Leave every job Running again, so the latency phase starts from the same state.
                    for j in range(jobs):
                        store.replace_status(
                            kubesim.PYTORCHJOB, NS, job_name(j), _job_status(job_round, True)
                        )
                    conn.send(time.perf_counter() - t)
                elif op == "terminal":
                    # (count, rate or None, first job): one worker of each of ``count`` distinct jobs
                    # is OOMKilled, with its wall-clock time.
                    count, rate, first = cmd[1], cmd[2], cmd[3]
                    written: list[tuple[str, float]] = []
                    t = time.perf_counter()
                    for k in range(count):
                        j = (first + k) % jobs
                        ps = pods[j][1 + k % (len(pods[j]) - 1)]
                        ps.terminated("OOMKilled", 137)
                        written.append((job_name(j), time.time()))
                        if rate:
                            delay = t + (k + 1) / rate - time.perf_counter()
                            if delay > 0:
                                await asyncio.sleep(delay)
                        elif k % 200 == 0:
                            await asyncio.sleep(0)
                    conn.send((written, time.perf_counter() - t))

    asyncio.run(main())


# -- the watcher side (child process) ---------------------------------------------------------
def watcher(conn: Any, kubeconfig: str, diagnosis: bool, jobs: int, nats_url: str, redis_url: str) -> None:
    raise_fd_limit()

    async def main() -> None:
        from trainwatch_common.events.clusters import ClusterSpec
        from trainwatch_watcher.app import WatcherApp
        from trainwatch_watcher.connections import StaticConnections
        from trainwatch_watcher.settings import WatcherSettings

        gc.freeze()  # as python -m trainwatch_watcher does after its imports
        # CPU-seconds spent in the cyclic garbage collector, per generation (a churn's share of
        # it grows with the long-lived objects it traverses: the cached pods).
        gc_cpu = [0.0, 0.0, 0.0]
        gc_started = [0.0]

        def on_gc(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                gc_started[0] = time.process_time()
            else:
                gc_cpu[info["generation"]] += time.process_time() - gc_started[0]

        gc.callbacks.append(on_gc)
        connections = StaticConnections()
        fp = connections.set("bench", kubeconfig)
        desired = {"bench": ClusterSpec(id="bench", name="bench", revision=1, connection_fingerprint=fp)}

        class FixedFeed:
            async def run(self, apply: Any) -> None:
                await apply(desired)
                await asyncio.Event().wait()

        settings = WatcherSettings(
            nats_url=nats_url,
            redis_url=redis_url,
            http_port=0,
            instance_id=f"bench-{'diag' if diagnosis else 'plain'}",
            read_timeout=600,
            watch_timeout_seconds=600,
            health_interval=600,
            rediscovery_interval=600,
            allow_loopback_servers=True,
            diagnosis_enabled=diagnosis,
            diagnosis_ready_timeout=300,
            # On a machine at load 10 an unpaced churn starved the claim loop past the default
            # 10 s lease: the lease lapsed, the informers restarted and relisted, and the round
            # measured that. The bench measures CPU, not failover.
            lease_ttl_ms=120_000,
        )
        app = WatcherApp(settings, connections=connections, feed_factory=lambda nc: FixedFeed())
        traced = bool(os.environ.get("BENCH_TRACEMALLOC"))
        if traced:  # where the watcher's memory is after the listing (slows the listing down)
            import tracemalloc

            tracemalloc.start(int(os.environ["BENCH_TRACEMALLOC"]))
        before = rss_mb()
        stop = asyncio.Event()
        task = asyncio.create_task(app.run(stop), name="bench watcher")
        started = time.perf_counter()
        cpu0 = time.process_time()
        pods_cached = 0
        while True:
            await asyncio.sleep(0.25)
            sup = app.supervisor
            worker = sup.workers.get("bench") if sup is not None else None
            if worker is not None and worker.informers:
                informers = list(worker.informers.values())
                evidence_ok = (not diagnosis) or (worker.evidence is not None and worker.evidence.ready())
                if evidence_ok and all(i.status.synced for i in informers):
                    if worker.evidence is not None:
                        pods_cached = worker.evidence.cache.pod_count
                    break
            if time.perf_counter() - started > 600:
                raise RuntimeError("watcher not synced within 600 s")
        sync_s, sync_cpu = time.perf_counter() - started, time.process_time() - cpu0
        await settle()
        gc.collect()
        if traced:
            snapshot = tracemalloc.take_snapshot()
            tracemalloc.stop()
            total = sum(stat.size for stat in snapshot.statistics("filename"))
            print(
                f"--- tracemalloc after the listing, diagnosis {'on' if diagnosis else 'off'}: "
                f"{total / 2**20:.1f} MiB traced",
                flush=True,
            )
            frames = int(os.environ["BENCH_TRACEMALLOC"])
            for stat in snapshot.statistics("traceback" if frames > 1 else "lineno")[:30]:
                print(stat, flush=True)
                if frames > 1:
                    for line in stat.traceback.format()[-6:]:
                        print("    ", line, flush=True)
        conn.send(
            {
                "rss": rss_mb(),
                "baseline": before,
                "sync_s": sync_s,
                "sync_cpu": sync_cpu,
                "pods_cached": pods_cached,
                "evidence": worker.evidence is not None,
            }
        )
        loop = asyncio.get_running_loop()
        profiler: Any = None
        while True:
            cmd = await loop.run_in_executor(None, conn.recv)
            if cmd == "stop":
                break
            if cmd == "cpu":
                conn.send((time.process_time(), list(gc_cpu)))
            elif cmd == "profile":
                import cProfile

                profiler = cProfile.Profile()
                profiler.enable()
            elif cmd == "settle":
                cpu = await settle()
                if profiler is not None:
                    import pstats

                    profiler.disable()
                    print(f"--- profile, diagnosis {'on' if diagnosis else 'off'}", flush=True)
                    pstats.Stats(profiler).sort_stats(os.environ["BENCH_PROFILE"]).print_stats(
                        int(os.environ.get("BENCH_PROFILE_LINES", "35"))
                    )
                    profiler = None
                conn.send((cpu, list(gc_cpu)))
        stop.set()
        await task

    async def settle() -> float:
        """Wait until the process is quiet (< 5 % of a core over 0.5 s, twice); the CPU time then."""
        quiet = 0
        last = time.process_time()
        while quiet < 2:
            await asyncio.sleep(0.5)
            now = time.process_time()
            quiet = quiet + 1 if now - last < 0.025 else 0
            last = now
        return last

    asyncio.run(main())


def cache_bytes(conn: Any, kubeconfig: str) -> None:
    """tracemalloc of the evidence cache alone: the cluster's pods, listed as the pod watch does
    (its label selector), applied to an ``EvidenceCache`` as the feed applies them."""
    import tracemalloc

    async def pods() -> list[dict[str, Any]]:
        from trainwatch_watcher.diagnosis import KIND_POD_SELECTORS
        from trainwatch_watcher.kube.client import KubeClient, load_kubeconfig
        from trainwatch_watcher.settings import WatchTimings

        client = KubeClient(load_kubeconfig(kubeconfig), timings=WatchTimings(allow_loopback_servers=True))
        items: list[dict[str, Any]] = []
        try:
            params = {"limit": "500", "labelSelector": KIND_POD_SELECTORS["kubeflow"]}
            while True:
                page = await client.get_json("/api/v1/pods", params)
                items.extend(page["items"])
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    return items
                params = {**params, "continue": token}
        finally:
            await client.close()

    from trainwatch_watcher.evidence_cache import EvidenceCache

    decoded = asyncio.run(pods())
    cache = EvidenceCache()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for pod in decoded:
        cache.apply("pod", "pods/kubeflow", "ADDED", pod)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    size = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    conn.send({"pods": cache.pod_count, "bytes": size, "object_bytes": len(orjson.dumps(decoded[0]))})


# -- orchestration ------------------------------------------------------------------------------
def child(target: Any, *args: Any) -> tuple[Any, Any]:
    parent_conn, child_conn = mp.Pipe()
    process = mp.get_context("spawn").Process(target=target, args=(child_conn, *args), daemon=True)
    process.start()
    return process, parent_conn


async def stream_count(nats_url: str) -> int:
    import nats

    nc = await nats.connect(nats_url)
    try:
        info = await nc.jetstream().stream_info("JOBS")
        return int(info.state.messages)
    finally:
        await nc.close()


class Latency:
    """An ordered consumer of the JOBS stream from now on: when each job's first OOMKilled
    diagnosis arrived."""

    def __init__(self) -> None:
        self.seen: dict[str, float] = {}
        self.events = 0

    async def start(self, nats_url: str) -> None:
        import nats
        from nats.js.api import DeliverPolicy

        self.nc = await nats.connect(nats_url)

        async def on_msg(msg: Any) -> None:
            t = time.time()
            self.events += 1
            name = msg.subject.rsplit(".", 1)[-1]
            if name in self.seen:
                return
            data = orjson.loads(msg.data).get("data", {})
            diagnosis = data.get("diagnosis") or {}
            if diagnosis.get("category") == "OOMKilled":
                self.seen[name] = t

        self.sub = await self.nc.jetstream().subscribe(
            "jobs.v1.>", cb=on_msg, ordered_consumer=True, deliver_policy=DeliverPolicy.NEW
        )

    async def wait_for(self, names: list[str], timeout: float) -> None:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline and not all(n in self.seen for n in names):  # noqa: ASYNC110
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        await self.sub.unsubscribe()
        await self.nc.close()


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def start_watcher(
    diagnosis: bool, args: argparse.Namespace, kubeconfig: str, nats_url: str, redis_url: str
) -> tuple[Any, Any, dict[str, Any]]:
    """A watcher child process, listed and synced: (process, its pipe, the sync figures)."""
    label = "diagnosis on" if diagnosis else "diagnosis off"
    print(f"[{label}] starting the watcher; load {loadavg()}", flush=True)
    proc, wconn = child(watcher, kubeconfig, diagnosis, args.jobs, nats_url, redis_url)
    result: dict[str, Any] = {"mode": label, "load_start": loadavg()}
    result.update(wconn.recv())
    print(
        f"[{label}] synced in {result['sync_s']:.1f} s ({result['sync_cpu']:.1f} CPU-s), "
        f"RSS {result['rss']:.0f} MB, {result['pods_cached']:,} pods cached",
        flush=True,
    )
    return proc, wconn, result


def churn_round(
    label: str, round_: int, args: argparse.Namespace, wconn: Any, sim_conn: Any, nats_url: str
) -> dict[str, Any]:
    """One round of the workload against one watcher: pod churn, then job churn, each until the
    watcher is quiet again; its CPU-seconds, GC share and published events per phase."""
    out: dict[str, Any] = {"round": round_, "load_start": loadavg()}
    for phase, count in (("pod_churn", args.pod_churn), ("job_churn", args.job_churn)):
        events0 = asyncio.run(stream_count(nats_url))
        if phase == "job_churn" and round_ == 1 and os.environ.get("BENCH_PROFILE"):
            wconn.send("profile")  # cProfile the watcher over the first job churn (inflates its CPU)
        wconn.send("cpu")
        cpu0, gc0 = wconn.recv()
        sim_conn.send((phase, count))
        write_s = sim_conn.recv()
        wconn.send("settle")
        cpu1, gc1 = wconn.recv()
        events = asyncio.run(stream_count(nats_url)) - events0
        written = count + (args.jobs if phase == "job_churn" else 0)
        out[phase] = {
            "cpu": cpu1 - cpu0,
            "gc_cpu": [b - a for a, b in zip(gc0, gc1, strict=True)],
            "writes": written,
            "write_s": write_s,
            "published": events,
            "load": loadavg(),
        }
        print(
            f"[{label} round {round_}] {phase}: {written:,} writes in {write_s:.1f} s, "
            f"watcher {cpu1 - cpu0:.2f} CPU-s, {events:,} job events published; gc "
            f"{' / '.join(f'{g:.2f}' for g in out[phase]['gc_cpu'])} CPU-s (gen 0/1/2); load {loadavg()}",
            flush=True,
        )
    return out


def per_job_event_us(r: dict[str, Any]) -> float:
    return float(r["job_churn"]["cpu"] / r["job_churn"]["writes"] * 1e6)


async def latency_phases(args: argparse.Namespace, sim_conn: Any, nats_url: str) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    out: dict[str, Any] = {}
    first = 0
    paced = min(args.paced, args.jobs // 2)
    for phase, count, rate in (
        ("paced", paced, args.rate),
        ("burst", min(args.burst, args.jobs - paced), None),
    ):
        lat = Latency()
        await lat.start(nats_url)
        sim_conn.send(("terminal", count, rate, first))
        written, write_s = await loop.run_in_executor(None, sim_conn.recv)
        await lat.wait_for([n for n, _ in written], timeout=60)
        await lat.close()
        delays = [lat.seen[n] - t for n, t in written if n in lat.seen]
        missing = len(written) - len(delays)
        out[phase] = {
            "count": len(written),
            "rate": len(written) / write_s,
            "p50": pct(delays, 50),
            "p99": pct(delays, 99),
            "max": max(delays, default=float("nan")),
            "missing": missing,
            "load": loadavg(),
        }
        print(
            f"[latency {phase}] {len(written):,} OOMKilled at {len(written) / write_s:,.0f}/s: "
            f"p50 {out[phase]['p50'] * 1000:.0f} ms, p99 {out[phase]['p99'] * 1000:.0f} ms, "
            f"max {out[phase]['max'] * 1000:.0f} ms, {missing} never seen; load {loadavg()}",
            flush=True,
        )
        first += count
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--pods-per-job", type=int, default=10)
    parser.add_argument("--pod-churn", type=int, default=None, help="pod status writes (default: 1 per pod)")
    parser.add_argument("--job-churn", type=int, default=None, help="job status writes (default: 10 per job)")
    parser.add_argument("--pairs", type=int, default=3, help="off/on round pairs, interleaved (at least 3)")
    parser.add_argument("--rate", type=float, default=200.0, help="paced terminal pod changes per second")
    parser.add_argument("--paced", type=int, default=2000, help="terminal pod changes, paced")
    parser.add_argument("--burst", type=int, default=2000, help="terminal pod changes, unpaced")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args()
    args.pod_churn = args.pod_churn if args.pod_churn is not None else args.jobs * args.pods_per_job
    args.job_churn = args.job_churn if args.job_churn is not None else args.jobs * 10
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    raise_fd_limit()

    from trainwatch_common.testing.servers import NatsServer, RedisServer

    workdir = Path(tempfile.mkdtemp(prefix="bench-diagnosis-"))
    wall0 = time.perf_counter()
    print(f"load average at start: {loadavg()} ({os.cpu_count()} cores)", flush=True)
    # Two stacks side by side, one per mode, each its own kubesim (the same seeded content),
    # nats-server, redis-server and watcher, all started and synced before the first round.
    # The rounds then alternate off, on, off, on, ... with the same workload: a machine whose
    # load moves (others share it) moves both halves of a pair alike, which measuring "off" and
    # "on" minutes apart did not. The idle stack only sends bookmarks meanwhile.
    stacks: dict[bool, dict[str, Any]] = {}
    servers: list[Any] = []
    try:
        for diagnosis in (False, True):
            nats_server = NatsServer(workdir=workdir / f"nats-{diagnosis}")
            redis_server = RedisServer(workdir=workdir / f"redis-{diagnosis}")
            for server in (nats_server, redis_server):
                server.workdir.mkdir(parents=True)
                server.start()
                servers.append(server)
            print(
                f"kubesim ({'on' if diagnosis else 'off'}): {args.jobs:,} PyTorchJobs x "
                f"{args.pods_per_job} pods ...",
                flush=True,
            )
            sim_process, sim_conn = child(
                serve, args.jobs, args.pods_per_job, str(workdir / f"sim-{diagnosis}")
            )
            stacks[diagnosis] = {
                "nats": nats_server.url,
                "redis": redis_server.url,
                "sim": (sim_process, sim_conn),
            }
        for diagnosis, stack in stacks.items():
            stack["kubeconfig"], total_pods, setup_s = stack["sim"][1].recv()
            print(
                f"kubesim ({'on' if diagnosis else 'off'}): {total_pods:,} pods written in {setup_s:.1f} s",
                flush=True,
            )
        for diagnosis, stack in stacks.items():
            stack["proc"], stack["wconn"], stack["result"] = start_watcher(
                diagnosis, args, stack["kubeconfig"], stack["nats"], stack["redis"]
            )
            stack["result"]["rounds"] = []
        for pair in range(1, args.pairs + 1):
            for diagnosis in (False, True):
                stack = stacks[diagnosis]
                stack["result"]["rounds"].append(
                    churn_round(
                        stack["result"]["mode"], pair, args, stack["wconn"], stack["sim"][1], stack["nats"]
                    )
                )
            off_us = per_job_event_us(stacks[False]["result"]["rounds"][-1])
            on_us = per_job_event_us(stacks[True]["result"]["rounds"][-1])
            print(
                f"[pair {pair}] CPU-us per job event {off_us:.1f} / {on_us:.1f}: {on_us / off_us:.2f}x",
                flush=True,
            )
        on_stack = stacks[True]
        on_stack["result"]["latency"] = asyncio.run(
            latency_phases(args, on_stack["sim"][1], on_stack["nats"])
        )
        cache_process, cache_conn = child(cache_bytes, on_stack["kubeconfig"])
        on_stack["result"]["tracemalloc"] = cache_conn.recv()
        cache_process.join(30)
        for stack in stacks.values():
            stack["result"]["load_end"] = loadavg()
            stack["wconn"].send("stop")
            stack["proc"].join(30)
            stack["sim"][1].send(("stop",))
            stack["sim"][0].join(30)
    finally:
        for server in servers:
            server.close()
        # Two JetStream stores and kubesim work dirs: ~300 MB at full scale, left in /tmp before.
        shutil.rmtree(workdir, ignore_errors=True)

    off, on = stacks[False]["result"], stacks[True]["result"]
    results = [off, on]
    pods = args.jobs * args.pods_per_job
    print(
        f"\n{args.jobs:,} jobs x {args.pods_per_job} pods ({pods:,} pods); {args.pairs} interleaved pairs; "
        f"run {time.perf_counter() - wall0:.0f} s\n"
    )
    print(
        "| pair | CPU per job event, on / off | CPU-us per job event, off / on | CPU-us per pod event, on | "
        "GC CPU-s in the job churn, off / on | load (1 min) at the job churns, off / on |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    ratios = []
    for r_off, r_on in zip(off["rounds"], on["rounds"], strict=True):
        a, b = per_job_event_us(r_off), per_job_event_us(r_on)
        ratios.append(b / a)
        pod_us = r_on["pod_churn"]["cpu"] / r_on["pod_churn"]["writes"] * 1e6
        print(
            f"| {r_off['round']} | {b / a:.2f}x | {a:.1f} / {b:.1f} | {pod_us:.1f} | "
            f"{sum(r_off['job_churn']['gc_cpu']):.2f} / {sum(r_on['job_churn']['gc_cpu']):.2f} | "
            f"{r_off['job_churn']['load'].split()[0]} / {r_on['job_churn']['load'].split()[0]} |"
        )
    median = statistics.median(ratios)
    on["ratios"] = ratios
    on["median_ratio"] = median
    print(f"\nmedian of the pairs' ratios: {median:.2f}x (target <= 1.30x)")
    published = [
        (r["job_churn"]["published"], r["pod_churn"]["published"]) for r in off["rounds"] + on["rounds"]
    ]
    print(f"job events published per round (job churn, pod churn): {sorted(set(published))}")
    print(f"sync (list) CPU-s: off {off['sync_cpu']:.2f}, on {on['sync_cpu']:.2f}")
    print(f"RSS after sync: off {off['rss']:.0f} MB, on {on['rss']:.0f} MB")
    per_pod = (on["rss"] - off["rss"]) * 1024 * 1024 / max(on["pods_cached"], 1)
    print(
        f"RSS delta over {on['pods_cached']:,} cached pods: {on['rss'] - off['rss']:.0f} MB, "
        f"{per_pod:,.0f} bytes per cached pod (target <= 1024)"
    )
    tm = on["tracemalloc"]
    print(
        f"tracemalloc of the evidence cache alone: {tm['bytes'] / tm['pods']:,.0f} bytes per cached pod "
        f"over {tm['pods']:,} pods (the pod objects are {tm['object_bytes'] / 1024:.1f} KB as JSON)"
    )
    lat = on.get("latency", {})
    for phase, v in lat.items():
        print(
            f"latency {phase}: {v['count']:,} terminal pods at {v['rate']:,.0f}/s: "
            f"p50 {v['p50'] * 1000:.0f} ms, "
            f"p99 {v['p99'] * 1000:.0f} ms (target <= 1000), max {v['max'] * 1000:.0f} ms, "
            f"{v['missing']} not seen; load {v['load']}"
        )
    print(f"load average: start {off['load_start']}, end {on['load_end']}")
    if args.json:
        args.json.write_text(
            orjson.dumps(
                {"args": vars(args) | {"json": None}, "results": results}, option=orjson.OPT_INDENT_2
            ).decode()
        )


if __name__ == "__main__":
    sys.exit(main())
