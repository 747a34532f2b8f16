"""What the run observes: lease holders (Redis), cluster health (NATS), and at the end the three
surfaces it compares with the truth: the JOBS stream, the persister's SQL tables, the cards.

The live observers are only used to *wait on conditions* (every cluster owned and streaming,
the consumers caught up); the comparison reads each surface afresh once the run has settled.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

import asyncpg
from nats.aio.client import Client as NatsClient
from nats.js.api import ConsumerConfig, DeliverPolicy
from redis.asyncio import Redis
from redis.exceptions import RedisError

from chaos.compare import Seen, state_key
from trainwatch_common.events.clusters import ClusterHealth
from trainwatch_common.events.envelope import parse_cluster_health, parse_job_event
from trainwatch_common.leases import LeaseManager, replica_of
from trainwatch_notifier.sink import Received


class Leases:
    """Who holds each cluster's lease, read from Redis every 50 ms."""

    def __init__(self, redis_url: str, cluster_ids: list[str]) -> None:
        self.redis = Redis.from_url(redis_url, socket_timeout=0.5, socket_connect_timeout=0.5)
        self.cluster_ids = cluster_ids
        manager = LeaseManager(self.redis)
        self._keys = [manager.lease_key(c) for c in cluster_ids]
        self.current: dict[str, tuple[str, int] | None] = {}
        self.moves = 0  # a cluster's holder changed to another replica
        self._last_holder: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._poll(), name="chaos lease poll")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.redis.aclose()

    async def _poll(self) -> None:
        while True:
            try:
                values = await self.redis.mget(self._keys)
            except (RedisError, OSError):  # Redis restarting: nobody's ownership is known
                values = [None] * len(self._keys)
            for cluster_id, raw in zip(self.cluster_ids, values, strict=True):
                holder = None
                if raw is not None:
                    text = raw.decode() if isinstance(raw, bytes) else str(raw)
                    name, _, epoch = text.rpartition("|")
                    holder = (replica_of(name), int(epoch))  # the holder carries a secret nonce
                if holder is not None:
                    previous = self._last_holder.get(cluster_id)
                    if previous is not None and previous != holder[0]:
                        self.moves += 1  # to another replica, with or without a lapse between
                    self._last_holder[cluster_id] = holder[0]
                self.current[cluster_id] = holder
            await asyncio.sleep(0.05)

    def owner(self, cluster_id: str) -> str | None:
        holder = self.current.get(cluster_id)
        return holder[0] if holder else None

    def epoch(self, cluster_id: str) -> int:
        holder = self.current.get(cluster_id)
        return holder[1] if holder else 0

    def owned_by(self, replica: str) -> list[str]:
        return [c for c in self.cluster_ids if self.owner(c) == replica]


class Health:
    """The last health report per (cluster, owner, epoch), with when it arrived."""

    def __init__(self, nc: NatsClient) -> None:
        self.nc = nc
        self.last: dict[tuple[str, str, int], tuple[float, ClusterHealth]] = {}
        self._sub: Any = None

    async def start(self) -> None:
        async def on_message(msg: Any) -> None:
            with contextlib.suppress(ValueError):
                report = parse_cluster_health(msg.data)
                self.last[(report.cluster_id, report.owner or "", report.epoch)] = (time.monotonic(), report)

        self._sub = await self.nc.subscribe("clusters.v1.health.*", cb=on_message)

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await self._sub.unsubscribe()

    def streaming(self, cluster_id: str, owner: str, epoch: int, *, since: float = 0.0) -> bool:
        """The owner reported, after ``since``, every served kind's informer listed and watching."""
        found = self.last.get((cluster_id, owner, epoch))
        if found is None or found[0] < since:
            return False
        report = found[1]
        served = len(report.kinds_served)
        return (
            report.reachable
            and served > 0
            and report.informers_running >= served
            and report.watch_lag_seconds is not None
        )


@dataclass(frozen=True, slots=True)
class StoredEvent:
    seq: int
    msg_id: str
    uid: str
    seen: Seen


async def read_stream(nc: NatsClient, *, timeout: float = 60.0) -> list[StoredEvent]:
    """Every message on JOBS, in stream order, through a fresh ordered consumer."""
    js = nc.jetstream()
    info = await js.stream_info("JOBS")
    last = info.state.last_seq
    got: list[StoredEvent] = []
    if info.state.messages == 0:
        return got
    done = asyncio.Event()

    async def on_message(msg: Any) -> None:
        seq = msg.metadata.sequence.stream
        event = parse_job_event(msg.data)
        seen = Seen(
            event.change, event.phase.value, event.sub_phase.value if event.sub_phase else None,
            event.terminal, ident=(msg.headers or {}).get("Nats-Msg-Id", event.event_id),
            detail=f"seq={event.sequence} epoch={event.epoch} by={event.watcher_id}",
            sequence=event.sequence,
            diagnosis=event.diagnosis.category.value if event.diagnosis else None,
            source=event.source,
        )  # fmt: skip
        got.append(StoredEvent(seq, seen.ident or "", event.job.uid, seen))
        if seq >= last:
            done.set()

    config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    sub = await js.subscribe("jobs.v1.>", stream="JOBS", ordered_consumer=True, cb=on_message, config=config)
    try:
        await asyncio.wait_for(done.wait(), timeout)
    finally:
        await sub.unsubscribe()
    return sorted(got, key=lambda e: e.seq)


