"""Everything one cluster needs: its connection, discovery, its informers and its health.

A worker fetches the cluster's connection, builds one ``KubeClient`` (one aiohttp session with
that cluster's CA), discovers the served job kinds and keeps one informer per (kind,
namespace) running, rediscovering periodically (a CRD installed later is picked up, a removed
one is stopped). Failures are retried with backoff and reported as health; they never leave
this worker. A change of credentials is a new worker (the supervisor rebuilds); a change of
watch options is applied here, restarting only the informers whose spec changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from trainwatch_common.events.clusters import ClusterHealth, ClusterSpec, WatchOptions
from trainwatch_common.kinds import JobKind
from trainwatch_watcher import errors
from trainwatch_watcher.connections import ConnectionSource
from trainwatch_watcher.crd_feed import follow_crds
from trainwatch_watcher.discovery import served_kinds
from trainwatch_watcher.evidence_feed import EvidenceFeed, evidence_sources, served_evidence_kinds
from trainwatch_watcher.health import HealthPublisher
from trainwatch_watcher.history import StreamHistory
from trainwatch_watcher.informer import Informer
from trainwatch_watcher.informer_spec import InformerSpec
from trainwatch_watcher.kind_health import kinds_health
from trainwatch_watcher.kube.client import KubeClient, load_kubeconfig
from trainwatch_watcher.kube.watching import Backoff
from trainwatch_watcher.metrics import WatcherMetrics
from trainwatch_watcher.publishing import Publisher
from trainwatch_watcher.settings import WatcherSettings
from trainwatch_watcher.state import StateStore
from trainwatch_watcher.taskmap import TaskMap

log = logging.getLogger(__name__)

InformerKey = tuple[str, str]  # (kind key, namespace or "*")

# Kind key → the kind key of its companion (read by the normalizer as ``related``).
COMPANION_OF = {"trainjob": "jobset"}
NO_JOB_KINDS = "the cluster serves none of the job kinds"


@dataclass(frozen=True, slots=True)
class WorkerDeps:
    connections: ConnectionSource
    store: StateStore
    publisher: Publisher
    health: HealthPublisher
    metrics: WatcherMetrics
    settings: WatcherSettings
    owner: str
    # (cluster_id, epoch) -> whether this replica still proves its lease; None: no leases (tests).
    fence: Callable[[str, int], bool] | None = None
    # cluster_id -> the Redis key of its fencing epoch: checkpoints are written only while that
    # epoch is still the worker's (``StateStore.fenced``). None: unfenced (no leases, tests).
    epoch_key: Callable[[str], str] | None = None
    # The JOBS stream, which every informer's checkpoint is set right by at start. None: trust
    # the checkpoint alone (benchmarks of the hot path).
    history: StreamHistory | None = None


def informer_specs(
    spec: ClusterSpec, served: dict[str, JobKind], *, epoch: int, owner: str
) -> dict[InformerKey, InformerSpec]:
    """The informers a cluster's options ask for, among the kinds it serves.

    Each spec keeps only the options that change that informer's behaviour, so adding a kind or a
    namespace leaves the other informers untouched.
    """
    options = spec.watch
    namespaces: list[str | None] = [
        ns for ns in options.include_namespaces if ns not in options.exclude_namespaces
    ] or [None]
    if options.include_namespaces and namespaces == [None]:
        return {}  # every included namespace is also excluded
    desired: dict[InformerKey, InformerSpec] = {}
    for key, kind in sorted(served.items()):
        if not options.watches_kind(key):
            continue
        for namespace in namespaces:
            own_options = WatchOptions(
                exclude_namespaces=options.exclude_namespaces if namespace is None else [],
                owner_label=options.owner_label,
                owner_annotation=options.owner_annotation,
                selected_labels=options.selected_labels,
            )
            desired[(key, namespace or "*")] = InformerSpec(
                spec.id,
                kind,
                namespace,
                own_options,
                epoch,
                owner,
                companion=served.get(COMPANION_OF.get(key, "")),
            )
    return desired


def _stop_if_cancelled(exc: BaseException) -> None:
    """Re-raise a cancellation that arrived as another exception.

    Python 3.11's TaskGroup swallows its parent's cancellation when it lands while the group is
    already aborting for a failed child (an informer's consumer failing with LeaseNotProven,
    say), and raises the child's error instead. A retry loop that caught that error would then
    run on after ``stop_cluster`` cancelled it, and the stop (and the claim loop awaiting it)
    would never finish.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError from exc


