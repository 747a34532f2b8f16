"""One informer: list+watch one kind in one cluster (one namespace or all), emit transitions.

The pipeline has two stages joined by a bounded queue, so publishing is asynchronous but never
fire-and-forget:

1. ``_consume`` reads raw events, normalizes them, decides what to emit (``transitions``),
   hands each event to JetStream at once and enqueues a ``Commit`` (the pending publish and
   the checkpoint change it makes);
2. ``_commit`` takes commits in order, waits for each acknowledgement (retrying with the same
   Nats-Msg-Id until it comes) and only then writes the checkpoint to Redis, batching writes.

A full queue stops the consumer (back-pressure); nothing is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from nats.js.api import PubAck
from prometheus_client import Counter

from trainwatch_common.events.diagnosis import Diagnosis
from trainwatch_common.events.envelope import job_event_json
from trainwatch_watcher import errors, job_events, long_lived, recovery, transitions
from trainwatch_watcher.evidence_feed import EvidenceFeed
from trainwatch_watcher.history import StreamHistory
from trainwatch_watcher.informer_spec import InformerSpec
from trainwatch_watcher.job_diagnosis import JobDiagnoser, event_extras, first_running_at, is_news
from trainwatch_watcher.kinds.catalog import decision_inputs_for, normalize_object
from trainwatch_watcher.kinds.model import MalformedObject, NormalizedStatus, is_owned_by_higher_level_job
from trainwatch_watcher.kube import progress
from trainwatch_watcher.kube.client import KubeClient
from trainwatch_watcher.kube.watching import Backoff, Progress, Synced, Watcher, WatchHooks, WatchTarget
from trainwatch_watcher.metrics import WatcherMetrics
from trainwatch_watcher.publishing import PendingPublish, Publisher, reraise_cancellation
from trainwatch_watcher.records import Checkpoint, JobRecord, StateWrite, checkpointed, trim
from trainwatch_watcher.settings import WatchTimings
from trainwatch_watcher.state import StateStore

log = logging.getLogger(__name__)

# Events that change nothing but the resourceVersion are checkpointed once per this many.
RV_CHECKPOINT_EVERY = 500


@dataclass(slots=True)
class Commit:
    pending: PendingPublish | None
    write: StateWrite
    emission: transitions.Emission | None = None


class InformerStatus:
    """What the cluster's health report reads: when the server was last heard, the last error."""

    def __init__(self) -> None:
        self.last_heard: float | None = None
        self.last_error: str | None = None
        self.synced = False
        # The class of the last error (Unauthorized, KindNotServed...): the kind's health state.
        self.error: errors.WatcherError | None = None
        # 429 "storage is (re)initializing" last answered, and not yet listed since: starting.
        self.waiting = False
        # The last time the server was found behind our resourceVersion, and what was seen.
        self.recovered: str | None = None
        self.recovered_at: datetime | None = None


