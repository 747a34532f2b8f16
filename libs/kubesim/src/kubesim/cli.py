"""``python -m kubesim``: run simulated clusters (and a demo scenario) until interrupted."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from kubesim.diagnosis_scenarios import cases
from kubesim.kinds import ALL_KINDS, ALL_KINDS_MPI_V1
from kubesim.scenarios import ScenarioDriver
from kubesim.simulator import Simulator

__all__ = ["main", "parse_args", "serve"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="kubesim", description="Simulated Kubernetes API servers.")
    p.add_argument("--clusters", type=int, default=1, help="how many clusters (default 1)")
    p.add_argument("--name-prefix", default="sim", help="cluster names are <prefix>-<n>")
    p.add_argument(
        "--scenario",
        choices=("none", "demo", "diagnosis"),
        default="none",
        help="'demo' keeps creating jobs of every kind through realistic lifecycles; 'diagnosis' runs "
        "every diagnosis scenario once (each category on each kind it applies to)",
    )
    p.add_argument("--rate", type=float, default=2.0, help="status writes per second per job (demo)")
    p.add_argument("--concurrency", type=int, default=8, help="jobs running at once per cluster (demo)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-tls", action="store_true", help="plain HTTP instead of HTTPS")
    p.add_argument("--mpi-v1", action="store_true", help="serve MPIJob kubeflow.org/v1 instead of v2beta1")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="first port (0: any free ports)")
    p.add_argument(
        "--kubeconfig-dir",
        type=Path,
        default=Path(".run/kubesim"),
        help="where to write <cluster>.kubeconfig (default .run/kubesim)",
    )
    p.add_argument("--history", type=int, default=10_000, help="watch history length per cluster")
    p.add_argument("--bookmark-interval", type=float, default=60.0)
    p.add_argument("--kueue", action="store_true", help="install Kueue (Workloads, queues, visibility API)")
    p.add_argument("--volcano-podgroups", action="store_true", help="serve scheduling.volcano.sh PodGroups")
    p.add_argument("--coscheduling", action="store_true", help="serve scheduling.x-k8s.io PodGroups")
    return p.parse_args(argv)


async def serve(
    args: argparse.Namespace, *, ready: asyncio.Event | None = None, stop: asyncio.Event | None = None
) -> None:
    stop = stop or asyncio.Event()
    kinds = ALL_KINDS_MPI_V1 if args.mpi_v1 else ALL_KINDS
    async with Simulator(args.kubeconfig_dir, host=args.host) as sim:
        drivers = []
        for i in range(args.clusters):
            cluster = await sim.add_cluster(
                f"{args.name_prefix}-{i + 1}",
                kinds=kinds,
                tls=not args.no_tls,
                port=args.port + i if args.port else 0,
                history_limit=args.history,
                bookmark_interval=args.bookmark_interval,
                seed=args.seed + i,
                kueue=args.kueue,
                volcano_podgroups=args.volcano_podgroups,
                coscheduling=args.coscheduling,
            )
            path = cluster.write_kubeconfig(args.kubeconfig_dir / f"{cluster.name}.kubeconfig")
            print(f"{cluster.name} {cluster.url} {path.resolve()}", flush=True)
            if args.scenario in ("demo", "diagnosis"):
                drivers.append(ScenarioDriver(cluster, seed=args.seed + i, rate=args.rate))
        if ready is not None:
            ready.set()
        async with asyncio.TaskGroup() as tg:
            if args.scenario == "diagnosis":
                runners = [tg.create_task(_diagnose_all(d)) for d in drivers]
            else:
                runners = [tg.create_task(d.run_forever(concurrency=args.concurrency)) for d in drivers]
            await stop.wait()
            for t in runners:
                t.cancel()


async def _diagnose_all(driver: ScenarioDriver) -> None:
    for spec, category in cases(driver.cluster):
        truth = await driver.run_diagnosis(spec, category)
        print(f"{truth.cluster} {truth.kind} {truth.namespace}/{truth.name} {truth.category}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        await serve(args, stop=stop)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
