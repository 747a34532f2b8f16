"""The published bytes of a job event are built without the pydantic models (``job_events``,
``envelope.job_event_json``); they must be exactly what the validated models would publish, and
schema-valid, for every kind of emission."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import jsonschema
import orjson
import pytest

from trainwatch_common.events.clusters import WatchOptions
from trainwatch_common.events.envelope import job_event_json, parse_job_event, wrap_job_event
from trainwatch_common.events.jobs import JobRef, JobStatusEvent, Phase, ReplicaCounts, SubPhase
from trainwatch_common.kinds import ALL_JOB_KINDS, PYTORCH_JOB
from trainwatch_common.schemas import json_schemas
from trainwatch_common.subjects import job_subject
from trainwatch_watcher import job_events, transitions
from trainwatch_watcher.informer_spec import InformerSpec
from trainwatch_watcher.kinds.model import NormalizedStatus

OPTIONS = WatchOptions(selected_labels=["team", "ünïcode/label"], owner_label="owner", owner_annotation="who")
OBSERVED = datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=UTC)
TEXTS = [None, "plain", "ünïcödé ✓ 作业 🚀", 'quotes " and \\ and \n newlines', "x" * 4096]
TIMES = [
    None,
    datetime(2026, 11, 29, 12, 0, tzinfo=UTC),
    datetime(2026, 11, 29, 12, 0, 0, 7, tzinfo=UTC),
    datetime(2026, 11, 29, 12, 0, 0, 120000, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
]


def spec(**overrides: Any) -> InformerSpec:
    values: dict[str, Any] = {
        "cluster_id": "gpu-a", "kind": PYTORCH_JOB, "namespace": None, "options": OPTIONS,
        "epoch": 3, "owner": "watcher-0",
    }  # fmt: skip
    values.update(overrides)
    return InformerSpec(**values)


def model_event(
    informer: InformerSpec,
    emission: transitions.Emission,
    obj: dict[str, Any] | None,
    resource_version: str,
    uid: str,
    observed_at: datetime,
) -> JobStatusEvent:
    """The event as the watcher built it before, field by field through the validated models."""
    slot, status = emission.slot, emission.status
    labels, owner = job_events.labels_and_owner((obj or {}).get("metadata") or {}, informer.options)
    return JobStatusEvent(
        event_id=JobStatusEvent.expected_event_id(informer.cluster_id, uid, emission.sequence),
        change=emission.change,
        sequence=emission.sequence,
        epoch=informer.epoch,
        watcher_id=informer.owner,
        job=JobRef(
            cluster_id=informer.cluster_id,
            api_version=informer.kind.api_version,
            kind=informer.kind.kind,
            kind_key=informer.kind.key,
            namespace=slot.namespace,
            name=slot.name,
            uid=uid,
            resource_version=resource_version,
        ),
        phase=slot.phase,
        sub_phase=slot.sub_phase,
        terminal=slot.terminal,
        previous_phase=emission.previous_phase,
        reason=status.reason,
        message=status.message,
        source=status.source,
        replicas=status.replicas,
        restart_count=status.restart_count,
        created_at=status.created_at,
        started_at=status.started_at,
        finished_at=status.finished_at,
        source_transition_time=status.source_transition_time,
        observed_at=observed_at,
        labels=labels,
        owner=owner,
        queue=status.queue,
    )


def published(
    informer: InformerSpec,
    emission: transitions.Emission,
    obj: dict[str, Any] | None,
    resource_version: str,
    uid: str,
    observed_at: datetime = OBSERVED,
) -> bytes:
    """The watcher's bytes, checked against the models: equal to the bytes of the event built
    through them, equal to the document validated and dumped, parsed back equal, schema-valid."""
    document = job_events.event_document(informer, emission, obj, resource_version, uid, observed_at)
    payload = job_event_json(document)
    event = model_event(informer, emission, obj, resource_version, uid, observed_at)
    assert payload == wrap_job_event(event).to_json()
    assert payload == wrap_job_event(JobStatusEvent.model_validate(document)).to_json()
    assert parse_job_event(payload) == event
    jsonschema.validate(orjson.loads(payload), json_schemas()["job-status-event.json"])
    return payload


def job_object(
    labels: dict[str, Any] | None = None, annotations: dict[str, Any] | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "train-ü", "namespace": "team-a", "uid": "u-1"}
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"metadata": metadata}


def test_a_transition_carries_identity_status_and_selected_labels() -> None:
    created = transitions.observe(
        None,
        NormalizedStatus(phase=Phase.PENDING, sub_phase=SubPhase.CREATED),
        namespace="team-a",
        name="train-ü",
    )
    assert created is not None
    running = NormalizedStatus(
        phase=Phase.RUNNING,
        reason="PyTorchJobRunning",
        message="PyTorchJob team-a/train-ü is running.",
        source="condition:Running",
        replicas={"Master": ReplicaCounts(desired=1, active=1), "Worker": ReplicaCounts(desired=2, failed=1)},
        restart_count=2,
        started_at=TIMES[1],
    )
    emission = transitions.observe(created.slot, running, namespace="team-a", name="train-ü")
    assert emission is not None
    obj = job_object(labels={"team": "ml", "owner": "alice", "other": "x"})
    event = parse_job_event(published(spec(), emission, obj, "42", "u-1"))
    assert event.event_id == "job.gpu-a.u-1.1"
    assert (event.change, event.sequence, event.epoch, event.watcher_id) == ("transition", 1, 3, "watcher-0")
    assert (event.phase, event.previous_phase, event.sub_phase) == (Phase.RUNNING, Phase.PENDING, None)
    assert event.job.model_dump() == {
        "cluster_id": "gpu-a", "api_version": "kubeflow.org/v1", "kind": "PyTorchJob",
        "kind_key": "pytorchjob", "namespace": "team-a", "name": "train-ü", "uid": "u-1",
        "resource_version": "42",
    }  # fmt: skip
    assert event.replicas == running.replicas
    assert (event.restart_count, event.started_at, event.observed_at) == (2, TIMES[1], OBSERVED)
    assert event.labels == {"team": "ml", "owner": "alice"}
    assert event.owner == "alice"
    assert job_events.subject_for(spec(), emission.slot) == job_subject(
        cluster_id="gpu-a", namespace="team-a", kind_key="pytorchjob", name="train-ü"
    )


def test_a_deletion_without_an_object_keeps_the_last_emitted_state() -> None:
    created = transitions.observe(
        None, NormalizedStatus(phase=Phase.SUCCEEDED, terminal=True), namespace="team-a", name="done"
    )
    assert created is not None
    gone = transitions.deleted(created.slot, None)
    assert gone is not None
    event = parse_job_event(published(spec(), gone, None, "", "u-2"))
    assert (event.change, event.phase, event.terminal, event.previous_phase) == (
        "deleted", Phase.SUCCEEDED, True, Phase.SUCCEEDED,
    )  # fmt: skip
    assert (event.labels, event.owner, event.reason, event.job.resource_version) == ({}, None, None, "")


def random_status(rng: random.Random) -> NormalizedStatus:
    phase = rng.choice(list(Phase))

    def counts() -> ReplicaCounts:
        def maybe() -> int | None:
            return rng.choice([None, 0, 1, 7])

        return ReplicaCounts(
            desired=maybe(),
            active=rng.randrange(4),
            ready=maybe(),
            succeeded=rng.randrange(3),
            failed=rng.randrange(3),
        )

    return NormalizedStatus(
        phase=phase,
        sub_phase=rng.choice([None, *SubPhase]),
        terminal=rng.random() < 0.3,
        reason=rng.choice(TEXTS),
        message=rng.choice(TEXTS),
        source=rng.choice([None, "condition:Running", "heuristic:status.failed"]),
        source_transition_time=rng.choice(TIMES),
        created_at=rng.choice(TIMES),
        started_at=rng.choice(TIMES),
        finished_at=rng.choice(TIMES),
        replicas={
            rng.choice(["Master", "Worker", "Launcher", "wörker"]): counts() for _ in range(rng.randrange(4))
        },
        restart_count=rng.randrange(5),
        queue=rng.choice([None, "default", "queue-ü"]),
    )


@pytest.mark.parametrize("seed", range(300))
def test_every_emission_publishes_the_bytes_of_the_validated_models(seed: int) -> None:
    rng = random.Random(seed)
    previous = None
    if rng.random() < 0.7:
        first = transitions.observe(None, random_status(rng), namespace="team-a", name="job-ü")
        assert first is not None
        previous = first.slot
    if previous is not None and rng.random() < 0.3:
        emission = transitions.deleted(previous, rng.choice([None, random_status(rng)]))
    else:
        emission = transitions.observe(previous, random_status(rng), namespace="team-a", name="job-ü")
    if emission is None:
        return  # the same (phase, sub_phase, terminal) again: nothing is published
    labels = rng.choice([None, {}, {"team": "ml", "owner": "bob", "ünïcode/label": "v-ü"}, {"team": 3}])
    annotations = rng.choice([None, {"who": "carol"}, {"who": ""}])
    obj = rng.choice([None, job_object(labels, annotations)])
    informer = spec(
        kind=rng.choice(ALL_JOB_KINDS),
        options=rng.choice([OPTIONS, WatchOptions()]),
        epoch=rng.randrange(3),
        owner=rng.choice(["watcher-0", "wätcher-ü"]),
    )
    observed = rng.choice([OBSERVED, datetime(2026, 11, 29, 12, 0, tzinfo=UTC)])
    rv = rng.choice(["", "12345"])
    published(informer, emission, obj, rv, "uid-ü-1", observed)
