"""Paced ingest: the persister process's CPU per event at a steady rate (500 events/s), PostgreSQL.

    uv run python bench/persist/paced.py                       # 500 events/s for 40 s, main vs tree
    uv run python bench/persist/paced.py --rate 500 --seconds 60 --rounds 2
    uv run python bench/persist/paced.py --profile /tmp/prof   # py-spy (uvx) on each variant

Production does not replay a history: events arrive a few at a time, so the persister sees small
fetches, and what a transaction, a statement and an event cost each is paid per event. This
bench publishes a paced stream of job-status CloudEvents (pytorchjob lifecycles of 5 events, 50
jobs interleaved) to a real JetStream JOBS stream and runs the real service as a process
(``python -m trainwatch_persister``, as ``make run`` starts it) on a fresh PostgreSQL database.

Measured per variant:

- the persister process's CPU (utime + stime from /proc) from the first publish until every
  event is visible in SQL, per event;
- commit-visible latency: publish start -> the row visible in ``job_transitions`` to another
  session (polled every 10 ms, so figures carry up to ~10 ms of polling resolution).

Variants, in the same run and on the same stream: ``baseline`` is the persister source of a git
ref (default ``main``, extracted with ``git archive`` and put first on PYTHONPATH), ``tree`` is
this working tree. A same-run reference: the CPU of a bare ``orjson.loads`` and of the pydantic
parse of the same payloads, in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import httpx
import nats
import orjson
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

sys.path.insert(0, str(Path(__file__).resolve().parent))

import baseline
from run import BenchPostgres

from trainwatch_common import (
    JobRef,
    JobStatusEvent,
    Phase,
    ReplicaCounts,
    ensure_consumer,
    ensure_streams,
    job_event_id,
    job_subject,
    wrap_job_event,
)
from trainwatch_common.events.envelope import parse_job_event
from trainwatch_common.streams import JOBS_STREAM, PERSISTER_CONSUMER
from trainwatch_common.testing import NatsServer, free_port

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results-paced.json"
TOKEN = "bench-viewer-token-0123456789"
LIFECYCLE = [Phase.PENDING, Phase.RUNNING, Phase.RESTARTING, Phase.RUNNING, Phase.SUCCEEDED]
INTERLEAVED = 50  # jobs whose events are interleaved in the stream
START = datetime(2026, 12, 1, tzinfo=UTC)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def log(message: str) -> None:
    print(message, flush=True)


def make_stream(count: int, run: str) -> list[tuple[str, bytes, str]]:
    """(subject, CloudEvent bytes, event id) for ``count`` events: 5-event lifecycles, interleaved."""
    out = []
    steps = len(LIFECYCLE)
    for k in range(count):
        group, within = divmod(k, INTERLEAVED * steps)
        step, slot = divmod(within, INTERLEAVED)
        n = group * INTERLEAVED + slot
        cluster, uid = f"cluster-{n % 10}", f"{run}-{n}"
        phase = LIFECYCLE[step]
        event = JobStatusEvent(
            event_id=job_event_id(cluster, uid, step),
            change="created" if step == 0 else "transition",
            sequence=step, epoch=1, watcher_id="bench-watcher",
            job=JobRef(cluster_id=cluster, api_version="kubeflow.org/v1", kind="PyTorchJob",
                       kind_key="pytorchjob", namespace=f"ns-{n % 7}", name=f"train-{n}", uid=uid,
                       resource_version=str(1000 + n * 10 + step)),
            phase=phase, terminal=phase is Phase.SUCCEEDED,
            previous_phase=LIFECYCLE[step - 1] if step else None,
            reason="Bench", message=f"step {step}",
            created_at=START, observed_at=START + timedelta(seconds=n + step),
            started_at=START + timedelta(seconds=n + 1) if step else None,
            finished_at=START + timedelta(seconds=n + step) if phase is Phase.SUCCEEDED else None,
            labels={"team": f"team-{n % 5}", "tier": "gpu"}, owner=f"user-{n % 50}", queue="default",
            replicas={"master": ReplicaCounts(active=1), "worker": ReplicaCounts(active=3 if step else 0)},
        )  # fmt: skip
        job = event.job
        subject = job_subject(cluster_id=job.cluster_id, namespace=job.namespace, kind_key=job.kind_key,
                              name=job.name)  # fmt: skip
        out.append((subject, wrap_job_event(event).to_json(), event.event_id))
    return out


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


@dataclass
class Variant:
    name: str
    pythonpath: str | None  # None: this tree (the installed, editable packages)
    label: str


@dataclass
class Result:
    variant: str
    label: str
    events: int
    rate: float
    publish_seconds: float
    cpu_seconds: float
    idle_cpu_per_second: float
    latencies: list[float] = field(repr=False)
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)
    batches: dict[str, float] = field(default_factory=dict)  # from the persister's /metrics

    @property
    def cpu_ms_per_event(self) -> float:
        return self.cpu_seconds / self.events * 1000

    def latency(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] * 1000


async def fresh_stream(js: JetStreamContext) -> None:
    with contextlib.suppress(NotFoundError):
        await js.delete_stream(JOBS_STREAM.name or "JOBS")
    await ensure_streams(js)
    await ensure_consumer(js, PERSISTER_CONSUMER)


class PersisterProcess:
    def __init__(
        self, variant: Variant, *, database_url: str, nats_url: str, extra_env: dict[str, str]
    ) -> None:
        self.port = free_port()
        env = {
            **os.environ,
            "TRAINWATCH_DATABASE_URL": database_url,
            "TRAINWATCH_NATS_URL": nats_url,
            "TRAINWATCH_HTTP_PORT": str(self.port),
            "TRAINWATCH_RETENTION_DAYS": "0",
            "TRAINWATCH_VIEWER_TOKENS": TOKEN,
            "TRAINWATCH_LOG_LEVEL": "WARNING",
            **extra_env,
        }
        if variant.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [variant.pythonpath, env.get("PYTHONPATH")]))
        self.process = subprocess.Popen([sys.executable, "-m", "trainwatch_persister"], env=env)

    async def ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient() as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"the persister exited with {self.process.returncode}")
                with contextlib.suppress(httpx.TransportError):
                    if (
                        await client.get(f"http://127.0.0.1:{self.port}/readyz", timeout=1)
                    ).status_code == 200:
                        return
                await asyncio.sleep(0.1)
        raise RuntimeError("the persister did not become ready")

    async def batch_metrics(self) -> dict[str, float]:
        """Batches written, their mean size and mean seconds, from the service's own histograms."""
        async with httpx.AsyncClient() as client:
            text = (await client.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5)).text
        values = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name in ("trainwatch_persister_batch_size_sum", "trainwatch_persister_batch_size_count",
                        "trainwatch_persister_batch_seconds_sum"):  # fmt: skip
                values[name.removeprefix("trainwatch_persister_")] = float(value)
        count = values.get("batch_size_count", 0) or 1
        return {
            "batches": values.get("batch_size_count", 0),
            "mean_events": values.get("batch_size_sum", 0) / count,
            "mean_ms": values.get("batch_seconds_sum", 0) / count * 1000,
        }

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