class Informer(WatchHooks):
    def __init__(
        self,
        spec: InformerSpec,
        *,
        client: KubeClient,
        store: StateStore,
        publisher: Publisher,
        metrics: WatcherMetrics,
        timings: WatchTimings,
        max_in_flight: int = 1000,
        on_kind_gone: Any = None,
        fence: Callable[[str, int], bool] | None = None,
        history: StreamHistory | None = None,
        evidence: EvidenceFeed | None = None,
        evidence_ready_timeout: float = 10.0,
    ) -> None:
        self.spec = spec
        # The cluster's diagnosis evidence; None: events carry no diagnosis.
        self._evidence = evidence
        self._evidence_ready_timeout = evidence_ready_timeout
        self._diagnoser = (
            JobDiagnoser(spec.kind.key, evidence.cache, spec.options, evidence.logs)
            if evidence is not None
            else None
        )
        # Whether a job's evidence links can move without a status change (RayJob's cluster name).
        self._relinks = self._diagnoser is not None and spec.kind.key == "rayjob"
        # The consumer and the re-diagnosis task both emit: one at a time, so sequences stay in order.
        self._emitting: contextlib.AbstractAsyncContextManager[Any] = (
            asyncio.Lock() if evidence is not None else contextlib.nullcontext()
        )
        self._fence = fence
        # The JOBS stream as the record of what was emitted; None only in benchmarks of the
        # hot path and tests of one stage, which then trust the checkpoint alone.
        self._history = history
        # The checkpoint set right by the stream, held while a resume from the checkpoint replays.
        self._records_for_relist: dict[str, JobRecord] | None = None
        self._ahead_of_checkpoint: frozenset[str] = frozenset()  # see _stream_is_ahead
        self._closed_for_relist: dict[str, int] = {}
        # uid -> sequence of its deletion, of jobs the stream holds as deleted, during a relist
        # that may bring one back (``recovery.Recovered.closed``); emptied once the list is done.
        self._closed: dict[str, int] = {}
        # The server went back in time (etcd restored): read the deletions before the relist.
        self._read_closed_before_relist = False
        # The records taken from the stream, and those it closed, as one checkpoint change, queued
        # ahead of the first commit made from them. Kept only in memory, they would be missing
        # from a checkpoint whose stream mark then says it holds everything the stream does: the
        # next owner would trust it, and its next relist would take those jobs for new ones.
        self._unsaved_records: StateWrite | None = None
        self._unsaved_records_for_relist: StateWrite | None = None
        self._client = client
        self._store = store
        self._publisher = publisher
        self._metrics = metrics
        self._timings = timings
        self._queue: asyncio.Queue[Commit] = asyncio.Queue(maxsize=max_in_flight)
        # subject -> its publish not yet confirmed. A job's next event waits for it: a send lost
        # with a dead connection is resent only after its ack timeout, and anything sent on the
        # new connection meanwhile would be stored ahead of it, out of the job's order.
        self._unconfirmed: dict[str, PendingPublish] = {}
        self._confirmed: dict[str, asyncio.Future[None]] = {}  # made only when somebody waits
        self._records: dict[str, JobRecord] = {}
        self._on_kind_gone = on_kind_gone
        self.status = InformerStatus()
        self._kind_label = spec.kind.key
        self._namespaces_in_scope: dict[str, bool] = {}
        self._idle_events = 0
        self._consumer: asyncio.Task[None] | None = None
        self._committer: asyncio.Task[None] | None = None
        # A companion changes the status without changing the job's own inputs: no shortcut then.
        self._decision_inputs = decision_inputs_for(spec.kind) if spec.companion is None else None

    # -- WatchHooks ---------------------------------------------------------------------------
    def on_relist(self, reason: str) -> None:
        self._metrics.relists.labels(self._kind_label, reason).inc()
        if self._records_for_relist is not None:
            self._metrics.cache_jobs.inc(len(self._records_for_relist) - len(self._records))
            self._records = self._records_for_relist
            self._closed = self._closed_for_relist
            self._records_for_relist = None
            self._unsaved_records = self._unsaved_records_for_relist
            self._unsaved_records_for_relist = None

    def on_expired(self) -> None:
        self._metrics.expired.labels(self._kind_label).inc()

    def on_reconnect(self, error: BaseException) -> None:
        self._metrics.reconnects.labels(self._kind_label, type(error).__name__).inc()
        self.status.last_error = str(error)
        self.status.error = error if isinstance(error, errors.WatcherError) else None
        if isinstance(error, errors.KindNotServed) and self._on_kind_gone is not None:
            self._on_kind_gone()

    def on_connected(self) -> None:
        """Listed, or a watch resumed from the checkpoint: from here on we are current."""
        self.status.last_heard = time.monotonic()
        self.status.last_error = None
        self.status.error = None
        self.status.waiting = False
        self.status.synced = True

    def on_resource_version_ahead(self, error: errors.ResourceVersionAhead) -> None:
        """Reported in health until the next one: an operator should know the cluster's state
        went back in time (etcd restored) and that we relisted to follow it."""
        self.status.recovered = str(error)
        self.status.recovered_at = datetime.now(UTC)
        self._read_closed_before_relist = True

    def on_waiting(self, error: errors.StorageInitializing) -> None:
        """The server's storage for this kind is (re)initializing: the expected wait, no error."""
        self.status.waiting = True

    # -- running ------------------------------------------------------------------------------
    async def run(self) -> None:
        spec = self.spec
        checkpoint = await self._store.load(spec.cluster_id, spec.kind.key)
        self._records = {
            uid: record for uid, record in checkpoint.records.items() if self._belongs(record.slot.namespace)
        }
        resume_from = checkpoint.resource_versions.get(spec.scope)
        if self._history is not None and not await self._checkpoint_is_current(checkpoint):
            heads = await self._history.last_events(spec.cluster_id, spec.kind.key, spec.namespace)
            recovered = recovery.recover(self._records, heads)
            if recovered.behind:
                self._metrics.checkpoint_corrections.labels(self._kind_label).inc(recovered.corrected)
                log.warning(
                    "checkpoint behind the JOBS stream",
                    extra={"cluster": spec.cluster_id, "kind": self._kind_label, "jobs": recovered.corrected},
                )
            if resume_from is None:
                # The checkpoint has no resourceVersion (lost with its records, or a start that
                # took its records from the stream stopped before committing anything): resume
                # where the stream's events were emitted, so the changes since are seen one by one
                # (a job created, failed and deleted meanwhile is reported so); a relist could see
                # none of it. If that version is gone (410), the relist diffs against the stream's
                # jobs. The records are saved with the version they are valid at, or the next
                # start would find records without one and relist (chaos seed 41, FLUSHALL).
                self._unsaved_records = _records_changed(self._records, recovered.records)
                if recovered.resource_version is not None:
                    self._unsaved_records.resource_versions[spec.scope] = recovered.resource_version
                self._records = recovered.records
                self._closed = recovered.closed
                resume_from = recovered.resource_version
            elif recovered.behind:
                # Resuming replays every change since the checkpoint from the checkpoint's own
                # records, so each event the stream already holds comes again, the same, under
                # its id. Only if that replay is refused (410) does the relist need the stream.
                self._records_for_relist = recovered.records
                self._ahead_of_checkpoint = recovered.ahead
                self._closed_for_relist = recovered.closed
                self._unsaved_records_for_relist = _records_changed(self._records, recovered.records)
        self._metrics.cache_jobs.inc(len(self._records))
        if self._evidence is not None:
            # Diagnose the listed jobs from listed evidence, or a restart would call the evidence
            # missing "news" (and emit it) before the pods arrive.
            await self._evidence.wait_ready(self._evidence_ready_timeout)
            if resume_from and self._records:
                await self._link_checkpointed_jobs(resume_from)
        watcher = Watcher(
            client=self._client,
            target=WatchTarget(spec.kind, spec.namespace),
            timings=self._timings,
            resume_from=resume_from,
            hooks=self,
        )
        self._metrics.informers_running.inc()
        try:
            async with asyncio.TaskGroup() as group:
                self._committer = group.create_task(self._commit(), name=f"{spec.name} commit")
                # Its own task, so a graceful stop can end it alone and let the commits finish.
                self._consumer = group.create_task(self._consume(watcher), name=f"{spec.name} consume")
                if self._diagnoser is not None:
                    group.create_task(self._rediagnose(self._diagnoser), name=f"{spec.name} rediagnose")
                # Until cancelled or a task fails. Waiting here, not in the group's exit, matters:
                # Python 3.11's TaskGroup cancels its parent when a task fails but takes that
                # cancellation back only if the body had not finished yet (fixed in 3.12).
                await asyncio.get_running_loop().create_future()
        finally:
            self._metrics.informers_running.dec()
            self._metrics.cache_jobs.dec(len(self._records))
            if self._diagnoser is not None:
                self._diagnoser.close()

    async def _link_checkpointed_jobs(self, resource_version: str) -> None:
        """Link the jobs known from the checkpoint to their evidence, and diagnose them again.

        A resume replays only what changed since the checkpoint, so a job that did not change
        would stay unknown to the diagnoser until its next event, and evidence that arrives
        meanwhile (a child Job's quota Event seen after the job's first event went out, then a
        handoff) would wake nobody. One LIST at the resume's resourceVersion shows each job as
        the checkpoint last saw it; the replay then moves them on in order. Diagnosing them again
        emits only what is news against the diagnosis the checkpoint says went out."""
        assert self._diagnoser is not None
        spec = self.spec
        target = WatchTarget(spec.kind, spec.namespace)
        page_size = str(self._timings.list_page_size)
        params = {
            "limit": page_size,
            "resourceVersion": resource_version,
            "resourceVersionMatch": "Exact",
            **target.selectors(),
        }
        backoff = Backoff(self._timings)
        checked = False
        while True:
            try:
                if not checked:
                    # A LIST at a version the server has not reached waits, then fails: ask first.
                    await progress.check_not_ahead(self._client, target.path(), resource_version)
                    checked = True
                while True:
                    page = await self._client.get_json(target.path(), params)
                    items = page.get("items")
                    for obj in items if isinstance(items, list) else ():
                        await self._link_checkpointed_job(obj)
                    token = (page.get("metadata") or {}).get("continue")
                    if not token:
                        return
                    params = {"limit": page_size, "continue": str(token), **target.selectors()}
            except errors.WatchExpired:
                # Compacted, or the server went back in time (ResourceVersionAhead): the resume is
                # refused the same way and relists, which links every job.
                return
            except (errors.Unreachable, errors.Unauthorized) as exc:
                # An outage or refused credentials pass; the watch could not start now either.
                # Given up, the jobs of the checkpoint would stay unlinked until their next event
                # (evidence arriving for them wakes nobody): retry the page that failed, as the
                # watch retries, and say why in health meanwhile.
                self.on_reconnect(exc)
                if isinstance(exc, errors.StorageInitializing):
                    delay = self._timings.busy_retry
                else:
                    delay = backoff.next_delay()
                log.info(
                    "linking the jobs of the checkpoint to their evidence failed; retrying",
                    extra={
                        "cluster": spec.cluster_id,
                        "kind": self._kind_label,
                        "error": str(exc)[:200],
                        "retry_in": round(delay, 2),
                    },
                )
                await asyncio.sleep(delay)
            except errors.WatcherError as exc:
                # Not served (404), too large, another 4xx: retrying cannot help; the watch that
                # follows reports it.
                log.warning(
                    "jobs of the checkpoint not linked to their evidence until their next event",
                    extra={"cluster": spec.cluster_id, "kind": self._kind_label, "error": str(exc)[:200]},
                )
                return

    def _stream_is_ahead(self, uid: str) -> bool:
        """The JOBS stream holds newer events of this job than the checkpoint being resumed from:
        its record is stale until the replay brings those events again (a relist, if the replay
        is refused, takes the stream's). Diagnosed from the stale record, a diagnosis update would
        take the sequence of an event the stream already holds (short chaos seed 1: a diagnosis
        update of a Pending job under the id of its stored Running, then the Running twice)."""
        return self._records_for_relist is not None and uid in self._ahead_of_checkpoint

    async def _link_checkpointed_job(self, obj: Any) -> None:
        assert self._diagnoser is not None
        try:
            uid, namespace, name, metadata = _identity(obj)
            record = self._records.get(uid)
            if record is None or not self._in_scope(namespace) or self._diagnoser.tracked(uid) is not None:
                return
            if self._stream_is_ahead(uid):
                return  # the replay's own event of it tracks it, from a current record
            related = await self._companion(namespace, name, _resource_version(metadata))
            status = normalize_object(self.spec.kind, obj, record.last, related=related)
        except MalformedObject:
            return  # its own next event is skipped the same way
        self._diagnoser.track(uid, obj, status)
        self._diagnoser.dirty.add(uid)
        self._diagnoser.wake.set()

    async def _read_closed(self) -> None:
        """The deletions the stream holds, for a relist of a server that went back in time."""
        if self._history is None:
            return
        spec = self.spec
        heads = await self._history.last_events(spec.cluster_id, spec.kind.key, spec.namespace)
        self._closed = recovery.recover(self._records, heads).closed

    async def _checkpoint_is_current(self, checkpoint: Checkpoint) -> bool:
        """The checkpoint's mark is the stream's last event of this scope: nothing newer to read.

        A stream that holds nothing of the scope (a new cluster) is also nothing to read; a mark
        without records (the stream purged) reads the stream anyway, which is then empty."""
        assert self._history is not None
        spec = self.spec
        last = await self._history.last_sequence(spec.cluster_id, spec.kind.key, spec.namespace)
        if last == 0:
            return True
        # Without a resourceVersion the checkpoint cannot say where to resume (a relist cut short
        # after some of its events were acknowledged): the stream's versions can.
        return checkpoint.stream_marks.get(spec.scope) == last and spec.scope in checkpoint.resource_versions

    def _belongs(self, namespace: str) -> bool:
        """Records of this informer's scope (another namespace's informer owns the others)."""
        return self.spec.namespace is None or namespace == self.spec.namespace

    async def _consume(self, watcher: Watcher) -> None:
        kind_label = self._kind_label
        received = self._metrics.events_received.labels(kind_label)
        task = asyncio.current_task()  # looked up once: it is not cheap in Python 3.11
        async for item in watcher.run_forever():
            reraise_cancellation(None, task)  # third-party clients (nats-py) may have swallowed one
            if self._unsaved_records is not None:
                await self._save_unsaved_records()
            if not watcher.listing:
                if self._records_for_relist is not None or self._closed:
                    # The resume was accepted: its replay sets us right; the relist needs no help.
                    self._records_for_relist = None
                    self._closed_for_relist = {}
                    self._unsaved_records_for_relist = None
                    self._closed = {}
            elif self._read_closed_before_relist:
                self._read_closed_before_relist = False
                await self._read_closed()
            if isinstance(item, Progress):
                self.status.last_heard = time.monotonic()
                await self._queue.put(
                    Commit(None, StateWrite(resource_versions={self.spec.scope: item.resource_version}))
                )
                continue
            if isinstance(item, Synced):
                self.status.last_heard = time.monotonic()
                self.status.synced = True
                async with self._emitting:
                    await self._on_synced(item)
                continue
            received.inc()
            # During a (re)list the checkpoint must not move: the list's rv comes with Synced.
            async with self._emitting:
                await self._on_event(item, None if watcher.listing else watcher.resource_version)

    async def _save_unsaved_records(self) -> None:
        """Queue the records taken from the stream ahead of any commit made from them (commits
        are applied in order): no stream mark, and no newer record of a job, is written before."""
        assert self._unsaved_records is not None
        write, self._unsaved_records = self._unsaved_records, None
        await self._queue.put(Commit(None, write))

    async def _on_event(self, event: Mapping[str, Any], resource_version: str | None) -> None:
        event_type = event.get("type")
        obj = event.get("object")
        try:
            uid, namespace, name, metadata = _identity(obj)
            if not self._in_scope(namespace):
                return
            if "ownerReferences" in metadata and is_owned_by_higher_level_job(obj):  # type: ignore[arg-type]
                return
            record = self._records.get(uid)
            inputs = None
            if event_type in ("ADDED", "MODIFIED") and self._decision_inputs is not None:
                inputs = self._decision_inputs(obj)  # type: ignore[arg-type]
                if inputs is not None and record is not None and record.inputs == inputs:
                    # Same inputs as the last computed status: the same status again (a fixed
                    # point, see kubeflow_v1.decision_inputs), so nothing to emit or remember.
                    if self._relinks:
                        self._diagnoser.relink(uid, obj)  # type: ignore[union-attr, arg-type]
                    if (commit := self._unchanged(resource_version)) is not None:
                        await self._queue.put(commit)
                    return
            extras = None
            if event_type == "DELETED":
                write = StateWrite()
                status = self._normalize_or_none(obj, record)
                emission = transitions.deleted(record.slot if record else None, status)
                if record is not None:
                    del self._records[uid]
                    self._metrics.cache_jobs.dec()
                    write.delete.add(uid)
                    extras = self._deleted_extras(uid, record, emission)
            elif event_type in ("ADDED", "MODIFIED"):
                write = StateWrite()
                emission, extras = await self._observe(obj, record, uid, namespace, name, inputs, write)
            else:
                return
        except MalformedObject as exc:
            self._metrics.malformed_objects.labels(self._kind_label).inc()
            log.warning(
                "malformed object skipped",
                extra={"cluster": self.spec.cluster_id, "kind": self._kind_label, "reason": str(exc)[:300]},
            )
            return
        await self._hand_over(emission, write, obj, uid, resource_version, extras)

    def _deleted_extras(
        self, uid: str, record: JobRecord, emission: transitions.Emission | None
    ) -> dict[str, Any] | None:
        """A deletion carries the last diagnosis emitted (it is not a new one), and forgets the job."""
        if self._diagnoser is None:
            return None
        tracked = self._diagnoser.tracked(uid)
        self._diagnoser.forget(uid)
        if emission is None:
            return None
        now = datetime.now(UTC)
        return event_extras(
            tracked, record.diagnosis, emission.status, record.first_running_at, record.slot.terminal, now
        )

    def _in_scope(self, namespace: str) -> bool:
        """``spec.in_scope``, remembered per namespace (asked once per event)."""
        in_scope = self._namespaces_in_scope.get(namespace)
        if in_scope is None:
            in_scope = self._namespaces_in_scope[namespace] = self.spec.in_scope(namespace)
        return in_scope

    async def _observe(
        self,
        obj: Any,
        record: JobRecord | None,
        uid: str,
        namespace: str,
        name: str,
        inputs: object,
        write: StateWrite,
    ) -> tuple[transitions.Emission | None, dict[str, Any] | None]:
        """Normalize a live object; remember its status (in ``write`` too when it changed).

        With diagnosis: the job's diagnosis goes on its transition, or, when the phase stayed and
        the diagnosis is news, on a diagnosis update (the next sequence); returns the event's
        diagnosis fields too."""
        related = await self._companion(namespace, name, _resource_version(obj["metadata"]))
        status = normalize_object(self.spec.kind, obj, record.last if record else None, related=related)
        previous = record.slot if record else None
        closed_at = self._closed.get(uid) if previous is None and self._closed else None
        emission = transitions.observe(previous, status, namespace=namespace, name=name, closed_at=closed_at)
        trimmed = trim(status)
        extras = None
        diagnosis = record.diagnosis if record else None
        first_running = record.first_running_at if record else None
        if self._diagnoser is not None:
            now = datetime.now(UTC)
            tracked = self._diagnoser.track(uid, obj, status)
            self._diagnoser.dirty.discard(uid)  # diagnosed here, now
            new_diagnosis = self._diagnoser.diagnose(uid, now)
            if emission is None and record is not None and is_news(diagnosis, new_diagnosis):
                emission = _diagnosis_update(record.slot, status)
            if emission is not None:
                diagnosis = new_diagnosis
            first_running = first_running_at(record, status, now)
            if emission is not None:
                extras = event_extras(tracked, diagnosis, status, first_running, emission.slot.terminal, now)
        if emission is not None:
            new = JobRecord(emission.slot, trimmed, diagnosis, first_running, inputs=inputs)
        elif record is not None and (record.last != trimmed or record.first_running_at != first_running):
            # what the next normalization needs
            new = JobRecord(record.slot, trimmed, record.diagnosis, first_running, inputs=inputs)
        else:
            new = None
            if record is not None:
                record.inputs = inputs
        if new is not None:
            if record is None:
                self._metrics.cache_jobs.inc()
            self._records[uid] = new
            write.put[uid] = new
        return emission, extras

    async def _rediagnose(self, diagnoser: JobDiagnoser) -> None:
        """Jobs whose evidence changed (a pod failed, a Workload was admitted): a diagnosis that
        is news becomes a diagnosis update, through the same publish-ack-checkpoint path."""
        while True:
            await diagnoser.wake.wait()
            async with self._emitting:
                for uid in sorted(diagnoser.take_dirty()):
                    await self._rediagnose_one(diagnoser, uid)

    async def _rediagnose_one(self, diagnoser: JobDiagnoser, uid: str) -> None:
        record = self._records.get(uid)
        tracked = diagnoser.tracked(uid)
        if record is None or tracked is None or self._stream_is_ahead(uid):
            return
        now = datetime.now(UTC)
        diagnosis = diagnoser.diagnose(uid, now)
        if not is_news(record.diagnosis, diagnosis):
            return
        emission = _diagnosis_update(record.slot, tracked.status)
        new = JobRecord(emission.slot, record.last, diagnosis, record.first_running_at, inputs=record.inputs)
        self._records[uid] = new
        write = StateWrite(put={uid: new})
        extras = event_extras(
            tracked, diagnosis, tracked.status, record.first_running_at, record.slot.terminal, now
        )
        obj = {"metadata": tracked.metadata}
        await self._hand_over(emission, write, obj, uid, None, extras)

    async def _hand_over(
        self,
        emission: transitions.Emission | None,
        write: StateWrite,
        obj: Any,
        uid: str,
        resource_version: str | None,
        extras: dict[str, Any] | None = None,
    ) -> None:
        """Publish what is to be emitted and queue its checkpoint change behind the ack."""
        if emission is None and not write:
            if (commit := self._unchanged(resource_version)) is not None:
                await self._queue.put(commit)
            return
        if resource_version:
            write.resource_versions[self.spec.scope] = resource_version
            self._idle_events = 0
        pending = None
        if emission is not None:
            pending = await self._publish(
                emission, obj, _resource_version(obj["metadata"]) or "", uid=uid, extras=extras
            )
        await self._queue.put(Commit(pending, write, emission))

    def _unchanged(self, resource_version: str | None) -> Commit | None:
        """Nothing to emit or remember: only the resourceVersion moved. Checkpoint it every so
        often rather than per event (a restart re-reads at most that many events, and re-emits
        none of them: their transitions are already recorded); returns that checkpoint's commit."""
        if resource_version:
            self._idle_events += 1
            if self._idle_events >= RV_CHECKPOINT_EVERY:
                self._idle_events = 0
                return Commit(None, StateWrite(resource_versions={self.spec.scope: resource_version}))
        return None

    async def _companion(
        self, namespace: str, name: str, resource_version: str | None
    ) -> dict[str, Any] | None:
        """The companion object as it was when the job's status was written.

        The controller writes the companion before it copies its status into the job, and both
        share the cluster's resourceVersion sequence: an exact LIST at the job's resourceVersion
        shows the companion the job's status was computed from, however late we process it.
        Once that version is compacted away, the current companion is the best there is.
        """
        kind = self.spec.companion
        if kind is None:
            return None
        path = f"{kind.api_path}/namespaces/{namespace}/{kind.plural}"
        selector = {"fieldSelector": f"metadata.name={name}"}
        try:
            if resource_version:
                try:
                    listing = await self._client.get_json(
                        path,
                        {**selector, "resourceVersion": resource_version, "resourceVersionMatch": "Exact"},
                    )
                except errors.WatchExpired:
                    listing = await self._client.get_json(path, selector)
            else:
                listing = await self._client.get_json(path, selector)
        except errors.WatcherError:
            return None  # absent or unreadable: normalize without it
        items = listing.get("items")
        if isinstance(items, list) and items and isinstance(items[0], dict):
            return items[0]
        return None

    def _normalize_or_none(self, obj: Any, record: JobRecord | None) -> NormalizedStatus | None:
        try:
            return normalize_object(self.spec.kind, obj, record.last if record else None)
        except MalformedObject:
            return None

    async def _on_synced(self, synced: Synced) -> None:
        """After a (re)list: whatever we remember that the list did not contain is gone."""
        self._closed = {}  # only a relist can bring a deleted job back
        gone = [uid for uid in self._records if uid not in synced.uids]
        for uid in gone:
            record = self._records.pop(uid)
            self._metrics.cache_jobs.dec()
            write = StateWrite(delete={uid})
            pending = None
            emission = None
            if self.spec.in_scope(record.slot.namespace):
                emission = transitions.deleted(record.slot, None, unseen=True)
                if emission is not None:
                    extras = self._deleted_extras(uid, record, emission)
                    pending = await self._publish(
                        emission, None, synced.resource_version, uid=uid, extras=extras
                    )
            elif self._diagnoser is not None:
                self._diagnoser.forget(uid)
            # else: its namespace is no longer watched: forget it without claiming a deletion.
            await self._queue.put(Commit(pending, write, emission))
        await self._queue.put(
            Commit(None, StateWrite(resource_versions={self.spec.scope: synced.resource_version}))
        )
        long_lived.FREEZER.request()  # the records (and diagnosis links) of the jobs just listed

    async def _publish(
        self,
        emission: transitions.Emission,
        obj: Mapping[str, Any] | None,
        resource_version: str,
        *,
        uid: str,
        extras: Mapping[str, Any] | None = None,
    ) -> PendingPublish:
        if self._fence is not None and not self._fence(self.spec.cluster_id, self.spec.epoch):
            # After a pause (SIGSTOP, a long GC) the informers may run before the claim loop does.
            raise errors.LeaseNotProven(
                f"lease on {self.spec.cluster_id} (epoch {self.spec.epoch}) not proven"
            )
        if self._unsaved_records is not None:
            await self._save_unsaved_records()  # the re-diagnosis may publish before the consumer
        subject = job_events.subject_for(self.spec, emission.slot)
        while subject in self._unconfirmed:
            confirmed = self._confirmed.get(subject)
            if confirmed is None:
                confirmed = self._confirmed[subject] = asyncio.get_running_loop().create_future()
            # Shielded: a waiter cancelled (a handoff stops the consumer) must not cancel the
            # future the re-diagnosis task may be waiting on too.
            await asyncio.shield(confirmed)
        document = job_events.event_document(
            self.spec, emission, obj, resource_version, uid, observed_at=datetime.now(UTC), extras=extras
        )
        pending = await self._publisher.submit(
            subject=subject,
            payload=job_event_json(document),
            msg_id=document["event_id"],
            kind_key=self._kind_label,
        )
        self._unconfirmed[subject] = pending
        return pending

    def _on_confirmed(self, pending: PendingPublish) -> None:
        if self._unconfirmed.get(pending.subject) is pending:
            del self._unconfirmed[pending.subject]
            confirmed = self._confirmed.pop(pending.subject, None)
            if confirmed is not None and not confirmed.done():
                confirmed.set_result(None)

    # -- committing ---------------------------------------------------------------------------
    async def _commit(self) -> None:
        """Acknowledgement first, checkpoint second; checkpoint writes batched."""
        emitted = _LabelledChildren(self._metrics.transitions_emitted, self._kind_label)
        # A resend after a pause must not go out once the lease is no longer proven.
        may_resend = None
        if self._fence is not None:
            may_resend = functools.partial(self._fence, self.spec.cluster_id, self.spec.epoch)
        while True:
            reraise_cancellation(None)  # third-party clients (nats-py, redis) may have swallowed one
            # One batch per call: its commits (payloads, records) go with the call's frame, or an
            # idle informer would keep its last batch, its whole first sync, while it waits here.
            await self._commit_batch(await self._queue.get(), emitted, may_resend)

    async def _commit_batch(
        self, first: Commit, emitted: _LabelledChildren, may_resend: Callable[[], bool] | None
    ) -> None:
        batch = [first]
        write = StateWrite()
        stream_mark = 0
        done = 0
        # Confirm in order; whatever was queued while we waited for acknowledgements joins this
        # batch, so under load one Redis write covers many events.
        while done < len(batch):
            commit = batch[done]
            if commit.pending is not None:
                ack = await self._publisher.confirm(commit.pending, may_resend=may_resend)
                self._on_confirmed(commit.pending)
                if ack.duplicate and commit.emission is not None:
                    await self._check_duplicate(ack, commit.pending.msg_id, commit.emission, commit.write)
                stream_mark = max(stream_mark, ack.seq or 0)
                if commit.emission is not None:
                    emitted.child(commit.emission.change).inc()
            write.merge(commit.write)
            done += 1
            while not self._queue.empty() and len(batch) < 1000:
                batch.append(self._queue.get_nowait())
        if stream_mark:
            write.stream_marks[self.spec.scope] = stream_mark
        await self._store_with_retry(write)
        for _ in batch:
            self._queue.task_done()

    async def _check_duplicate(
        self, ack: PubAck, msg_id: str, emission: transitions.Emission, write: StateWrite
    ) -> None:
        """JetStream already held this id. A resend of the same event (its first send was stored,
        the acknowledgement lost) is what de-duplication is for; a different event under the id
        (a fenced-out owner's late publish got there first) means ours was dropped, and carrying
        on would lose it. Then start again from what the stream holds: it relists and emits the
        job's current state under the next sequence.

        The same event may still carry another diagnosis: the evidence moved between the first
        send (by us before a crash, or by the previous owner) and this one. Consumers have the
        stored one; see ``_adopt_stored_diagnosis``."""
        if self._history is None:
            return
        stored = await self._history.stored_event(ack.seq)
        if stored is None:
            return  # aged out of the stream: there is nothing left to disagree with
        same = (
            stored.event_id == msg_id
            and stored.change == emission.change
            and stored.head.record is not None
            and stored.head.record.slot.key == emission.slot.key
        ) or (stored.event_id == msg_id and stored.change == "deleted" == emission.change)
        if same:
            if stored.head.record is not None:
                self._adopt_stored_diagnosis(stored.uid, stored.head.record.diagnosis, emission, write)
            return
        self._metrics.event_id_conflicts.labels(self._kind_label).inc()
        # A replay from this checkpoint would run into the same id again: the next start relists,
        # against the jobs as the stream holds them. (Unfenced: at worst it costs an owner a relist.)
        await self._store.forget_scope(self.spec.cluster_id, self.spec.kind.key, (), self.spec.scope)
        raise errors.HistoryDiverged(
            f"{msg_id}: the stream holds a different event under this id (stream sequence {ack.seq})"
        )

    def _adopt_stored_diagnosis(
        self, uid: str, stored: Diagnosis | None, emission: transitions.Emission, write: StateWrite
    ) -> None:
        """Our copy of an event was dropped as a duplicate, and the stored copy's diagnosis is not
        the one we sent (or lacks the log tail ours had). Recording ours as emitted would hide
        the change for good: nothing compares against it again. So the record takes the stored
        diagnosis (what consumers have), and the job is diagnosed again: what is news against
        that goes out as a diagnosis update under the next sequence (an id of its own). The id
        stays the (uid, sequence) one: a diagnosis in it would give one sequence two events."""
        if self._diagnoser is None:
            return  # without diagnosis our events carry none: nothing of ours was lost
        ours = write.put.get(uid)
        if ours is None or ours.slot.sequence != emission.sequence or not is_news(stored, ours.diagnosis):
            return
        kept = checkpointed(stored)
        ours.diagnosis = kept
        current = self._records.get(uid)
        if current is not None and current is not ours and current.slot.sequence == emission.sequence:
            current.diagnosis = kept  # a later status change kept the slot (and our diagnosis)
        log.info(
            "a resent event was stored with another diagnosis; diagnosing the job again",
            extra={"cluster": self.spec.cluster_id, "kind": self._kind_label, "uid": uid},
        )
        self._diagnoser.dirty.add(uid)
        self._diagnoser.wake.set()

    async def _store_with_retry(self, write: StateWrite) -> None:
        delay = 0.05
        while True:
            try:
                await self._store.apply(self.spec.cluster_id, self.spec.kind.key, write)
                return
            except errors.LeaseNotProven:
                raise  # a newer owner's epoch refused the write: retrying cannot help
            except Exception as exc:  # Redis down: the checkpoint waits; nothing newer is written first
                reraise_cancellation(exc)
                log.warning("checkpoint write failed; retrying", extra={"error": repr(exc)})
                await asyncio.sleep(delay)
                delay = min(5.0, delay * 2)

    async def drain(self) -> None:
        """Wait until everything handed to the commit stage is acknowledged and checkpointed."""
        await self._queue.join()

    async def stop_consuming_and_drain(self) -> None:
        """The first half of a graceful stop (a handoff): read no more of the watch, then wait
        until what was handed to JetStream is acknowledged and checkpointed. The caller then
        cancels ``run``, and the next owner resumes exactly where this one stopped."""
        if self._consumer is None or self._committer is None or self._committer.done():
            return  # not running (failed or never started): nothing will be committed
        self._consumer.cancel()
        await asyncio.wait([self._consumer])
        # Until the queue is empty, or the commit stage ended (it failed: it will commit nothing).
        joined = asyncio.ensure_future(self._queue.join())
        try:
            await asyncio.wait([joined, self._committer], return_when=asyncio.FIRST_COMPLETED)
        finally:
            joined.cancel()


