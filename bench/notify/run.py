"""Notifier benchmark: notifications/s to the local Feishu sink, and publish→sink latency.

    uv run python bench/notify/run.py [--events 2000] [--rate 100] [--seconds 10]

Everything runs on loopback as separate processes: nats-server, redis-server, the Feishu sink
(`python -m trainwatch_notifier.sink --no-rate-limit`, signature checked) and the notifier
(`python -m trainwatch_notifier`, rate limits and digests off). Baselines from the same run:
signed card POSTs sent straight to the sink with httpx, one at a time (what the notifier's
per-channel worker does, minus NATS, routing and the Redis idempotency keys). CPU time per
notification (notifier process, from /proc) is reported beside the rates: on a shared 2-core
machine it is steadier than wall-clock figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import nats
import orjson
from nats.js import JetStreamContext
from nats.js.api import Header

from trainwatch_common import JobRef, JobStatusEvent, Phase, job_event_id, job_subject, wrap_job_event
from trainwatch_common.testing import NatsServer, RedisServer, free_port
from trainwatch_notifier.channels.feishu import FeishuChannel
from trainwatch_notifier.render.facts import JobFacts, job_link
from trainwatch_notifier.ruleset import ChannelConfig

SECRET = "bench-secret"
TITLE = re.compile(r"bench/(job-\S+) Failed")


def event(name: str, index: int) -> JobStatusEvent:
    return JobStatusEvent(
        event_id=job_event_id("bench", f"uid-{name}", 1),
        change="transition",
        sequence=1,
        epoch=0,
        job=JobRef(
            cluster_id="bench", api_version="kubeflow.org/v1", kind="PyTorchJob", kind_key="pytorchjob",
            namespace="bench", name=name, uid=f"uid-{name}", resource_version=str(index),
        ),
        phase=Phase.FAILED,
        terminal=True,
        reason="BackoffLimitExceeded",
        message="Job has failed because it has reached the specified backoff limit",
        observed_at=time.time(),  # type: ignore[arg-type]
    )  # fmt: skip


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def receipts(record: Path) -> dict[str, float]:
    """job name → time the sink received its card."""
    found: dict[str, float] = {}
    if not record.exists():
        return found
    for line in record.read_bytes().splitlines():
        entry = orjson.loads(line)
        match = TITLE.search(entry["body"]["card"]["header"]["title"]["content"])
        if match:
            found.setdefault(match.group(1), entry["received_at"])
    return found


async def wait_for(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.25)  # re-reading the record file is not free: poll gently


async def publish(js: JetStreamContext, name: str, index: int) -> None:
    ev = event(name, index)
    subject = job_subject(cluster_id="bench", namespace="bench", kind_key="pytorchjob", name=name)
    await js.publish(subject, wrap_job_event(ev).to_json(), headers={Header.MSG_ID: ev.event_id})


async def baseline_posts(sink_url: str, count: int, rate: float | None) -> tuple[float, list[float]]:
    """Signed cards POSTed straight to the sink: (posts/s, per-post latencies)."""
    async with httpx.AsyncClient() as client:
        config = ChannelConfig(type="feishu", url=sink_url, secret=SECRET)  # type: ignore[arg-type]
        channel = FeishuChannel("baseline", config, client)
        latencies: list[float] = []
        started = time.perf_counter()
        for index in range(count):
            if rate:
                await asyncio.sleep(max(0.0, started + index / rate - time.perf_counter()))
            ev = event(f"baseline-{index}", index)
            body = channel.render(JobFacts(ev, "bench", job_link("http://dash", ev), "en", None))
            t0 = time.perf_counter()
            await channel.post(body)
            latencies.append(time.perf_counter() - t0)
        return count / (time.perf_counter() - started), latencies


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=2000, help="events for the throughput run")
    parser.add_argument("--rate", type=float, default=100.0, help="events/s for the latency run")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the latency run")
    parser.add_argument("--concurrency", type=int, default=1, help="the channel's parallel senders")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-notify-"))
    nats_server, redis_server = NatsServer(workdir=work / "nats"), RedisServer(workdir=work / "redis")
    for server in (nats_server, redis_server):
        server.workdir.mkdir()
        server.start()
    sink_port, health_port = free_port(), free_port()
    record = work / "received.jsonl"
    sink_url = f"http://127.0.0.1:{sink_port}/open-apis/bot/v2/hook/bench"
    rules = work / "rules.yaml"
    rules.write_text(
        f"channels:\n  bench: {{type: feishu, url: '{sink_url}', secret: {SECRET}, rate_limits: [],"
        f" digest: {{enabled: false}}, concurrency: {args.concurrency}}}\n"
        "rules: [{name: all, channels: [bench]}]\n"
    )
    env = {
        **os.environ,
        "TRAINWATCH_NATS_URL": nats_server.url,
        "TRAINWATCH_REDIS_URL": redis_server.url,
        "TRAINWATCH_RULES_FILE": str(rules),
        "TRAINWATCH_HTTP_PORT": str(health_port),
        "TRAINWATCH_LOG_LEVEL": "WARNING",
        "TRAINWATCH_NOTIFIER_DATABASE_URL": f"sqlite+aiosqlite:///{work / 'notifier.db'}",  # silences
    }
    sink = subprocess.Popen(  # noqa: ASYNC220 - started once, before the measured part
        [sys.executable, "-m", "trainwatch_notifier.sink", "--port", str(sink_port), "--secret", SECRET,
         "--no-rate-limit", "--quiet", "--record", str(record)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    notifier = subprocess.Popen([sys.executable, "-m", "trainwatch_notifier"], env=env)  # noqa: ASYNC220
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        async with httpx.AsyncClient() as http:

            async def ready() -> bool:
                try:
                    return (await http.get(f"http://127.0.0.1:{health_port}/readyz")).status_code == 200
                except httpx.TransportError:
                    return False

            deadline = time.monotonic() + 30
            while not await ready():
                if time.monotonic() > deadline or notifier.poll() is not None:
                    raise SystemExit("notifier did not become ready")
                await asyncio.sleep(0.1)

        # -- baselines: straight POSTs --------------------------------------------------------
        cpu_before = time.process_time()
        base_rate, _ = await baseline_posts(sink_url, args.events, None)
        base_cpu = (time.process_time() - cpu_before) / args.events
        base_count = int(args.rate * args.seconds)
        _, base_latencies = await baseline_posts(sink_url, base_count, args.rate)

        # -- throughput: a backlog of N events ------------------------------------------------
        names = [f"job-t{i:05d}" for i in range(args.events)]
        # A real backlog: the notifier is paused while the events are published, then resumed.
        os.kill(notifier.pid, signal.SIGSTOP)
        try:
            for index, name in enumerate(names):
                await publish(js, name, index)
        finally:
            notifier_cpu_before = cpu_seconds(notifier.pid)
            t0 = time.time()
            os.kill(notifier.pid, signal.SIGCONT)
        await wait_for(lambda: len(set(names) & receipts(record).keys()) == len(names), 120, "throughput run")
        got = receipts(record)
        throughput = len(names) / (max(got[n] for n in names) - t0)
        notifier_cpu = (cpu_seconds(notifier.pid) - notifier_cpu_before) / len(names)

        # -- latency at a steady rate ---------------------------------------------------------
        published: dict[str, float] = {}
        started = time.perf_counter()
        for index in range(int(args.rate * args.seconds)):
            await asyncio.sleep(max(0.0, started + index / args.rate - time.perf_counter()))
            name = f"job-l{index:05d}"
            published[name] = time.time()
            await publish(js, name, index)
        await wait_for(lambda: published.keys() <= receipts(record).keys(), 60, "latency run")
        got = receipts(record)
        latencies = [got[name] - at for name, at in published.items()]
    finally:
        await nc.close()
        for process in (notifier, sink):
            process.terminate()
            process.wait(10)
        nats_server.close()
        redis_server.close()

    ms = 1000.0
    print(
        "\nbench/notify: notifier → local Feishu sink (signed cards, rate limits and digests off,"
        f" channel concurrency {args.concurrency})"
    )
    print(f"  throughput, backlog of {args.events} events:     {throughput:8.0f} notifications/s")
    print(f"  baseline, direct signed POSTs (1 at a time):  {base_rate:8.0f} posts/s")
    print(f"  ratio notifier / baseline:                    {throughput / base_rate:8.2f}")
    print(f"  CPU per notification, notifier process:       {notifier_cpu * 1e6:8.0f} µs")
    print(f"  CPU per post, baseline client (httpx+sign):   {base_cpu * 1e6:8.0f} µs")
    print(f"  ratio CPU notifier / baseline:                {notifier_cpu / base_cpu:8.2f}")
    print(f"  (load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    runs = f"{args.rate:.0f} events/s for {args.seconds:.0f} s ({len(latencies)} events)"
    print(f"  latency at {runs}, publish → sink:")
    print(
        f"    p50 {statistics.median(latencies) * ms:6.1f} ms   p99 {percentile(latencies, 99) * ms:6.1f} ms"
        f"   max {max(latencies) * ms:6.1f} ms"
    )
    print(
        f"  baseline, direct POST at {args.rate:.0f}/s: p50 {statistics.median(base_latencies) * ms:6.1f} ms"
        f"   p99 {percentile(base_latencies, 99) * ms:6.1f} ms"
    )
    p99_ratio = percentile(latencies, 99) / percentile(base_latencies, 99)
    print(f"  ratio p99 notifier / direct POST:             {p99_ratio:8.1f}")


if __name__ == "__main__":
    asyncio.run(main())
