"""Persister benchmark: ingest rate (batched vs row-at-a-time) and list-endpoint latency at scale.

    uv run python bench/persist/run.py                 # 1M jobs / 5M transitions (about 5 min)
    uv run python bench/persist/run.py --jobs 100000   # a quicker look

Starts its own nats-server and PostgreSQL on loopback (or uses TRAINWATCH_BENCH_NATS_URL /
TRAINWATCH_BENCH_POSTGRES_URL, which must point at throwaway servers), prints a table and
writes bench/persist/results.json. Targets: batched ≥ 10x row-at-a-time; list p99 < 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import baseline
import dataset
import ingest
import querying

from trainwatch_common.testing import NatsServer, PostgresServer

RESULTS = Path(__file__).resolve().parent / "results.json"


class BenchPostgres(PostgresServer):
    """The test harness's PostgreSQL with production-like memory settings for a 1M-row table."""

    def command(self) -> list[str]:
        return [
            *super().command(),
            "-c",
            "shared_buffers=1GB",
            "-c",
            "work_mem=32MB",
            "-c",
            "max_wal_size=4GB",
        ]


def log(message: str) -> None:
    print(message, flush=True)


async def main(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    servers: list[NatsServer | PostgresServer] = []
    nats_url = os.environ.get("TRAINWATCH_BENCH_NATS_URL")
    postgres: PostgresServer | None = None
    try:
        if not nats_url:
            nats_server = NatsServer()
            nats_server.start()
            servers.append(nats_server)
            nats_url = nats_server.url
        if not os.environ.get("TRAINWATCH_BENCH_POSTGRES_URL"):
            postgres = BenchPostgres()
            postgres.start()
            servers.append(postgres)

        def new_database() -> str:
            external = os.environ.get("TRAINWATCH_BENCH_POSTGRES_URL")
            if external:
                return external
            assert postgres is not None
            return postgres.create_database(f"bench_{uuid.uuid4().hex[:8]}")

        report: dict[str, object] = {
            "machine": f"{os.cpu_count()} cpus, Python {platform.python_version()}",
            "load_average_at_start": os.getloadavg(),
        }
        log(f"load average {os.getloadavg()} on {os.cpu_count()} cpus (a shared machine)")

        if args.dashboard_only:
            await dashboard_filters(args, new_database(), report)
            return 0
        log(f"ingest: {args.events:,} events batched (batch {args.batch}), {args.row_events:,} row-at-a-time")
        row = await ingest.run_mode(mode="row-at-a-time", batch_size=1, events=args.row_events,
                                    nats_url=nats_url, database_url=new_database())  # fmt: skip
        batched = await ingest.run_mode(mode="batched", batch_size=args.batch, events=args.events,
                                        nats_url=nats_url, database_url=new_database())  # fmt: skip
        direct_row = await ingest.write_path(
            database_url=new_database(), events=args.row_events, batch_size=1
        )
        direct_batch = await ingest.write_path(
            database_url=new_database(), events=args.events, batch_size=args.batch
        )
        ingest_rows = [row, batched, direct_row, direct_batch]
        for r in ingest_rows:
            log(f"  {r.mode:<24} {r.events:>8,} events in {r.seconds:6.2f}s = {r.rate:>9,.0f} events/s")
        log(f"  batched / row-at-a-time: consumer {batched.rate / row.rate:.1f}x, write path "
            f"{direct_batch.rate / direct_row.rate:.1f}x (target >= 10x)")  # fmt: skip
        report["ingest"] = [
            {"mode": r.mode, "batch_size": r.batch_size, "events": r.events, "seconds": round(r.seconds, 3),
             "events_per_second": round(r.rate)} for r in ingest_rows
        ]  # fmt: skip
        report["ingest_ratio_consumer"] = round(batched.rate / row.rate, 1)
        report["ingest_ratio_write_path"] = round(direct_batch.rate / direct_row.rate, 1)

        log(f"dataset: {args.jobs:,} jobs, {args.jobs * dataset.TRANSITIONS_PER_JOB:,} transitions")
        query_db = new_database()
        load_steps = await dataset.load(query_db, jobs_count=args.jobs, log=log)
        report["dataset"] = {"jobs": args.jobs, "transitions": args.jobs * dataset.TRANSITIONS_PER_JOB,
                             "seconds": {k: round(v, 1) for k, v in load_steps.items()}}  # fmt: skip

        log(f"list endpoint: {args.requests} sequential requests per scenario over HTTP, limit=50")
        latencies = await querying.run_scenarios(query_db, requests=args.requests, jobs_count=args.jobs)
        log(f"  {'scenario':<46} {'total':>9} {'p50 ms':>7} {'p99 ms':>7} {'mean ms':>8}")
        for lat in latencies:
            log(f"  {lat.scenario:<46} {lat.total:>9,} {lat.percentile(50):>7.1f} {lat.percentile(99):>7.1f} "
                f"{lat.mean:>8.1f}")  # fmt: skip
        report["list_latency_ms"] = [
            {"scenario": lat.scenario, "total": lat.total, "requests": len(lat.samples),
             "p50": round(lat.percentile(50), 2), "p95": round(lat.percentile(95), 2),
             "p99": round(lat.percentile(99), 2), "mean": round(lat.mean, 2)} for lat in latencies
        ]  # fmt: skip
        await _dashboard_latencies(args, query_db, report)
        report["load_average_at_end"] = os.getloadavg()
        report["wall_seconds"] = round(time.perf_counter() - started, 1)
        RESULTS.write_text(json.dumps(report, indent=2) + "\n")
        log(f"done in {report['wall_seconds']}s; results in {RESULTS}")
        return 0
    finally:
        for server in reversed(servers):
            server.close()


async def dashboard_filters(args: argparse.Namespace, database_url: str, report: dict[str, object]) -> None:
    """--dashboard-only: load the dataset, then only the jobs page's filters, baseline and tree."""
    log(f"dataset: {args.jobs:,} jobs, {args.jobs * dataset.TRANSITIONS_PER_JOB:,} transitions")
    load_steps = await dataset.load(database_url, jobs_count=args.jobs, log=log)
    report["dataset"] = {"jobs": args.jobs, "seconds": {k: round(v, 1) for k, v in load_steps.items()}}
    await _dashboard_latencies(args, database_url, report)
    report["load_average_at_end"] = os.getloadavg()
    path = RESULTS.with_name("results-dashboard-filters.json")
    path.write_text(json.dumps(report, indent=2) + "\n")
    log(f"results in {path}")


async def _dashboard_latencies(
    args: argparse.Namespace, database_url: str, report: dict[str, object]
) -> None:
    """The jobs page's filters against the same database: the baseline ref's API, then this tree's."""
    rows: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="persist-baseline-") as scratch:
        source = baseline.persister_source(args.baseline_ref, Path(scratch))
        labels = {"baseline": f"{args.baseline_ref} ({baseline.short_rev(args.baseline_ref)})",
                  "tree": baseline.tree_label()}  # fmt: skip
        for variant, pythonpath in (("baseline", source), ("tree", None)):
            log(
                f"dashboard filters, {labels[variant]}: {args.requests} requests each, load {os.getloadavg()}"
            )
            for lat in await querying.run_dashboard_scenarios(
                database_url, requests=args.requests, pythonpath=pythonpath
            ):
                row = rows.setdefault(lat.scenario, {"scenario": lat.scenario, "total": lat.total})
                row[variant] = {"p50": round(lat.percentile(50), 2), "p99": round(lat.percentile(99), 2)}
    log(f"  {'filter':<36} {'total':>9} {'baseline p50/p99':>18} {'tree p50/p99':>14}")
    for row in rows.values():
        b, t = row["baseline"], row["tree"]
        log(f"  {row['scenario']:<36} {row['total']:>9,} {b['p50']:>8.1f}/{b['p99']:<8.1f} "  # type: ignore[index]
            f"{t['p50']:>6.1f}/{t['p99']:<6.1f}")  # type: ignore[index]  # fmt: skip
    report["dashboard_filters_ms"] = {"code": labels, "load": os.getloadavg(), "rows": list(rows.values())}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--jobs", type=int, default=1_000_000, help="jobs in the query dataset (5 transitions each)"
    )
    parser.add_argument("--events", type=int, default=50_000, help="events for the batched ingest run")
    parser.add_argument("--row-events", type=int, default=5_000, help="events for the row-at-a-time run")
    parser.add_argument("--batch", type=int, default=500, help="batch size of the batched run")
    parser.add_argument("--requests", type=int, default=200, help="timed requests per list scenario")
    parser.add_argument(
        "--baseline-ref",
        help="git ref of the dashboard filters' baseline API (default: the fork point from main)",
    )
    parser.add_argument(
        "--dashboard-only", action="store_true", help="only the dataset and the jobs page's filters"
    )
    args = parser.parse_args()
    args.baseline_ref = args.baseline_ref or baseline.fork_point()
    return args


def _exit_on_sigterm(*_: object) -> None:
    raise SystemExit(143)  # unwinds through main()'s finally, which stops the servers


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    sys.exit(asyncio.run(main(parse_args())))
