"""Sustained burst: can the notifier keep up with 500 transitions/s for 60 s (issue 21)?

    uv run python bench/notify/burst.py [--rate 500] [--seconds 60] [--hold 15] [--baseline-ref REF]

Real processes on loopback: nats-server, redis-server, the Feishu-compatible sink (signatures,
Feishu's 5/s and 100/min enforced) and the notifier (``python -m trainwatch_notifier``) with
digests on (threshold 10 per 60 s, ``--hold`` seconds) and the default ``max_in_flight``. A paced
publisher writes ``--rate`` Failed events/s for ``--seconds``. An event is *told* when the
notifier has acked it (a single card or a digest that covers it was accepted by the sink, or it
was dead-lettered): the JetStream consumer's ack floor is sampled every 0.25 s.

It prints, per notifier: p50/p99/max of publish → told, how long after the burst's end the
backlog (pending + unacked) is back to zero, the cards sent, and the sink's refusals (11232:
over the bot's limits). ``--baseline-ref`` runs the same burst, in the same run, against the
notifier's code at that git ref (a throw-away worktree), for a ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import nats
from nats.js.api import Header

from trainwatch_common import job_event_id, job_subject, wrap_job_event
from trainwatch_common.testing import NatsServer, RedisServer, free_port

sys.path.insert(0, str(Path(__file__).parent))
from run import SECRET, event, percentile  # the notifier bench's event and helpers

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Result:
    label: str
    told_p50: float
    told_p99: float
    told_max: float
    drained_after_end: float
    cards: int
    refused: int
    load: float


async def burst(label: str, src: Path, args: argparse.Namespace) -> Result:
    work = Path(tempfile.mkdtemp(prefix="bench-burst-"))
    nats_server, redis_server = NatsServer(workdir=work / "nats"), RedisServer(workdir=work / "redis")
    for server in (nats_server, redis_server):
        server.workdir.mkdir()
        server.start()
    sink_port, health_port = free_port(), free_port()
    sink_url = f"http://127.0.0.1:{sink_port}/open-apis/bot/v2/hook/bench"
    rules = work / "rules.yaml"
    rules.write_text(
        f"channels:\n  bench: {{type: feishu, url: '{sink_url}', secret: {SECRET},"
        f" digest: {{threshold: 10, window_seconds: 60, hold_seconds: {args.hold}}}}}\n"
        "rules: [{name: all, channels: [bench]}]\n"
    )
    record = work / "received.jsonl"
    pythonpath = os.pathsep.join(str(src / p) for p in ("services/notifier/src", "libs/common/src"))
    env = {
        **os.environ,
        "PYTHONPATH": pythonpath,
        "TRAINWATCH_NATS_URL": nats_server.url,
        "TRAINWATCH_REDIS_URL": redis_server.url,
        "TRAINWATCH_RULES_FILE": str(rules),
        "TRAINWATCH_HTTP_PORT": str(health_port),
        "TRAINWATCH_LOG_LEVEL": "WARNING",
    }
    sink = subprocess.Popen(  # noqa: ASYNC220 - started before the measured part
        [sys.executable, "-m", "trainwatch_notifier.sink", "--port", str(sink_port), "--secret", SECRET,
         "--quiet", "--record", str(record)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    notifier = subprocess.Popen([sys.executable, "-m", "trainwatch_notifier"], env=env)  # noqa: ASYNC220
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        async with httpx.AsyncClient() as http:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if (await http.get(f"http://127.0.0.1:{health_port}/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline or notifier.poll() is not None:
                    raise SystemExit(f"{label}: notifier did not become ready")
                await asyncio.sleep(0.1)
        published: list[tuple[int, float]] = []  # (stream seq, time)
        floors: list[tuple[float, int, int]] = []  # (time, ack floor, backlog)
        publishing = True

        async def sample() -> None:
            while publishing or not floors or floors[-1][2] > 0:
                info = await js.consumer_info("JOBS", "notifier")
                backlog = int(info.num_pending or 0) + int(info.num_ack_pending or 0)
                floors.append((time.time(), info.ack_floor.stream_seq, backlog))
                await asyncio.sleep(0.25)

        sampler = asyncio.create_task(sample(), name="bench-burst sampler")
        started = time.perf_counter()
        count = int(args.rate * args.seconds)
        for index in range(count):
            await asyncio.sleep(max(0.0, started + index / args.rate - time.perf_counter()))
            name = f"job-b{index:06d}"
            # Each job's first event: the notifier's order holds nothing else back (an event of a
            # job first seen mid-life waits the redelivery grace while the order is young).
            ev = event(name, index)
            ev = ev.model_copy(update={"sequence": 0, "event_id": job_event_id("bench", ev.job.uid, 0)})
            subject = job_subject(cluster_id="bench", namespace="bench", kind_key="pytorchjob", name=name)
            at = time.time()
            ack = await js.publish(
                subject, wrap_job_event(ev).to_json(), headers={Header.MSG_ID: ev.event_id}
            )
            published.append((ack.seq, at))
        ended = time.time()
        publishing = False
        await asyncio.wait_for(sampler, timeout=args.seconds * 20 + 120)
    finally:
        await nc.close()
        for process in (notifier, sink):
            process.terminate()
            process.wait(10)
        nats_server.close()
        redis_server.close()
    told: list[float] = []
    cursor = 0
    for seq, at in published:
        while floors[cursor][1] < seq:
            cursor += 1
        told.append(floors[cursor][0] - at)
    drained = next(t for t, _, backlog in floors if t >= ended and backlog == 0)
    lines = record.read_bytes().splitlines() if record.exists() else []
    refused = sum(1 for line in lines if b'"code":11232' in line)
    return Result(
        label,
        statistics.median(told),
        percentile(told, 99),
        max(told),
        drained - ended,
        len(lines),
        refused,
        os.getloadavg()[0],
    )


def worktree_at(ref: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix="bench-burst-ref-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), ref], check=True,
                   capture_output=True)  # fmt: skip
    return path


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--hold", type=float, default=15.0, help="the digest's hold_seconds")
    parser.add_argument("--baseline-ref", help="also run the notifier of this git ref, for a ratio")
    args = parser.parse_args()
    runs = [("this checkout", ROOT)]
    baseline: Path | None = None
    if args.baseline_ref:
        baseline = worktree_at(args.baseline_ref)
        runs.insert(0, (f"baseline {args.baseline_ref}", baseline))
    results = []
    try:
        for label, src in runs:
            results.append(await burst(label, src, args))
    finally:
        if baseline is not None:
            remove = ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline)]
            subprocess.run(remove, check=False)  # noqa: ASYNC221 - after the measured part
    print(f"\nbench/notify/burst: {args.rate:.0f} Failed events/s for {args.seconds:.0f} s,", end="")
    print(f" digests held {args.hold:.0f} s")
    widths = (28, 9, 8, 8, 8, 6, 6, 5)
    head = ("notifier", "told p50", "p99", "max", "drained", "cards", "11232", "load")
    print(" ".join(f"{h:{'>' if i else '<'}{w}}" for i, (h, w) in enumerate(zip(head, widths, strict=True))))
    for r in results:
        print(
            f"{r.label:28} {r.told_p50:8.1f}s {r.told_p99:7.1f}s {r.told_max:7.1f}s"
            f" {r.drained_after_end:7.1f}s {r.cards:6d} {r.refused:6d} {r.load:5.1f}"
        )
    print(
        f"targets: each event told within 2 x hold = {2 * args.hold:.0f} s; backlog 0 within 30 s of the end"
    )


if __name__ == "__main__":
    asyncio.run(main())