async def run_variant(
    variant: Variant,
    *,
    stream: list[tuple[str, bytes, str]],
    rate: float,
    nats_url: str,
    database_url: str,
    profile: Path | None,
    extra_env: dict[str, str],
) -> Result:
    client = await nats.connect(nats_url)
    js = client.jetstream()
    await fresh_stream(js)
    persister = PersisterProcess(variant, database_url=database_url, nats_url=nats_url, extra_env=extra_env)
    spy: subprocess.Popen[bytes] | None = None
    sql = await asyncpg.connect(database_url)
    try:
        await persister.ready()
        pid = persister.process.pid
        idle_started, idle_cpu = time.monotonic(), process_cpu(pid)
        await asyncio.sleep(3)  # idle CPU: the fetch loop's long polls, the gauge
        idle = (process_cpu(pid) - idle_cpu) / (time.monotonic() - idle_started)
        if profile is not None:
            profile.mkdir(parents=True, exist_ok=True)
            spy = subprocess.Popen(  # noqa: ASYNC220 - started once, before the measured part
                ["uvx", "py-spy", "record", "--pid", str(pid), "--rate", "250", "--format", "raw",
                 "--output", str(profile / f"{variant.name}.txt"), "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=(profile / f"{variant.name}.log").open("wb"),
            )  # fmt: skip
            await asyncio.sleep(2)
        published: dict[str, float] = {}
        latencies: list[float] = []
        done = asyncio.Event()

        async def poll() -> None:
            seen = 0
            while True:
                pending = [event_id for event_id in published if event_id]
                if pending:
                    rows = await sql.fetch(
                        "SELECT event_id FROM job_transitions WHERE event_id = ANY($1::text[])", pending
                    )
                    now = time.monotonic()
                    for row in rows:
                        latencies.append(now - published.pop(row["event_id"]))
                    seen += len(rows)
                    if seen == len(stream):
                        done.set()
                        return
                await asyncio.sleep(0.01)

        poller = asyncio.create_task(poll())
        cpu_before = process_cpu(pid)
        started = time.monotonic()
        for index, (subject, payload, event_id) in enumerate(stream):
            due = started + index / rate
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            published[event_id] = time.monotonic()
            await js.publish(subject, payload, headers={"Nats-Msg-Id": event_id})
        publish_seconds = time.monotonic() - started
        await asyncio.wait_for(done.wait(), timeout=120)
        cpu = process_cpu(pid) - cpu_before
        await poller
        batches = await persister.batch_metrics()
        return Result(
            variant=variant.name, label=variant.label, events=len(stream), rate=len(stream) / publish_seconds,
            publish_seconds=publish_seconds, cpu_seconds=cpu, idle_cpu_per_second=idle, latencies=latencies,
            load=os.getloadavg(), batches=batches,
        )  # fmt: skip
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            with contextlib.suppress(subprocess.TimeoutExpired):
                spy.wait(20)
        await sql.close()
        persister.stop()
        await client.close()


def reference_cpu(stream: list[tuple[str, bytes, str]]) -> dict[str, float]:
    """CPU µs per event of decoding the same payloads in this process: orjson, and the pydantic parse."""
    payloads = [payload for _, payload, _ in stream]
    started = time.process_time()
    for payload in payloads:
        orjson.loads(payload)
    decode = time.process_time() - started
    started = time.process_time()
    for payload in payloads:
        parse_job_event(payload)
    parse = time.process_time() - started
    return {
        "orjson_loads_us": decode / len(payloads) * 1e6,
        "pydantic_parse_us": parse / len(payloads) * 1e6,
    }


async def main(args: argparse.Namespace) -> int:
    servers: list[NatsServer | BenchPostgres] = []
    report: dict[str, object] = {
        "rate": args.rate, "seconds": args.seconds, "cpus": os.cpu_count(), "load_at_start": os.getloadavg(),
    }  # fmt: skip
    log(f"load average {os.getloadavg()} on {os.cpu_count()} cpus (a shared machine)")
    with tempfile.TemporaryDirectory(prefix="paced-bench-") as scratch:
        variants = [
            Variant("baseline", baseline.persister_source(args.baseline_ref, Path(scratch)),
                    f"{args.baseline_ref} ({baseline.short_rev(args.baseline_ref)})"),
            Variant("tree", None, baseline.tree_label()),
        ]  # fmt: skip
        try:
            nats_server = NatsServer()
            nats_server.start()
            servers.append(nats_server)
            postgres = BenchPostgres()
            postgres.start()
            servers.append(postgres)
            count = int(args.rate * args.seconds)
            results: list[Result] = []
            for round_ in range(args.rounds):
                for variant in variants:
                    stream = make_stream(count, run=f"{variant.name}{round_}")
                    database = postgres.create_database(f"paced_{uuid.uuid4().hex[:8]}")
                    log(f"{variant.label}: {count:,} events at {args.rate:g}/s ...")
                    result = await run_variant(
                        variant, stream=stream, rate=args.rate, nats_url=nats_server.url,
                        database_url=database,
                        profile=args.profile, extra_env=dict(e.split("=", 1) for e in args.env),
                    )  # fmt: skip
                    results.append(result)
                    log(f"  {result.cpu_ms_per_event:.3f} ms CPU/event ({result.cpu_seconds:.1f} CPU-s, "
                        f"{result.cpu_seconds / result.publish_seconds:.2f} of a core); SQL visible p50 "
                        f"{result.latency(50):.0f} ms p99 {result.latency(99):.0f} ms; idle "
                        f"{result.idle_cpu_per_second * 100:.1f}% of a core; rate {result.rate:.0f}/s; "
                        f"batches {result.batches}; load {result.load}")  # fmt: skip
            reference = reference_cpu(make_stream(min(count, 10_000), run="reference"))
            decode, parse = reference["orjson_loads_us"], reference["pydantic_parse_us"]
            log(f"same-run reference, per event in this process: orjson.loads {decode:.1f} µs, "
                f"pydantic parse {parse:.1f} µs")  # fmt: skip
            report["reference"] = {k: round(v, 2) for k, v in reference.items()}
            report["results"] = [
                {"variant": r.variant, "code": r.label, "events": r.events, "rate": round(r.rate, 1),
                 "cpu_seconds": round(r.cpu_seconds, 2), "cpu_ms_per_event": round(r.cpu_ms_per_event, 4),
                 "idle_cpu_fraction": round(r.idle_cpu_per_second, 4),
                 "sql_visible_ms": {"p50": round(r.latency(50), 1), "p99": round(r.latency(99), 1),
                                    "max": round(max(r.latencies) * 1000, 1),
                                    "mean": round(statistics.fmean(r.latencies) * 1000, 1)},
                 "batches": r.batches, "load": r.load} for r in results
            ]  # fmt: skip
            report["load_at_end"] = os.getloadavg()
            if not args.profile:
                RESULTS.write_text(json.dumps(report, indent=2) + "\n")
                log(f"results in {RESULTS}")
            return 0
        finally:
            for server in reversed(servers):
                server.close()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=500, help="events per second")
    parser.add_argument("--seconds", type=float, default=40, help="how long the stream lasts")
    parser.add_argument("--rounds", type=int, default=1, help="baseline, tree, baseline, tree...")
    parser.add_argument(
        "--baseline-ref", help="git ref of the baseline persister (default: the fork point from main)"
    )
    parser.add_argument("--profile", type=Path, help="record py-spy (uvx) raw stacks per variant here")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for both persisters")
    args = parser.parse_args()
    args.baseline_ref = args.baseline_ref or baseline.fork_point()
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
