"""Benchmark: what reading the JOBS stream at informer start costs, against the relist it sits beside.

    uv run python bench/checkpoint_recovery/run.py [--jobs 5000] [--events-per-job 4] [--noise 10]

Every informer start now reads the last JOBS event of each of its jobs (``StreamHistory.last_events``,
one ephemeral LAST_PER_SUBJECT consumer) to set its checkpoint right. The stream holds
``--events-per-job`` events of each of ``--jobs`` PyTorchJobs of the measured cluster, plus the
same for ``--noise`` other clusters, so the filter has to skip most of the stream.

Baseline in the same run: a paged LIST of the same number of PyTorchJobs from a kubesim cluster
over TLS with the watcher's own client (what a relist costs; the start of an informer whose
checkpoint is lost does both). Reported: median wall time of ``--trials`` trials of each, and the
ratio. Absolute figures only beside the ratio: the machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from typing import Any

import nats

import kubesim
from trainwatch_common.events.envelope import job_event_json
from trainwatch_common.events.jobs import JobStatusEvent
from trainwatch_common.streams import ensure_streams
from trainwatch_common.subjects import job_subject
from trainwatch_common.testing import NatsServer
from trainwatch_watcher.history import StreamHistory
from trainwatch_watcher.kube.client import KubeClient, load_kubeconfig
from trainwatch_watcher.settings import WatchTimings


def event(cluster_id: str, uid: str, name: str, sequence: int) -> dict[str, Any]:
    return {
        "event_id": JobStatusEvent.expected_event_id(cluster_id, uid, sequence),
        "change": "created" if sequence == 0 else "transition",
        "sequence": sequence,
        "epoch": 1,
        "job": {
            "cluster_id": cluster_id,
            "api_version": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "kind_key": "pytorchjob",
            "namespace": "team-a",
            "name": name,
            "uid": uid,
            "resource_version": str(1000 + sequence),
        },
        "phase": "Running" if sequence else "Pending",
        "terminal": False,
        "reason": "PyTorchJobRunning",
        "restart_count": 0,
        "observed_at": datetime.now(UTC).isoformat(),
    }


async def fill_stream(nc: Any, clusters: list[str], jobs: int, events_per_job: int) -> int:
    js = nc.jetstream()
    published = 0
    for cluster_id in clusters:
        futures = []
        for j in range(jobs):
            name, uid = f"job-{j}", f"{cluster_id}-uid-{j}"
            subject = job_subject(cluster_id=cluster_id, namespace="team-a", kind_key="pytorchjob", name=name)
            for sequence in range(events_per_job):
                document = event(cluster_id, uid, name, sequence)
                futures.append(
                    await js.publish_async(
                        subject, job_event_json(document), headers={"Nats-Msg-Id": document["event_id"]}
                    )
                )
        await asyncio.gather(*futures)
        published += len(futures)
    return published


async def time_history(history: StreamHistory, jobs: int) -> float:
    started = time.perf_counter()
    heads = await history.last_events("measured", "pytorchjob", None)
    elapsed = time.perf_counter() - started
    assert len(heads) == jobs, f"read {len(heads)} heads, expected {jobs}"
    return elapsed


async def time_list(client: KubeClient, path: str, jobs: int, page_size: int) -> float:
    started = time.perf_counter()
    items, params = 0, {"limit": str(page_size)}
    while True:
        page = await client.get_json(path, params)
        items += len(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            break
        params = {"limit": str(page_size), "continue": token}
    elapsed = time.perf_counter() - started
    assert items == jobs, f"listed {items}, expected {jobs}"
    return elapsed


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as workdir:
        nats_server = NatsServer()
        nats_server.start()
        nc = await nats.connect(nats_server.url)
        try:
            await ensure_streams(nc.jetstream())
            clusters = ["measured"] + [f"noise-{i}" for i in range(args.noise)]
            stored = await fill_stream(nc, clusters, args.jobs, args.events_per_job)
            history = StreamHistory(nc)
            async with kubesim.Simulator(workdir) as sim:
                cluster = await sim.add_cluster("measured", kinds=[kubesim.kinds.PYTORCHJOB])
                for j in range(args.jobs):
                    cluster.store.create(
                        kubesim.kinds.PYTORCHJOB,
                        {"metadata": {"name": f"job-{j}", "namespace": "team-a"}, "spec": {}},
                    )
                timings = WatchTimings(allow_loopback_servers=True)  # kubesim listens on 127.0.0.1
                client = KubeClient(load_kubeconfig(cluster.kubeconfig_yaml()), timings=timings)
                path = "/apis/kubeflow.org/v1/pytorchjobs"
                try:
                    history_times, list_times = [], []
                    for _ in range(args.trials):  # interleaved: both see the same machine load
                        history_times.append(await time_history(history, args.jobs))
                        list_times.append(await time_list(client, path, args.jobs, timings.list_page_size))
                finally:
                    await client.close()
        finally:
            await nc.close()
            nats_server.stop()
    history_median, list_median = statistics.median(history_times), statistics.median(list_times)
    return {
        "jobs": args.jobs,
        "messages_in_stream": stored,
        "stream_read_median_s": round(history_median, 4),
        "relist_median_s": round(list_median, 4),
        "stream_read_over_relist": round(history_median / list_median, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--events-per-job", type=int, default=4)
    parser.add_argument("--noise", type=int, default=10, help="other clusters with as many events")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)


if __name__ == "__main__":
    main()
