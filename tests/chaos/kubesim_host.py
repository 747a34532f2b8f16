"""kubesim in a process of its own, for the chaos run: clusters, scenarios, ground truth, faults.

    python -m chaos.kubesim_host --clusters 5 --seed 7 --control-port 9000 --workdir DIR

Why a process of its own: the watchers must meet an API server that is not slowed down or
paused by the runner's own work (reading the stream, SQL, the sink), as a real one would not be.
The runner drives it over a small loopback HTTP API (JSON in, JSON out):

    GET  /healthz                         200 once every cluster listens
    GET  /clusters                        [{name, url, kubeconfig}]
    POST /scenarios/start  {}             every cluster runs seeded demo batches
    POST /scenarios/stop   {timeout}      no new jobs; waits for the started lifecycles to end
    POST /burst            {jobs, rate}   that many extra jobs per cluster at once
    POST /hold             {cluster}      freeze that cluster's jobs (no write at all)
    POST /release          {cluster}      let them go on
    POST /faults/drop      {clusters?}    close every open watch abruptly
    POST /faults/compact   {clusters?}    forget the history: every resumed watch gets 410
    POST /faults/stall     {cluster, seconds}  watches send nothing (silent partition)
    POST /rotate           {cluster}      new token (the old one gets 401); returns the kubeconfig
    GET  /truth?since=N                   ground-truth entries N.. (in write order)
    GET  /diagnoses                       {uid: [category]}: what each diagnosed job's diagnosis may say
    GET  /stats                           entries, running lifecycles, open watches per cluster

Every lifecycle and its truth entry are written by the scenario drivers in this process, so the
truth is exactly what happened in the clusters, in order.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

import kubesim

Handler = Callable[[web.Request], Awaitable[web.Response]]


class Scenarios:
    """The drivers of every cluster, sharing one truth log, and the tasks running them."""

    def __init__(
        self,
        clusters: list[kubesim.Cluster],
        *,
        seed: int,
        rate: float,
        concurrency: int,
        diagnoses_per_batch: int = 1,
    ) -> None:
        self.truth = kubesim.TruthLog()
        self.diagnoses_per_batch = diagnoses_per_batch
        self.seed = seed
        self.rate = rate
        self.concurrency = concurrency
        self.clusters = {c.name: c for c in clusters}
        # One steady driver per cluster; bursts add drivers, so hold() must reach all of them.
        self.drivers: dict[str, list[kubesim.ScenarioDriver]] = {
            c.name: [kubesim.ScenarioDriver(c, seed=seed * 1000 + i, rate=rate, truth=self.truth)]
            for i, c in enumerate(clusters)
        }
        self._held: set[str] = set()
        self._running = False
        self._steady: list[asyncio.Task[Any]] = []
        self._bursts: list[asyncio.Task[Any]] = []
        self._bursts_made = 0

    def start(self) -> None:
        if self._running:
            return
        self._running = True
        self._steady = [
            asyncio.create_task(self._steady_loop(drivers[0]), name=f"kubesim-host steady {name}")
            for name, drivers in self.drivers.items()
        ]

    async def _steady_loop(self, driver: kubesim.ScenarioDriver) -> None:
        # A batch at a time, so stop() lets every started lifecycle end (terminal or deleted).
        # Beside each batch, diagnosis scenarios: jobs with pods, Events and logs whose reason
        # the watchers must find, and whose reason may move while the job stays Pending.
        cases = kubesim.diagnosis_cases(driver.cluster)
        picks = random.Random(driver.seed)
        while self._running:
            async with asyncio.TaskGroup() as group:
                group.create_task(
                    driver.run_demo(jobs=self.concurrency, concurrency=self.concurrency),
                    name=f"kubesim-host demo {driver.cluster.name}",
                )
                for _ in range(self.diagnoses_per_batch if cases else 0):
                    spec, category = picks.choice(cases)
                    group.create_task(
                        self._diagnose(driver, spec, category),
                        name=f"kubesim-host diagnosis {driver.cluster.name}",
                    )

    @staticmethod
    async def _diagnose(driver: kubesim.ScenarioDriver, spec: kubesim.KindSpec, category: str) -> None:
        with contextlib.suppress(kubesim.NotApplicable):
            await driver.run_diagnosis(spec, category, namespace=driver.random.choice(driver.namespaces))

    def diagnoses(self) -> dict[str, list[str]]:
        """uid -> the categories a job's final diagnosis may have (a variant's earlier truth
        comes first, so the last one per job wins)."""
        accepted: dict[str, list[str]] = {}
        for drivers in self.drivers.values():
            for driver in drivers:
                for truth in driver.diagnoses:
                    categories = accepted_categories(truth)
                    if categories:
                        accepted[truth.uid] = categories
                    else:
                        accepted.pop(truth.uid, None)
        return accepted

    def burst(self, jobs: int, rate: float) -> int:
        """``jobs`` more jobs on every cluster, all started at once (a burst of submissions)."""
        self._bursts_made += 1
        for i, (name, cluster) in enumerate(self.clusters.items()):
            seed = self.seed * 1000 + 500 + self._bursts_made * 50 + i  # names never collide
            driver = kubesim.ScenarioDriver(cluster, seed=seed, rate=rate, truth=self.truth)
            if name in self._held:
                driver.hold()
            self.drivers[name].append(driver)
            task = asyncio.create_task(
                driver.run_demo(jobs=jobs, concurrency=jobs), name=f"kubesim-host burst {name}"
            )
            self._bursts.append(task)
        return jobs * len(self.clusters)

    def hold(self, cluster: str) -> None:
        self._held.add(cluster)
        for driver in self.drivers[cluster]:
            driver.hold()

    def release(self, cluster: str) -> None:
        self._held.discard(cluster)
        for driver in self.drivers[cluster]:
            driver.release()

    def running_tasks(self) -> int:
        return sum(1 for t in [*self._steady, *self._bursts] if not t.done())

    async def stop(self, timeout: float) -> bool:
        """No new batches; wait up to ``timeout`` for the started lifecycles, then cancel.
        Returns whether they all ended by themselves (the truth is then complete)."""
        self._running = False
        for name in list(self._held):
            self.release(name)
        tasks = [*self._steady, *self._bursts]
        done, pending = await asyncio.wait(tasks, timeout=timeout) if tasks else (set(), set())
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                print(f"kubesim-host: a scenario failed: {task.exception()!r}", file=sys.stderr, flush=True)
        return not pending


def accepted_categories(truth: kubesim.DiagnosisTruth) -> list[str]:
    """What the watcher's diagnosis may say for this truth, as the watcher's end-to-end tests
    hold it (services/watcher/tests/test_watcher_diagnosis.py): BackoffLimitExceeded is reported
    by its root cause (the last attempt's category, or CrashLoop for Kubeflow's in-place
    restarts); a JobSet's DeadlineExceeded lives on its child Jobs (nothing compared)."""
    if (truth.kind, truth.category) == ("JobSet", "DeadlineExceeded"):
        return []
    if truth.category == "BackoffLimitExceeded":
        return [c for c in (truth.cause, "CrashLoop") if c]
    return [truth.category]


