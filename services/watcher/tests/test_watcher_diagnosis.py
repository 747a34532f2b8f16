"""Diagnosis end to end: kubesim drives jobs into every category; the watcher's published events
carry the diagnosis kubesim's ground truth names (issue 16 items 1, 3 and 7)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping

import orjson
import pytest
from nats.aio.client import Client as NatsClient
from redis.asyncio import Redis
from watcher_harness import (
    FakeRegistry,
    HealthEvents,
    JobEvents,
    RunningWatcher,
    make_settings,
    truth_by_uid,
    wait_for_truth,
)

import kubesim
from trainwatch_common.events.diagnosis import DiagnosisCategory
from trainwatch_common.events.envelope import wrap_job_event
from trainwatch_common.events.jobs import JobStatusEvent
from trainwatch_common.subjects import job_subject
from trainwatch_common.testing import eventually
from trainwatch_watcher.history import StreamHistory

CLUSTER_OPTIONS = {"kueue": True, "volcano_podgroups": True, "coscheduling": True}
# The fields of a diagnosis the truth names (None in the truth: the diagnosis must say none either).
COMPARED = ("category", "role", "pod", "container", "exit_code", "signal", "node", "resource", "queue")


# Where the watcher's engine and kubesim's truth knowingly differ (see the watcher README,
# "Diagnosis evidence"); everything else of the truth must match.
#   pod-level categories: the engine names the pod, not a container (the truth names its main one);
POD_LEVEL = {"Preempted", "Evicted", "NodeFailure", "Unschedulable", "GangWaiting", "QuotaExceeded"}
#   BackoffLimitExceeded: the engine reports the root cause (the truth's ``cause``, or CrashLoop for
#   Kubeflow's in-place restarts) with the backoff limit in its summary, from the first failed pod.


def _categories() -> list[str]:
    return list(kubesim.CATEGORIES)


def _got(event: JobStatusEvent | None) -> dict[str, object]:
    diagnosis = event.diagnosis if event is not None else None
    if diagnosis is None:
        return {"category": None}
    got = {name: getattr(diagnosis, name) for name in COMPARED}
    got["category"] = diagnosis.category.value
    # kubesim names roles as the API's replica types ("Worker"); the watcher reads pod labels,
    # which the operators write in lower case ("worker").
    got["role"] = diagnosis.role.lower() if diagnosis.role else None
    return got


def _want(truth: kubesim.DiagnosisTruth, got: dict[str, object]) -> dict[str, object]:
    """What of the truth the diagnosis must equal (the known differences above left out)."""
    want = {name: getattr(truth, name) for name in COMPARED}
    want["role"] = truth.role.lower() if truth.role else None
    category = truth.category
    if category in POD_LEVEL:
        del want["container"]
    if category == "GangWaiting" and truth.queue is None:
        del want["queue"]  # the engine names the Volcano PodGroup's queue ("default")
    if category == "BackoffLimitExceeded":
        want = {
            "category": got.get("category")
            if got.get("category") in (truth.cause, "CrashLoop")
            else truth.cause
        }
    return want


def _by_uid(job_events: JobEvents, cluster: str) -> dict[str, list[JobStatusEvent]]:
    out: dict[str, list[JobStatusEvent]] = defaultdict(list)
    for event in job_events.of_cluster(cluster):
        out[event.job.uid].append(event)
    return out


async def _wait_diagnoses(
    job_events: JobEvents, truths: list[kubesim.DiagnosisTruth], cluster: str, timeout: float = 20.0
) -> None:
    def mismatches() -> list[str]:
        by_uid = _by_uid(job_events, cluster)
        out = []
        for truth in truths:
            events = sorted(by_uid.get(truth.uid, []), key=lambda e: e.sequence)
            got = _got(events[-1] if events else None)
            want = _want(truth, got)
            diff = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
            if diff or not events:
                history = [(e.change, e.diagnosis.category.value if e.diagnosis else None) for e in events]
                out.append(f"{truth.kind} {truth.name}: (got, truth) {diff}; events {history}")
        return out

    try:
        await eventually(lambda: not mismatches(), timeout=timeout, message="diagnoses equal the truth")
    except AssertionError:
        raise AssertionError("diagnoses differ from the truth:\n" + "\n".join(mismatches())) from None


@pytest.mark.parametrize("category", _categories())
async def test_every_kind_of_a_category_is_diagnosed_as_the_truth(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
    category: str,
) -> None:
    cluster = await sim.add_cluster("diag", seed=1, **CLUSTER_OPTIONS)
    await registry.add(cluster)
    await watcher.start()
    await watcher.wait_synced("diag", informers=len(cluster.kinds))

    driver = kubesim.ScenarioDriver(cluster, seed=1, rate=None)
    cases = [(kind, c) for kind, c in kubesim.diagnosis_cases(cluster) if c == category]
    assert cases, f"kubesim runs no {category} scenario"
    truths = [await driver.run_diagnosis(kind, c) for kind, c in cases]

    await _wait_diagnoses(job_events, truths, "diag")
    by_uid = _by_uid(job_events, "diag")
    for truth in truths:
        events = sorted(by_uid[truth.uid], key=lambda e: e.sequence)
        assert [e.sequence for e in events] == list(range(len(events))), f"{truth.name}: sequence gap"
        assert all(e.event_id == f"job.diag.{truth.uid}.{e.sequence}" for e in events)
        for event in events:
            if event.change == "diagnosis":
                assert event.previous_phase == event.phase, f"{truth.name}: a diagnosis update changed phase"
        last = events[-1]
        if category == "QueueWaiting":
            # From Kueue's visibility API. Not the truth's: later jobs of the same second may sort
            # ahead (creation time, then name), so positions move as the scenarios go on.
            assert last.diagnosis is not None
            assert last.diagnosis.position is not None, f"{truth.name}: no queue position"
        assert last.resources is not None, f"{truth.name}: no resources"
        assert last.resources.pods > 0, f"{truth.name}: no pods in its resources"
        assert last.queue_wait_seconds is not None, f"{truth.name}: no queue wait"


async def test_a_pending_jobs_new_reason_is_a_diagnosis_update_emitted_once_across_a_restart(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
) -> None:
    cluster = await sim.add_cluster("queue", seed=2, **CLUSTER_OPTIONS)
    await registry.add(cluster)
    await watcher.start()
    await watcher.wait_synced("queue", informers=len(cluster.kinds))
    driver = kubesim.ScenarioDriver(cluster, seed=2, rate=None)

    # Quota -> admitted, its pods not ready: the reason moves while the job stays Pending.
    queued = await driver.run_diagnosis("PyTorchJob", "QueueWaiting")
    await _wait_diagnoses(job_events, [queued], "queue")
    kubesim.kueue.admit(cluster.store, queued.namespace, str(queued.extra["workload"]), "team-gpu")

    def admitted() -> list[JobStatusEvent]:
        events = sorted(_by_uid(job_events, "queue")[queued.uid], key=lambda e: e.sequence)
        last = events[-1]
        if last.change == "diagnosis" and last.diagnosis and last.diagnosis.category.value != "QueueWaiting":
            return events
        return []

    events = await eventually(admitted, message="a diagnosis update after the admission")
    assert (events[-1].phase.value, events[-1].previous_phase) == ("Pending", events[-1].phase)
    assert events[-1].diagnosis is not None
    assert events[-1].diagnosis.category.value == "GangWaiting"  # Kueue: admitted, pods not ready

    # kubesim's variant: queued, admitted, then one pod no node can take. (Its Workload is admitted
    # the moment it is created, so the queue wait may collapse, as the contract allows.)
    truth = await driver.run_diagnosis("PyTorchJob", "Unschedulable", variant="after-queue")
    await _wait_diagnoses(job_events, [truth], "queue")
    later = sorted(_by_uid(job_events, "queue")[truth.uid], key=lambda e: e.sequence)
    # The reason may come as a diagnosis update or ride on the sub-phase change, whichever of
    # the two the watcher publishes after it saw the pod: either way the job stays Pending.
    assert later[-1].change in ("diagnosis", "transition")
    assert (later[-1].phase.value, later[-1].previous_phase) == ("Pending", later[-1].phase)
    assert [e.sequence for e in later] == list(range(len(later)))

    before = {uid: [(e.sequence, e.change) for e in evs] for uid, evs in _by_uid(job_events, "queue").items()}
    # Abruptly: whatever was checkpointed is all the next start knows of what it emitted.
    await watcher.kill()
    await watcher.start()
    await watcher.wait_synced("queue", informers=len(cluster.kinds))
    # A marker job after the restart: once its events are in, the restart's relist is done too.
    marker = await driver.run_diagnosis("JAXJob", "OOMKilled")
    await _wait_diagnoses(job_events, [marker], "queue")
    after = {uid: [(e.sequence, e.change) for e in evs] for uid, evs in _by_uid(job_events, "queue").items()}
    del after[marker.uid]
    assert after == before, "the restart emitted a diagnosis again"


async def test_a_queued_jobs_position_is_refreshed_when_the_workload_ahead_is_admitted(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
) -> None:
    """Positions move without the job's own Workload changing (the one ahead got quota): the
    visibility API is asked again when any Workload moves, and reaching the head is news."""
    cluster = await sim.add_cluster("positions", seed=4, **CLUSTER_OPTIONS)
    await registry.add(cluster)
    await watcher.start()
    await watcher.wait_synced("positions", informers=len(cluster.kinds))
    driver = kubesim.ScenarioDriver(cluster, seed=4, rate=None)
    queued = [await driver.run_diagnosis("PyTorchJob", "QueueWaiting") for _ in range(2)]

    def positions() -> dict[str, int | None]:
        by_uid = _by_uid(job_events, "positions")
        out: dict[str, int | None] = {}
        for truth in queued:
            events = sorted(by_uid.get(truth.uid, []), key=lambda e: e.sequence)
            diagnosis = events[-1].diagnosis if events else None
            out[truth.uid] = diagnosis.position if diagnosis is not None else None
        return out

    # Both in the same LocalQueue: one at its head (0), the other behind it (1).
    await eventually(lambda: sorted(positions().values(), key=str) == [0, 1], message="positions 0 and 1")
    ahead = next(t for t in queued if positions()[t.uid] == 0)
    behind = next(t for t in queued if t is not ahead)
    kubesim.kueue.admit(cluster.store, ahead.namespace, str(ahead.extra["workload"]), "team-gpu")

    await eventually(lambda: positions()[behind.uid] == 0, message="the job behind reaches the head")
    events = sorted(_by_uid(job_events, "positions")[behind.uid], key=lambda e: e.sequence)
    assert (events[-1].change, events[-1].phase.value) == ("diagnosis", "Pending")
    assert events[-1].diagnosis is not None
    assert events[-1].diagnosis.category.value == "QueueWaiting"
    assert [e.sequence for e in events] == list(range(len(events)))


async def test_a_cluster_that_may_not_read_pods_still_watches_every_job_and_says_why_no_diagnosis(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
    health_events: HealthEvents,
) -> None:
    cluster = await sim.add_cluster("locked", seed=3, forbidden=("pods",))
    await registry.add(cluster)
    await watcher.start()
    await watcher.wait_synced("locked", informers=len(cluster.kinds))

    driver = kubesim.ScenarioDriver(cluster, seed=3, rate=None)
    for kind in cluster.kinds:
        await driver.run_lifecycle(kind, outcome="failed", restarts=1, suspend=False, delete=True)
    await wait_for_truth(job_events, truth_by_uid(driver.truth), cluster_id="locked", timeout=20)

    def says_why() -> bool:
        last = health_events.last("locked")
        return last is not None and last.diagnosis_error == "diagnosis unavailable: forbidden to list pods"

    await eventually(says_why, message="health says diagnosis is unavailable")
    last = health_events.last("locked")
    assert last is not None
    assert (last.reachable, last.last_error) == (True, None)
    assert all(k.state == "watching" for k in last.kinds.values() if k.state != "not_installed")


async def test_log_tails_when_enabled_carry_the_failing_containers_last_lines_redacted(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    nats_url: str,
    redis_url: str,
    job_events: JobEvents,
) -> None:
    cluster = await sim.add_cluster("logs", seed=4)
    await registry.add(cluster)
    watcher = RunningWatcher(make_settings(nats_url, redis_url, diagnosis_log_tails=True), registry)
    await watcher.start()
    try:
        await watcher.wait_synced("logs", informers=len(cluster.kinds))
        driver = kubesim.ScenarioDriver(cluster, seed=4, rate=None)
        truths = [
            await driver.run_diagnosis("PyTorchJob", "ExitCode"),
            await driver.run_diagnosis("Job", "CrashLoop"),
        ]
        await _wait_diagnoses(job_events, truths, "logs")

        def tails() -> dict[str, list[JobStatusEvent]]:
            by_uid = _by_uid(job_events, "logs")
            found = {
                t.uid: [e for e in by_uid[t.uid] if e.diagnosis and e.diagnosis.log_tail] for t in truths
            }
            return found if all(found.values()) else {}

        found = await eventually(tails, message="log tails on the diagnoses")
        for truth in truths:
            assert len(found[truth.uid]) == 1, f"{truth.name}: the tail went out more than once"
            tail = found[truth.uid][0].diagnosis.log_tail  # type: ignore[union-attr]
            assert tail is not None
            assert (tail.container, tail.previous) == (truth.container, truth.previous_log)
            assert tail.lines[-1] == truth.log_tail[-1]
            if truth.log_secret:
                assert tail.redacted
                assert all(truth.log_secret not in line for line in tail.lines)
    finally:
        await watcher.stop()


async def test_diagnosis_disabled_opens_no_evidence_watch_and_puts_no_diagnosis_on_events(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    nats_url: str,
    redis_url: str,
    job_events: JobEvents,
) -> None:
    cluster = await sim.add_cluster("plain", seed=5, **CLUSTER_OPTIONS)
    await registry.add(cluster)
    watcher = RunningWatcher(make_settings(nats_url, redis_url, diagnosis_enabled=False), registry)
    await watcher.start()
    try:
        await watcher.wait_synced("plain", informers=len(cluster.kinds))
        assert watcher.worker("plain").evidence is None
        driver = kubesim.ScenarioDriver(cluster, seed=5, rate=None)
        await driver.run_diagnosis("PyTorchJob", "OOMKilled")
        await wait_for_truth(job_events, truth_by_uid(driver.truth), cluster_id="plain", timeout=20)
    finally:
        await watcher.stop()
    evidence = ("/api/v1/pods", "/api/v1/events", "/apis/events.k8s.io/", "/workloads", "/podgroups")
    asked = [path for _, path, _ in cluster.requests if any(e in path for e in evidence)]
    assert asked == [], f"evidence read with diagnosis disabled: {asked[:5]}"
    assert [e for e in job_events.of_cluster("plain") if e.diagnosis is not None] == []


@pytest.mark.parametrize("restart", ["none", "graceful", "checkpoint-lost"])
@pytest.mark.parametrize("kind", ["JobSet", "TrainJob", "MPIJob", "Job"])
async def test_a_warning_event_that_arrives_after_its_job_was_seen_still_diagnoses_the_job(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
    redis: Redis,
    kind: str,
    restart: str,
) -> None:
    """The chaos run's QuotaExceeded JobSet (seed 31): its job-controller Event, written on a child
    Job (a JobSet's or TrainJob's ``<name>-<replicatedJob>-<i>``, an MPIJob's launcher), reached the
    evidence cache only after the job's first event went out. Here the watcher may not read Events
    until then. With a restart, the watcher that saw the job stops first and the next one resumes
    (from its checkpoint, or with the checkpoint lost, from the JOBS stream's last events, as the
    chaos run's informer did after a HistoryDiverged), so no event of the job comes again: it must
    still link the job it knows only from there to the evidence that arrives."""
    cluster = await sim.add_cluster("late", seed=6)
    cluster.forbid("events")
    await registry.add(cluster)
    await watcher.start()
    await watcher.wait_synced("late", informers=len(cluster.kinds))
    driver = kubesim.ScenarioDriver(cluster, seed=6, rate=None)
    truth = await driver.run_diagnosis(kind, "QuotaExceeded")
    assert truth.category == "QuotaExceeded"

    def seen_without_the_event() -> list[JobStatusEvent]:
        return _by_uid(job_events, "late").get(truth.uid, [])

    seen = await eventually(seen_without_the_event, message=f"the {kind}'s first event")
    assert all(e.diagnosis is None or e.diagnosis.category.value != "QuotaExceeded" for e in seen)
    if restart != "none":
        await watcher.stop()  # gracefully: the next start resumes from the checkpoint
    if restart == "checkpoint-lost":
        await redis.flushall()
    cluster.allow("events")
    if restart != "none":
        await watcher.start()
        await watcher.wait_synced("late", informers=len(cluster.kinds))
    await _wait_diagnoses(job_events, [truth], "late")
    events = sorted(_by_uid(job_events, "late")[truth.uid], key=lambda e: e.sequence)
    assert [e.sequence for e in events] == list(range(len(events)))
    assert events[-1].change == "diagnosis"
    assert events[-1].previous_phase == events[-1].phase


@pytest.mark.parametrize("code", [500, 429])
async def test_a_failed_link_list_of_a_resumed_informer_is_retried_and_the_late_evidence_still_diagnoses(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
    code: int,
) -> None:
    """A resumed informer lists its kind once at the resume's resourceVersion to link the jobs of
    its checkpoint to their evidence. When that LIST failed, the jobs stayed unlinked: the Event
    that arrives later woke nobody, and the job (which does not change again) was never diagnosed.
    Only that LIST fails here, three times; the resume's watch and everything else go through."""
    cluster = await sim.add_cluster("relink", seed=6)
    cluster.forbid("events")
    await registry.add(cluster)
    await watcher.start()
    await watcher.wait_synced("relink", informers=len(cluster.kinds))
    driver = kubesim.ScenarioDriver(cluster, seed=6, rate=None)
    truth = await driver.run_diagnosis("JobSet", "QuotaExceeded")
    assert truth.category == "QuotaExceeded"
    seen = await eventually(
        lambda: _by_uid(job_events, "relink").get(truth.uid, []), message="the JobSet's first event"
    )
    assert all(e.diagnosis is None or e.diagnosis.category.value != "QuotaExceeded" for e in seen)
    await watcher.stop()  # gracefully: the next start resumes from the checkpoint

    def link_list(method: str, path: str, query: Mapping[str, str]) -> bool:
        # The link LIST, not the companion's (a fieldSelector) nor the watch's progress check.
        return (
            path.endswith(f"/{kubesim.JOBSET.plural}")
            and query.get("resourceVersionMatch") == "Exact"
            and "fieldSelector" not in query
        )

    cluster.faults.error_responses(code, count=3, only=link_list)
    cluster.allow("events")
    await watcher.start()
    await watcher.wait_synced("relink", informers=len(cluster.kinds))
    assert cluster.faults.errors_left() == 0, "the link LIST was not made (or not failed) three times"
    await _wait_diagnoses(job_events, [truth], "relink")
    events = sorted(_by_uid(job_events, "relink")[truth.uid], key=lambda e: e.sequence)
    assert [e.sequence for e in events] == list(range(len(events)))
    assert (events[-1].change, events[-1].previous_phase) == ("diagnosis", events[-1].phase)


async def test_a_link_list_whose_continue_token_expired_relists_and_the_late_evidence_still_diagnoses(
    sim: kubesim.Simulator, registry: FakeRegistry, watcher: RunningWatcher, job_events: JobEvents
) -> None:
    """The link LIST of a resumed informer pages (limit/continue). When etcd compacts between two
    pages, the next page is refused 410 Expired: the resume's resourceVersion is gone too, so the
    watch that follows is refused the same way and the informer relists, which links every job.
    Nothing may be left unlinked: the Event that arrives later still diagnoses the job."""
    cluster = await sim.add_cluster("relink-expired", seed=6)
    cluster.forbid("events")
    await registry.add(cluster)
    watcher.settings = watcher.settings.model_copy(update={"list_page_size": 1})
    await watcher.start()
    await watcher.wait_synced("relink-expired", informers=len(cluster.kinds))
    driver = kubesim.ScenarioDriver(cluster, seed=6, rate=None)
    truths = [await driver.run_diagnosis("JobSet", "QuotaExceeded") for _ in range(2)]
    assert [t.category for t in truths] == ["QuotaExceeded", "QuotaExceeded"]
    await eventually(
        lambda: all(_by_uid(job_events, "relink-expired").get(t.uid) for t in truths),
        message="both JobSets' first events",
    )
    await watcher.stop()  # gracefully: the next start resumes from the checkpoint

    compacted: list[int] = []

    def compact_before_the_second_link_page(method: str, path: str, query: Mapping[str, str]) -> bool:
        # Not an injected answer: etcd compacts just before the link LIST's second page (its
        # first page was read at the resume's version), and kubesim's own LIST answers 410.
        if path.endswith(f"/{kubesim.JOBSET.plural}") and "continue" in query and not compacted:
            compacted.append(cluster.compact())
        return False

    cluster.faults.error_responses(500, only=compact_before_the_second_link_page)
    cluster.allow("events")
    await watcher.start()
    await watcher.wait_synced("relink-expired", informers=len(cluster.kinds))
    assert compacted, "the link LIST never asked for a second page"
    await _wait_diagnoses(job_events, truths, "relink-expired")
    for truth in truths:
        events = sorted(_by_uid(job_events, "relink-expired")[truth.uid], key=lambda e: e.sequence)
        assert [e.sequence for e in events] == list(range(len(events)))
        assert (events[-1].change, events[-1].previous_phase) == ("diagnosis", events[-1].phase)


class _EarlierSendStored(StreamHistory):
    """The real stream history. Once a restarted informer of ``kind_key`` has read the stream,
    ``forge`` stores the first send of the event it is about to publish: the one its previous
    run sent, stored, before it died unacknowledged, computed from evidence that moved since."""

    def __init__(self, nc: NatsClient, kind_key: str, forge: Callable[[], Awaitable[None]]) -> None:
        super().__init__(nc)
        self._kind_key = kind_key
        self._forge = forge

    async def last_sequence(self, cluster_id: str, kind_key: str, namespace: str | None) -> int:
        last = await super().last_sequence(cluster_id, kind_key, namespace)
        if kind_key == self._kind_key:
            await self._forge()
        return last


async def test_a_resend_whose_stored_copy_has_another_diagnosis_is_followed_by_the_new_one(
    sim: kubesim.Simulator,
    registry: FakeRegistry,
    watcher: RunningWatcher,
    job_events: JobEvents,
    nc: NatsClient,
) -> None:
    """A diagnosis update's id is the job's (uid, sequence), like every event's. The stream held
    our next id already, with another diagnosis (the first send, before a crash lost its
    acknowledgement and the evidence moved): JetStream dropped our copy as a duplicate, the
    watcher took it for the same event and recorded its own diagnosis as emitted, so consumers
    kept the stale one for good. Now the stored diagnosis is what counts as emitted, and the
    current one follows as a diagnosis update under the next sequence."""
    cluster = await sim.add_cluster("resend", seed=2, **CLUSTER_OPTIONS)
    await registry.add(cluster)
    await watcher.start()
    await watcher.wait_synced("resend", informers=len(cluster.kinds))
    driver = kubesim.ScenarioDriver(cluster, seed=2, rate=None)
    queued = await driver.run_diagnosis("PyTorchJob", "QueueWaiting")
    await _wait_diagnoses(job_events, [queued], "resend")
    await watcher.stop()  # the checkpoint holds the QueueWaiting event as the last one emitted
    last = sorted(_by_uid(job_events, "resend")[queued.uid], key=lambda e: e.sequence)[-1]
    stale = last.diagnosis
    assert stale is not None
    assert stale.category.value == "QueueWaiting"
    # Admitted while nobody watched: the next start finds the job waiting for its gang instead.
    kubesim.kueue.admit(cluster.store, queued.namespace, str(queued.extra["workload"]), "team-gpu")

    forged: list[JobStatusEvent] = []

    async def store_the_earlier_send() -> None:
        if forged:
            return
        sequence = last.sequence + 1
        earlier = last.model_copy(
            update={
                "change": "diagnosis",
                "sequence": sequence,
                "event_id": JobStatusEvent.expected_event_id("resend", queued.uid, sequence),
                "previous_phase": last.phase,
                "diagnosis": stale.model_copy(
                    update={"category": DiagnosisCategory.QUOTA_EXCEEDED, "position": None}
                ),
            }
        )
        envelope = orjson.dumps(wrap_job_event(earlier).model_dump(mode="json", exclude_none=True))
        subject = job_subject(
            cluster_id="resend", namespace=last.job.namespace, kind_key=last.job.kind_key, name=last.job.name
        )
        await nc.jetstream().publish(subject, envelope, headers={"Nats-Msg-Id": earlier.event_id})
        forged.append(earlier)

    await watcher.start(
        history_factory=lambda client: _EarlierSendStored(client, last.job.kind_key, store_the_earlier_send)
    )
    await watcher.wait_synced("resend", informers=len(cluster.kinds))

    def categories() -> list[tuple[int, str, str | None]]:
        events = sorted(_by_uid(job_events, "resend")[queued.uid], key=lambda e: e.sequence)
        return [(e.sequence, e.change, e.diagnosis.category.value if e.diagnosis else None) for e in events]

    await eventually(
        lambda: categories()[-1][2] == "GangWaiting",
        message="the current diagnosis after the stored one",
        timeout=20,
    )
    assert forged, "the earlier send was stored"
    history = categories()
    assert [s for s, _, _ in history] == list(range(len(history)))
    assert history[-2:] == [
        (last.sequence + 1, "diagnosis", "QuotaExceeded"),  # the stored first send
        (last.sequence + 2, "diagnosis", "GangWaiting"),  # what the job's evidence says now
    ]
