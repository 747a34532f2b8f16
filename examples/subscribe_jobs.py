"""Subscribe to Trainwatch job-status events: a short consumer other teams can copy.

    uv run python examples/subscribe_jobs.py --nats nats://127.0.0.1:4222 --cluster gpu-a --namespace team-a

It creates (or resumes) a durable pull consumer filtered to one cluster and namespace, reads
each CloudEvent as a typed ``JobStatusEvent``, and acks it after handling. Because the consumer
is durable, a restart resumes where it left off; because event ids are deterministic, a handler
that must be idempotent can de-duplicate on ``event.event_id``.
Without the trainwatch packages, any CloudEvents SDK reads the same JSON (docs/schemas/).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from trainwatch_common import JobStatusEvent, job_filter, parse_job_event

Handler = Callable[[JobStatusEvent], Awaitable[None]]


async def consume(
    *,
    nats_url: str,
    durable: str,
    handle: Handler,
    stop: asyncio.Event,
    cluster_id: str | None = None,
    namespace: str | None = None,
) -> None:
    """Hand every job event of the cluster/namespace to ``handle`` until ``stop`` is set."""
    client = await nats.connect(nats_url)
    try:
        js = client.jetstream()
        subject = job_filter(cluster_id=cluster_id, namespace=namespace)
        config = ConsumerConfig(
            durable_name=durable,
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.EXPLICIT,
            filter_subject=subject,
        )
        subscription = await js.pull_subscribe(subject, durable=durable, stream="JOBS", config=config)
        while not stop.is_set():
            try:
                messages = await subscription.fetch(batch=100, timeout=1)
            except TimeoutError:  # nats-py raises asyncio.TimeoutError or its own subclass
                continue
            for message in messages:
                await handle(parse_job_event(message.data))
                await message.ack()
    finally:
        await client.close()  # flushes the acks already written


async def print_event(event: JobStatusEvent) -> None:
    job = event.job
    terminal = " (final)" if event.terminal else ""
    where = f"{job.cluster_id}/{job.namespace} {job.kind} {job.name}"
    print(f"{where}: {event.phase}{terminal} {event.reason or ''}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nats", default="nats://127.0.0.1:4222")
    parser.add_argument("--durable", default="example-team")
    parser.add_argument("--cluster")
    parser.add_argument("--namespace")
    args = parser.parse_args()
    stop = asyncio.Event()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            consume(
                nats_url=args.nats,
                durable=args.durable,
                handle=print_event,
                stop=stop,
                cluster_id=args.cluster,
                namespace=args.namespace,
            )
        )


if __name__ == "__main__":
    main()