def _select(sim: kubesim.Simulator, body: dict[str, Any]) -> list[kubesim.Cluster]:
    names = body.get("clusters")
    return [sim[n] for n in names] if names else list(sim.clusters.values())


def make_app(sim: kubesim.Simulator, scenarios: Scenarios) -> web.Application:
    async def body_of(request: web.Request) -> dict[str, Any]:
        if not request.can_read_body:
            return {}
        data = await request.json()
        return data if isinstance(data, dict) else {}

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"clusters": len(sim.clusters)})

    async def clusters(_: web.Request) -> web.Response:
        return web.json_response(
            [{"name": c.name, "url": c.url, "kubeconfig": c.kubeconfig_yaml()} for c in sim.clusters.values()]
        )

    async def start(_: web.Request) -> web.Response:
        scenarios.start()
        return web.json_response({"started": True})

    async def stop(request: web.Request) -> web.Response:
        body = await body_of(request)
        complete = await scenarios.stop(float(body.get("timeout", 60)))
        return web.json_response({"complete": complete, "entries": len(scenarios.truth)})

    async def burst(request: web.Request) -> web.Response:
        body = await body_of(request)
        jobs = scenarios.burst(int(body["jobs"]), float(body.get("rate", scenarios.rate)))
        return web.json_response({"jobs": jobs})

    async def hold(request: web.Request) -> web.Response:
        scenarios.hold(str((await body_of(request))["cluster"]))
        return web.json_response({"held": True, "entries": len(scenarios.truth)})

    async def release(request: web.Request) -> web.Response:
        scenarios.release(str((await body_of(request))["cluster"]))
        return web.json_response({"held": False})

    async def drop(request: web.Request) -> web.Response:
        dropped = sum(c.faults.drop_watches() for c in _select(sim, await body_of(request)))
        return web.json_response({"dropped": dropped})

    async def compact(request: web.Request) -> web.Response:
        # Forget the history, then drop the watches: every informer resumes from a version that is
        # gone, gets 410 and relists (a real API server after an etcd compaction and a restart).
        selected = _select(sim, await body_of(request))
        for cluster in selected:
            cluster.compact()
        dropped = sum(c.faults.drop_watches() for c in selected)
        return web.json_response({"compacted": len(selected), "dropped": dropped})

    async def stall(request: web.Request) -> web.Response:
        body = await body_of(request)
        sim[str(body["cluster"])].faults.stall_watches(float(body["seconds"]))
        return web.json_response({"stalled": body["cluster"]})

    async def rotate(request: web.Request) -> web.Response:
        cluster = sim[str((await body_of(request))["cluster"])]
        cluster.rotate_token()
        return web.json_response({"kubeconfig": cluster.kubeconfig_yaml()})

    async def truth(request: web.Request) -> web.Response:
        since = int(request.query.get("since", "0"))
        entries = scenarios.truth.entries[since:]
        return web.json_response({"since": since, "entries": [e.as_dict() for e in entries]})

    async def diagnoses(_: web.Request) -> web.Response:
        return web.json_response(scenarios.diagnoses())

    async def stats(_: web.Request) -> web.Response:
        return web.json_response(
            {
                "entries": len(scenarios.truth),
                "created": sum(1 for e in scenarios.truth.entries if e.change == "created"),
                "running": scenarios.running_tasks(),
                "watches": {c.name: c.hub.count for c in sim.clusters.values()},
            }
        )

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/clusters", clusters)
    app.router.add_post("/scenarios/start", start)
    app.router.add_post("/scenarios/stop", stop)
    app.router.add_post("/burst", burst)
    app.router.add_post("/hold", hold)
    app.router.add_post("/release", release)
    app.router.add_post("/faults/drop", drop)
    app.router.add_post("/faults/compact", compact)
    app.router.add_post("/faults/stall", stall)
    app.router.add_post("/rotate", rotate)
    app.router.add_get("/truth", truth)
    app.router.add_get("/diagnoses", diagnoses)
    app.router.add_get("/stats", stats)
    return app