def stream_by_uid(events: list[StoredEvent]) -> dict[str, list[Seen]]:
    out: dict[str, list[Seen]] = {}
    for e in events:
        out.setdefault(e.uid, []).append(e.seen)
    return out


@dataclass(frozen=True, slots=True)
class StoredSql:
    history: dict[str, list[Seen]]  # per uid, by sequence, then observation
    finals: dict[str, tuple[Any, ...]]  # the jobs rows' states
    diagnoses: dict[str, str | None]  # the jobs rows' diagnosis categories


async def read_sql(database_url: str) -> StoredSql:
    """The persister's history per uid and its ``jobs`` rows."""
    connection = await asyncpg.connect(database_url, timeout=10)
    try:
        transitions = await connection.fetch(
            "SELECT uid, event_id, sequence, epoch, change, phase, sub_phase, terminal, observed_at, "
            "diagnosis_category FROM job_transitions ORDER BY cluster_id, uid, sequence, observed_at"
        )
        jobs = await connection.fetch(
            "SELECT uid, phase, sub_phase, terminal, deleted_at IS NOT NULL AS deleted, "
            "diagnosis_category FROM jobs"
        )
    finally:
        await connection.close()
    history: dict[str, list[Seen]] = {}
    for row in transitions:
        history.setdefault(row["uid"], []).append(
            Seen(
                row["change"],
                row["phase"],
                row["sub_phase"],
                bool(row["terminal"]),
                ident=row["event_id"],
                detail=f"seq={row['sequence']} epoch={row['epoch']}",
                sequence=row["sequence"],
                diagnosis=row["diagnosis_category"],
            )
        )
    finals = {
        row["uid"]: state_key(
            "deleted" if row["deleted"] else "transition",
            row["phase"],
            row["sub_phase"],
            bool(row["terminal"]),
        )
        for row in jobs
    }
    return StoredSql(history, finals, {row["uid"]: row["diagnosis_category"] for row in jobs})


async def sql_counts(database_url: str) -> tuple[int, int]:
    """(transition rows, job rows), for telling when the persister has stopped writing."""
    connection = await asyncpg.connect(database_url, timeout=5)
    try:
        transitions = await connection.fetchval("SELECT count(*) FROM job_transitions")
        jobs = await connection.fetchval("SELECT count(*) FROM jobs")
    finally:
        await connection.close()
    return int(transitions), int(jobs)


def parse_card(received: Received) -> tuple[str, Seen] | None:
    """(uid, what the card says) from a job card: the uid from the dashboard link
    ``.../jobs/<cluster>/<uid>``, the phase from the title's end ("... Succeeded", or
    "... Succeeded (finishing)", "... Failed (aborting)" for an outcome not terminal yet)."""
    card = received.body.get("card") or {}
    title = str(card.get("header", {}).get("title", {}).get("content", ""))
    link = ""
    for element in card.get("body", {}).get("elements", []):
        for behavior in element.get("behaviors", []):
            link = str(behavior.get("default_url", link))
    if "/jobs/" not in link:
        return None  # a digest (links to the dashboard) or something else
    uid = link.rstrip("/").rsplit("/", 1)[-1]
    # The phase may be followed by where in it the job is: "Failed (aborting)", "Pending (queued)";
    # a Succeeded or Failed with one is not terminal yet.
    head, _, sub_phase = title.rpartition(" (") if title.endswith(")") else (title, "", "")
    words = head.split()
    if not words:
        return None
    phase = words[-1]
    terminal = phase in ("Succeeded", "Failed") and not sub_phase
    return uid, Seen(
        "transition", phase, None, terminal,
        ident=received.idempotency_key, detail=title, resend=received.resend,
    )  # fmt: skip


def cards_by_uid(received: list[Received]) -> tuple[dict[str, list[Seen]], int]:
    """Cards per uid in the order the sink accepted them, and how many were not job cards."""
    out: dict[str, list[Seen]] = {}
    other = 0
    for item in received:
        parsed = parse_card(item)
        if parsed is None:
            other += 1
            continue
        out.setdefault(parsed[0], []).append(parsed[1])
    return out, other


async def consumer_backlog(nc: NatsClient, durable: str) -> int | None:
    """Messages the durable consumer has not yet had acknowledged (pending + unacked)."""
    try:
        info = await nc.jetstream().consumer_info("JOBS", durable, timeout=2)
    except Exception:  # not created yet, or NATS away: unknown
        return None
    return int(info.num_pending or 0) + int(info.num_ack_pending or 0)


async def deadletters(nc: NatsClient) -> dict[str, int]:
    """Dead letters per subject (deadletter.v1.<service>.<reason>)."""
    js = nc.jetstream()
    try:
        info = await js.stream_info("DEADLETTER", subjects_filter="deadletter.v1.>")
    except Exception:
        return {}
    return dict(info.state.subjects or {})
