"""Test harness of the watcher: kubesim clusters, a real NATS and Redis, a stand-in registry.

``FakeRegistry`` does exactly what the registry does on the bus (KV snapshot + ``clusters.v1``
events) and keeps kubeconfigs in a ``StaticConnections`` source; ``JobEvents`` reads the JOBS
stream from the start, so a test sees every event JetStream stored (duplicates already dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.js.api import DeliverPolicy

import kubesim
from trainwatch_common.events.clusters import ClusterEvent, ClusterHealth, ClusterSpec, WatchOptions
from trainwatch_common.events.envelope import parse_cluster_health, parse_job_event, wrap_cluster_event
from trainwatch_common.events.ids import cluster_event_id
from trainwatch_common.events.jobs import JobStatusEvent
from trainwatch_common.streams import ensure_clusters_bucket
from trainwatch_common.subjects import cluster_subject
from trainwatch_watcher.app import WatcherApp
from trainwatch_watcher.cluster_feed import NatsClusterFeed
from trainwatch_watcher.connections import StaticConnections
from trainwatch_watcher.history import StreamHistory
from trainwatch_watcher.settings import WatcherSettings


class FakeRegistry:
    def __init__(self, nc: NatsClient) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.connections = StaticConnections()
        self.specs: dict[str, ClusterSpec] = {}
        self.revision = 0

    async def _announce(self, kind: str, spec: ClusterSpec, connection_changed: bool) -> None:
        kv = await ensure_clusters_bucket(self.js)
        if kind == "removed":
            await kv.delete(spec.id)
        else:
            await kv.put(spec.id, spec.model_dump_json().encode())
        event = ClusterEvent(
            type=kind,  # type: ignore[arg-type]
            cluster=spec,
            connection_changed=connection_changed,
            occurred_at=datetime.now(UTC),
        )
        payload = wrap_cluster_event(event, event_id=cluster_event_id(spec.id, spec.revision)).to_json()
        await self.js.publish(cluster_subject(kind, spec.id), payload)  # type: ignore[arg-type]

    async def add(
        self,
        cluster: kubesim.Cluster,
        *,
        watch: WatchOptions | None = None,
        cluster_id: str | None = None,
        token: str | None = None,
    ) -> ClusterSpec:
        cluster_id = cluster_id or cluster.name
        fp = self.connections.set(cluster_id, cluster.kubeconfig_yaml(token=token))
        self.revision += 1
        spec = ClusterSpec(
            id=cluster_id,
            name=cluster_id,
            watch=watch or WatchOptions(),
            revision=self.revision,
            connection_fingerprint=fp,
        )
        self.specs[cluster_id] = spec
        await self._announce("added", spec, True)
        return spec

    async def update(
        self,
        cluster_id: str,
        *,
        kubeconfig: str | None = None,
        watch: WatchOptions | None = None,
        description: str | None = None,
    ) -> ClusterSpec:
        old = self.specs[cluster_id]
        fp = old.connection_fingerprint
        if kubeconfig is not None:
            fp = self.connections.set(cluster_id, kubeconfig)
        self.revision += 1
        spec = old.model_copy(
            update={
                "revision": self.revision,
                "connection_fingerprint": fp,
                "watch": watch if watch is not None else old.watch,
                "description": description if description is not None else old.description,
            }
        )
        self.specs[cluster_id] = spec
        await self._announce("updated", spec, fp != old.connection_fingerprint)
        return spec

    async def remove(self, cluster_id: str) -> None:
        old = self.specs.pop(cluster_id)
        self.revision += 1
        spec = old.model_copy(update={"revision": self.revision})
        await self._announce("removed", spec, False)


class JobEvents:
    """Every job event stored in JOBS, in stream order."""

    def __init__(self, nc: NatsClient) -> None:
        self.nc = nc
        self.events: list[JobStatusEvent] = []
        self._sub: Any = None

    async def start(self) -> None:
        async def on_message(msg: Any) -> None:
            self.events.append(parse_job_event(msg.data))

        self._sub = await self.nc.jetstream().subscribe(
            "jobs.v1.>", stream="JOBS", ordered_consumer=True, deliver_policy=DeliverPolicy.ALL, cb=on_message
        )

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()

    def of_cluster(self, cluster_id: str) -> list[JobStatusEvent]:
        return [e for e in self.events if e.job.cluster_id == cluster_id]

    def by_uid(self, cluster_id: str | None = None) -> dict[str, list[tuple[str, str, str | None, bool]]]:
        out: dict[str, list[tuple[str, str, str | None, bool]]] = {}
        for e in self.events:
            if cluster_id is None or e.job.cluster_id == cluster_id:
                out.setdefault(e.job.uid, []).append(
                    (e.change, e.phase.value, e.sub_phase.value if e.sub_phase else None, e.terminal)
                )
        return out


def truth_by_uid(
    truth: list[kubesim.TruthEntry], cluster: str | None = None
) -> dict[str, list[tuple[str, str, str | None, bool]]]:
    out: dict[str, list[tuple[str, str, str | None, bool]]] = {}
    for t in truth:
        if cluster is None or t.cluster == cluster:
            out.setdefault(t.uid, []).append((t.change, t.phase, t.sub_phase, t.terminal))
    return out


class HealthEvents:
    def __init__(self, nc: NatsClient) -> None:
        self.nc = nc
        self.reports: list[ClusterHealth] = []
        self._sub: Any = None

    async def start(self) -> None:
        async def on_message(msg: Any) -> None:
            self.reports.append(parse_cluster_health(msg.data))

        self._sub = await self.nc.subscribe("clusters.v1.health.*", cb=on_message)

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()

    def last(self, cluster_id: str) -> ClusterHealth | None:
        for report in reversed(self.reports):
            if report.cluster_id == cluster_id:
                return report
        return None


def make_settings(nats_url: str, redis_url: str, **overrides: Any) -> WatcherSettings:
    values: dict[str, Any] = {
        "nats_url": nats_url,
        "redis_url": redis_url,
        "http_port": 0,
        "instance_id": "watcher-test",
        "read_timeout": 30.0,
        "watch_timeout_seconds": 60,
        "backoff_initial": 0.05,
        "backoff_max": 0.5,
        "backoff_reset_after": 2.0,
        "rediscovery_interval": 30.0,
        "health_interval": 0.5,
        "publish_ack_timeout": 1.0,
        "safety_resync_interval": 30.0,
        "allow_loopback_servers": True,  # kubesim listens on 127.0.0.1
    }
    values.update(overrides)
    return WatcherSettings(**values)


class RunningWatcher:
    """A WatcherApp running as a named task, stoppable and restartable."""

    def __init__(self, settings: WatcherSettings, registry: FakeRegistry) -> None:
        self.settings = settings
        self.registry = registry
        self.app: WatcherApp | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    async def start(self, history_factory: Callable[[NatsClient], StreamHistory] | None = None) -> WatcherApp:
        self._stop = asyncio.Event()
        self.app = WatcherApp(
            self.settings,
            connections=self.registry.connections,
            feed_factory=lambda nc: NatsClusterFeed(nc, resync_interval=self.settings.safety_resync_interval),
            history_factory=history_factory or StreamHistory,
        )
        self._task = asyncio.create_task(self.app.run(self._stop), name="watcher app")
        waiter = asyncio.ensure_future(self.app.ready.wait())
        done, _ = await asyncio.wait({waiter, self._task}, timeout=15, return_when=asyncio.FIRST_COMPLETED)
        if self._task in done:
            waiter.cancel()
            await self._task  # raises what stopped it
        if waiter not in done:
            waiter.cancel()
            raise AssertionError("watcher not ready within 15 s")
        return self.app

    async def stop(self) -> None:
        if self._task is None:
            return
        self._stop.set()
        try:
            await asyncio.wait_for(self._task, 15)
        finally:
            self._task = None

    async def kill(self) -> None:
        """Abrupt: cancel everything without a graceful stop."""
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    async def wait_synced(
        self, cluster_id: str, *, informers: int | None = None, timeout: float = 20.0
    ) -> None:
        """Until the cluster's informers (``informers`` of them, if given) have all listed.

        On a timeout the message says where it stopped: no lease (and why), or which informer."""
        from trainwatch_common.testing import eventually

        def synced() -> bool:
            assert self.app is not None and self.app.supervisor is not None  # noqa: PT018
            worker = self.app.supervisor.workers.get(cluster_id)
            if worker is None or not worker.informers:
                return False
            if informers is not None and len(worker.informers) != informers:
                return False
            return all(i.status.synced for i in worker.informers.values())

        try:
            await eventually(synced, timeout=timeout, message=f"informers of {cluster_id} synced")
        except AssertionError as exc:
            assert self.app is not None and self.app.supervisor is not None  # noqa: PT018
            worker = self.app.supervisor.workers.get(cluster_id)
            state = (
                f"no worker; {self._claims_state()}"
                if worker is None
                else (
                    f"reachable={worker.reachable} error={worker.last_error} informers="
                    + ", ".join(
                        f"{k}: synced={i.status.synced} error={i.status.last_error}"
                        for k, i in worker.informers.items()
                    )
                )
            )
            raise AssertionError(f"{exc}: {state}") from None

    def _claims_state(self) -> str:
        assert self.app is not None
        claims = self.app.claims
        if claims is None:
            return "no claim loop"
        released = {
            sample.labels["reason"]: sample.value
            for metric in claims.metrics.clusters_released.collect()
            for sample in metric.samples
            if sample.name.endswith("_total") and sample.value
        }
        return (
            f"owned={claims.owned()} desired={sorted(claims._desired or [])} "
            f"replicas={sorted(claims.replicas)} redis_ok={claims.redis_ok} released={released}"
        )

    @property
    def worker(self) -> Callable[[str], Any]:
        assert self.app is not None and self.app.supervisor is not None  # noqa: PT018
        return self.app.supervisor.workers.__getitem__


async def wait_for_truth(
    job_events: JobEvents,
    expected: dict[str, list[tuple[str, str, str | None, bool]]],
    *,
    cluster_id: str | None = None,
    timeout: float = 10.0,
) -> None:
    """Wait until the published events equal ``expected`` per uid; fail with the difference."""
    from trainwatch_common.testing import eventually

    try:
        await eventually(lambda: job_events.by_uid(cluster_id) == expected, timeout=timeout)
    except AssertionError:
        got = job_events.by_uid(cluster_id)
        lines = []
        for uid in sorted(set(got) | set(expected)):
            if got.get(uid) != expected.get(uid):
                lines.append(f"uid {uid}:\n  expected {expected.get(uid)}\n  got      {got.get(uid)}")
        raise AssertionError("published events differ from the ground truth:\n" + "\n".join(lines)) from None


def assert_consistent_with_truth(
    job_events: JobEvents, truth: list[kubesim.TruthEntry], cluster_id: str
) -> None:
    """What must hold even when a relist collapsed changes made while the watch was away:
    per uid, contiguous sequences from 0, emitted states a subsequence of the true ones, the
    same final state, and a deleted event exactly when the job is gone."""
    expected = truth_by_uid(truth, cluster_id)
    per_uid: dict[str, list[JobStatusEvent]] = {}
    for event in job_events.of_cluster(cluster_id):
        per_uid.setdefault(event.job.uid, []).append(event)
    assert set(per_uid) <= set(expected), "events for jobs the scenario never created"
    for uid, entries in expected.items():
        events = per_uid.get(uid, [])
        if not events:
            assert entries[-1][0] == "deleted", f"{uid}: nothing published for a job that exists"
            continue
        assert [e.sequence for e in events] == list(range(len(events))), f"{uid}: sequence gap or repeat"
        assert events[0].change == "created"
        assert (events[-1].change == "deleted") == (entries[-1][0] == "deleted"), f"{uid}: deletion mismatch"
        # A deletion carries the last state emitted before it, whatever the job went through unseen.
        true_states = [(p, s, t) for change, p, s, t in entries if change != "deleted"]
        live = [e for e in events if e.change != "deleted"]
        got_states = [(e.phase.value, e.sub_phase.value if e.sub_phase else None, e.terminal) for e in live]
        it = iter(true_states)
        assert all(state in it for state in got_states), f"{uid}: {got_states} not within {true_states}"
        if events[-1].change != "deleted":
            assert got_states[-1] == true_states[-1], f"{uid}: final {got_states[-1]} != {true_states[-1]}"


def demo_kinds(cluster: kubesim.Cluster) -> list[kubesim.KindSpec]:
    """Every kind the cluster serves: demo scenarios run them all."""
    return list(cluster.kinds)