async def serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with kubesim.Simulator(args.workdir) as sim:
        clusters = [
            await sim.add_cluster(
                f"c{i:02d}",
                kinds=kubesim.ALL_KINDS,
                tls=True,
                history_limit=args.history,
                bookmark_interval=args.bookmark_interval,
                seed=args.seed * 1000 + i,
            )
            for i in range(1, args.clusters + 1)
        ]
        scenarios = Scenarios(
            clusters,
            seed=args.seed,
            rate=args.rate,
            concurrency=args.concurrency,
            diagnoses_per_batch=args.diagnoses_per_batch,
        )
        runner = web.AppRunner(make_app(sim, scenarios), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", args.control_port).start()
        print(f"kubesim-host: {len(clusters)} clusters, control on {args.control_port}", flush=True)
        try:
            await stop.wait()
        finally:
            with contextlib.suppress(Exception):
                await scenarios.stop(timeout=0)
            await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.kubesim_host")
    parser.add_argument("--clusters", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rate", type=float, default=2.0, help="status writes per second per job")
    parser.add_argument("--concurrency", type=int, default=4, help="steady jobs at once per cluster")
    parser.add_argument(
        "--diagnoses-per-batch", type=int, default=1, help="diagnosis scenarios beside each steady batch"
    )
    parser.add_argument("--history", type=int, default=10_000)
    parser.add_argument("--bookmark-interval", type=float, default=1.0)
    parser.add_argument("--control-port", type=int, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    asyncio.run(serve(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