class ClusterWorker:
    def __init__(self, spec: ClusterSpec, *, epoch: int, deps: WorkerDeps) -> None:
        self.spec = spec
        self.epoch = epoch
        self._deps = deps
        self._settings = deps.settings
        self._wake = asyncio.Event()
        self.informers: dict[InformerKey, Informer] = {}
        self.kinds_served: list[str] = []
        self.reachable = False
        self.last_error: str | None = None
        self._error_is_no_kinds = False  # last_error says only that no job kind is served
        self._last_reported: tuple[object, ...] | None = None
        self._last_report_time = 0.0
        # Whether CRD events reach us (crd_feed); without them, kinds that went away (kind key ->
        # when) are looked for every kind_return_poll seconds.
        self._crd_feed_live = False
        self._kinds_gone: dict[str, float] = {}
        self.evidence: EvidenceFeed | None = None

    # -- called by the supervisor -------------------------------------------------------------
    def update(self, spec: ClusterSpec) -> None:
        """Same connection, new options or metadata: applied on the next loop turn (at once)."""
        self.spec = spec
        self._wake.set()

    def request_rediscovery(self) -> None:
        self._wake.set()

    async def drain(self) -> None:
        """Graceful stop, first half (the lease is still proven): every informer stops reading its
        watch and waits until what it handed to JetStream is acknowledged and checkpointed. The
        supervisor then cancels the worker; the caller bounds the wait."""
        informers = list(self.informers.values())
        if informers:
            await asyncio.gather(*(i.stop_consuming_and_drain() for i in informers))

    def stopped(self) -> None:
        with contextlib.suppress(KeyError):
            self._deps.metrics.watch_lag.remove(self.spec.id)
        with contextlib.suppress(KeyError):
            self._deps.metrics.cluster_reachable.remove(self.spec.id)
        self._deps.health.forget(self.spec.id)

    # -- running ------------------------------------------------------------------------------
    async def run(self) -> None:
        backoff = Backoff(self._settings)
        while True:
            started = time.monotonic()
            try:
                await self._run_connected(backoff)
            except errors.ClusterError as exc:
                _stop_if_cancelled(exc)
                self.reachable = False
                self._set_error(str(exc))
                await self.report_health(force=True)
                if time.monotonic() - started >= self._settings.backoff_reset_after:
                    backoff.reset()
                delay = backoff.next_delay()
                log.info(
                    "cluster unavailable; retrying",
                    extra={"cluster": self.spec.id, "error": str(exc), "retry_in": round(delay, 2)},
                )
                await asyncio.sleep(delay)

    async def _run_connected(self, backoff: Backoff) -> None:
        connection = await self._deps.connections.fetch(self.spec.id)
        access = load_kubeconfig(connection.kubeconfig)
        client = KubeClient(access, timings=self._settings)
        tasks: TaskMap[InformerKey, InformerSpec] = TaskMap(
            lambda key, spec: self._run_informer(client, key, spec),
            lambda key: f"informer {self.spec.id}/{key[0]}/{key[1]}",
        )
        crd_feed = asyncio.create_task(self._follow_crds(client), name=f"crd feed {self.spec.id}")
        if self._settings.diagnosis_enabled:
            self.evidence = EvidenceFeed(
                client,
                self._settings,
                self.spec.id,
                log_tails=self._settings.diagnosis_log_tails,
                log_timeout=self._settings.diagnosis_log_timeout,
                log_concurrency=self._settings.diagnosis_log_concurrency,
            )
        try:
            served = await served_kinds(client)
            while True:
                self.reachable = True
                self._note_kinds_gone(served)
                self.kinds_served = sorted(served)
                if not served:
                    self._set_error(NO_JOB_KINDS, no_kinds=True)
                elif self._error_is_no_kinds or not self._informer_errors():
                    self._set_error(None)
                desired = informer_specs(self.spec, served, epoch=self.epoch, owner=self._deps.owner)
                if self.evidence is not None:
                    # Before the informers: they wait for the evidence to be listed.
                    optional = await served_evidence_kinds(client)
                    sources = evidence_sources(
                        {k for k, _ in desired}, optional, log_tails=self._settings.diagnosis_log_tails
                    )
                    await self.evidence.reconcile(sources)
                await tasks.reconcile(desired)
                await self.report_health()
                served = await self._wait_and_rediscover(client, served, backoff)
        finally:
            crd_feed.cancel()
            await asyncio.gather(crd_feed, return_exceptions=True)
            await tasks.stop_all()
            if self.evidence is not None:
                await self.evidence.stop()
                self.evidence = None
            self.informers.clear()
            await client.close()

    async def _follow_crds(self, client: KubeClient) -> None:
        self._crd_feed_live = True
        try:
            why = await follow_crds(client, self._settings, self.request_rediscovery)
        finally:
            self._crd_feed_live = False
        log.info(
            "CRDs cannot be watched; rediscovering after a 404 instead",
            extra={"cluster": self.spec.id, "why": why},
        )

    def _note_kinds_gone(self, served: dict[str, JobKind]) -> None:
        now = time.monotonic()
        for key in self.kinds_served:
            if key not in served:
                self._kinds_gone.setdefault(key, now)
        for key in list(self._kinds_gone):
            if key in served or now - self._kinds_gone[key] > self._settings.kind_return_window:
                del self._kinds_gone[key]

    def _rediscovery_delay(self) -> float:
        """A kind that went away may come back any moment: look often unless CRD events tell us."""
        if self._kinds_gone and not self._crd_feed_live:
            return min(self._settings.kind_return_poll, self._settings.rediscovery_interval)
        return self._settings.rediscovery_interval

    async def _wait_and_rediscover(
        self, client: KubeClient, served: dict[str, JobKind], backoff: Backoff
    ) -> dict[str, JobKind]:
        """Sleep until rediscovery is due (or someone wakes us), keeping health fresh meanwhile."""
        delay = self._rediscovery_delay()
        deadline = time.monotonic() + delay
        tick = min(5.0, self._settings.health_interval, delay)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(tick, remaining)):
                    await self._wake.wait()
            if self._wake.is_set():
                self._wake.clear()
                break
            await self.report_health()
        while True:
            try:
                found = await served_kinds(client)
                backoff.reset()
                return found
            except errors.ClusterError as exc:
                # Informers keep running on their own retries; only discovery waits.
                self.reachable = False
                self._set_error(str(exc))
                await self.report_health()
                await asyncio.sleep(backoff.next_delay())

    async def _run_informer(self, client: KubeClient, key: InformerKey, spec: InformerSpec) -> None:
        """Run one informer until cancelled. An unexpected failure (a bug, Redis down while it
        loads its checkpoint) is logged and the informer starts again from its checkpoint after a
        backoff: it never takes the cluster's other informers with it."""
        backoff = Backoff(self._settings)
        store = self._deps.store
        if self._deps.epoch_key is not None:
            store = store.fenced(self._deps.epoch_key(self.spec.id), self.epoch)
        while True:
            informer = Informer(
                spec,
                client=client,
                store=store,
                publisher=self._deps.publisher,
                metrics=self._deps.metrics,
                timings=self._settings,
                max_in_flight=self._settings.publish_max_in_flight,
                on_kind_gone=self.request_rediscovery,
                fence=self._deps.fence,
                history=self._deps.history,
                evidence=self.evidence,
                evidence_ready_timeout=self._settings.diagnosis_ready_timeout,
            )
            self.informers[key] = informer
            started = time.monotonic()
            try:
                await informer.run()
            except Exception as exc:  # the task boundary: logged, counted, restarted
                _stop_if_cancelled(exc)
                log.exception("informer failed; restarting", extra={"cluster": self.spec.id, "kind": key[0]})
                informer.status.last_error = f"{type(exc).__name__}: {exc}"[:300]
                self._deps.metrics.reconnects.labels(key[0], type(exc).__name__).inc()
            finally:
                if self.informers.get(key) is informer and asyncio.current_task().cancelling():  # type: ignore[union-attr]
                    del self.informers[key]
            if time.monotonic() - started >= self._settings.backoff_reset_after:
                backoff.reset()
            await asyncio.sleep(backoff.next_delay())

    # -- health -------------------------------------------------------------------------------
    def _set_error(self, error: str | None, *, no_kinds: bool = False) -> None:
        self.last_error = error
        self._error_is_no_kinds = no_kinds

    def _informer_errors(self) -> list[str]:
        return [i.status.last_error for i in self.informers.values() if i.status.last_error]

    def watch_lag(self) -> float | None:
        heard = [i.status.last_heard for i in self.informers.values()]
        if not heard:
            return None
        if any(h is None for h in heard):
            return None
        now = time.monotonic()
        return max(0.0, max(now - h for h in heard if h is not None))

    def health(self) -> ClusterHealth:
        informer_errors = self._informer_errors()
        return ClusterHealth(
            cluster_id=self.spec.id,
            reachable=self.reachable,
            kinds_served=self.kinds_served,
            informers_running=len(self.informers),
            last_error=self.last_error or (informer_errors[0] if informer_errors else None),
            watch_lag_seconds=self.watch_lag(),
            owner=self._deps.owner,
            epoch=self.epoch,
            observed_at=datetime.now(UTC),
            kinds=kinds_health(self.kinds_served, ((k[0], i.status) for k, i in self.informers.items())),
            diagnosis_error=self._diagnosis_error(),
        )

    def _diagnosis_error(self) -> str | None:
        problems = self.evidence.problems() if self.evidence is not None else []
        return f"diagnosis unavailable: {', '.join(problems)}" if problems else None

    async def report_health(self, *, force: bool = False) -> None:
        health = self.health()
        lag = health.watch_lag_seconds
        if lag is not None:
            self._deps.metrics.watch_lag.labels(self.spec.id).set(lag)
        self._deps.metrics.cluster_reachable.labels(self.spec.id).set(1 if health.reachable else 0)
        key = (
            health.reachable,
            tuple(health.kinds_served),
            health.informers_running,
            health.last_error,
            health.diagnosis_error,
            tuple((k, h.state, h.recovered_at) for k, h in health.kinds.items()),
        )
        now = time.monotonic()
        if (
            force
            or key != self._last_reported
            or now - self._last_report_time >= self._settings.health_interval
        ):
            self._last_reported = key
            self._last_report_time = now
            await self._deps.health.publish(health)
