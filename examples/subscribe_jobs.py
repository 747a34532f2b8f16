"""Subscribe to Trainwatch job-status events: a short consumer other teams can copy.

    uv run python examples/subscribe_jobs.py --nats nats://127.0.0.1:4222 --cluster gpu-a --namespace team-a

It creates (or resumes) a durable pull consumer filtered to one cluster and namespace, reads
each CloudEvent as a typed ``JobStatusEvent``, and acks it after handling. Because the consumer
is durable, a restart resumes where it left off; because event ids are deterministic, a handler
that must be idempotent can de-duplicate on ``event.event_id``.

The durable's name comes from the team and the filter (``example-team-gpu-a-team-a``): a rerun
with another --cluster gets its own consumer instead of resuming one that filters for the old
cluster. An explicit --durable that exists with another filter is refused.
Without the trainwatch packages, any CloudEvents SDK reads the same JSON (docs/schemas/).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import sys
from collections.abc import Awaitable, Callable

import nats
from nats.errors import Error as NatsError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from trainwatch_common import JobStatusEvent, job_filter, parse_job_event

Handler = Callable[[JobStatusEvent], Awaitable[None]]
STREAM = "JOBS"
FIRST_CONNECT_SECONDS = 10.0


class ConsumerProblem(Exception):
    """Why the example cannot consume: no server, no JOBS stream, a durable with another filter."""


def durable_name(team: str, *, cluster_id: str | None, namespace: str | None) -> str:
    """One durable per team and filter; JetStream names may not contain '.', '*', '>' or spaces."""

    def part(value: str | None) -> str:
        return re.sub(r"[^A-Za-z0-9_-]", "_", value) if value else "all"

    return f"{part(team)}-{part(cluster_id)}-{part(namespace)}"


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

    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        # nats-py's default prints a traceback per attempt; one line each (and the last one in
        # the ConsumerProblem below when the first connect never succeeds) says the same.
        errors.append(exc)
        if connected.is_set():
            print(f"nats: {exc!r}", file=sys.stderr)

    connected = asyncio.Event()
    try:
        # nats-py retries the first connect for minutes; a wrong URL should fail in seconds.
        # After it, the default reconnects ride out a NATS restart.
        async with asyncio.timeout(FIRST_CONNECT_SECONDS):
            client = await nats.connect(nats_url, error_cb=on_error, reconnect_time_wait=1)
    except (NatsError, OSError, TimeoutError) as exc:
        last = errors[-1] if errors else exc
        raise ConsumerProblem(f"cannot connect to NATS at {nats_url}: {last!r}") from None
    connected.set()
    try:
        js = client.jetstream()
        subject = job_filter(cluster_id=cluster_id, namespace=namespace)
        try:
            await js.stream_info(STREAM)
        except NotFoundError:
            raise ConsumerProblem(f"no {STREAM} stream at {nats_url}: is this Trainwatch's NATS?") from None
        try:
            existing = (await js.consumer_info(STREAM, durable)).config.filter_subject
        except NotFoundError:
            existing = None
        if existing is not None and existing != subject:
            # nats-py would bind to it and deliver what it filters, not what was asked for.
            raise ConsumerProblem(
                f"the durable consumer {durable!r} filters {existing}, not {subject}: pass another "
                f"--durable (or remove it: nats consumer rm {STREAM} {durable})"
            )
        config = ConsumerConfig(
            durable_name=durable,
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.EXPLICIT,
            filter_subject=subject,
        )
        subscription = await js.pull_subscribe(subject, durable=durable, stream=STREAM, config=config)
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
    phase = f"{event.phase}/{event.sub_phase}" if event.sub_phase else str(event.phase)
    where = f"{job.cluster_id}/{job.namespace} {job.kind} {job.name}"
    # change: created, transition, diagnosis (same phase, a new diagnosis), deleted, ...
    print(f"{where}: {event.change} {phase}{terminal} {event.reason or ''}".rstrip())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--nats",
        default=os.environ.get("TRAINWATCH_NATS_URL", "nats://127.0.0.1:4222"),
        help="Default: $TRAINWATCH_NATS_URL (make run writes it to .run/tokens.env), else nats://127.0.0.1:4222",
    )
    parser.add_argument("--team", default="example-team", help="The durable's prefix")
    parser.add_argument("--durable", help="Default: TEAM-CLUSTER-NAMESPACE ('all' for what is not given)")
    parser.add_argument("--cluster")
    parser.add_argument("--namespace")
    args = parser.parse_args()
    durable = args.durable or durable_name(args.team, cluster_id=args.cluster, namespace=args.namespace)
    print(f"consuming as durable {durable!r}", file=sys.stderr)
    stop = asyncio.Event()
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(
                consume(
                    nats_url=args.nats,
                    durable=durable,
                    handle=print_event,
                    stop=stop,
                    cluster_id=args.cluster,
                    namespace=args.namespace,
                )
            )
    except ConsumerProblem as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