def _records_changed(checkpoint: Mapping[str, JobRecord], records: Mapping[str, JobRecord]) -> StateWrite:
    """The checkpoint change that makes ``checkpoint`` hold ``records`` (set right by the stream)."""
    return StateWrite(
        put={uid: record for uid, record in records.items() if checkpoint.get(uid) is not record},
        delete={uid for uid in checkpoint if uid not in records},
    )


class _LabelledChildren:
    """A labelled counter's children by their last label, looked up once each (not per event)."""

    def __init__(self, counter: Counter, first_label: str) -> None:
        self._counter = counter
        self._first_label = first_label
        self._children: dict[str, Counter] = {}

    def child(self, label: str) -> Counter:
        child = self._children.get(label)
        if child is None:
            child = self._children[label] = self._counter.labels(self._first_label, label)
        return child


def _diagnosis_update(slot: transitions.Slot, status: NormalizedStatus) -> transitions.Emission:
    """The phase stayed, the diagnosis changed: the next sequence, the same (phase, sub_phase)."""
    sequence = slot.sequence + 1
    new_slot = transitions.Slot(
        slot.namespace, slot.name, sequence, slot.phase, slot.sub_phase, slot.terminal
    )
    return transitions.Emission("diagnosis", sequence, slot.phase, status, new_slot)


def _identity(obj: Any) -> tuple[str, str, str, dict[str, Any]]:
    """uid, namespace, name and metadata of a decoded object (JSON objects decode to dicts)."""
    if not isinstance(obj, dict):
        raise MalformedObject("watch event without an object")
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        raise MalformedObject("object has no metadata mapping")
    uid, namespace, name = metadata.get("uid"), metadata.get("namespace"), metadata.get("name")
    if not (
        isinstance(uid, str)
        and uid
        and isinstance(namespace, str)
        and namespace
        and isinstance(name, str)
        and name
    ):
        raise MalformedObject("metadata.uid, .namespace or .name missing")
    return uid, namespace, name, metadata


def _resource_version(metadata: Mapping[str, Any]) -> str | None:
    rv = metadata.get("resourceVersion")
    return rv if isinstance(rv, str) and rv else None
