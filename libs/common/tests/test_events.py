from datetime import UTC, datetime

import jsonschema
import orjson
import pytest
from pydantic import ValidationError

import trainwatch_common
from trainwatch_common import (
    ClusterConnection,
    ClusterEvent,
    ClusterHealth,
    ClusterSpec,
    WatchOptions,
    cluster_event_id,
    job_event_id,
    parse_cluster_event,
    parse_job_event,
    wrap_cluster_event,
    wrap_cluster_health,
    wrap_job_event,
)
from trainwatch_common.schemas import json_schemas

from .test_contracts_jetstream import make_event

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_exports_are_pinned_and_sorted() -> None:
    exported = trainwatch_common.__all__
    assert exported == sorted(exported, key=lambda n: (not n.isupper(), n[0].islower(), n))
    for name in exported:
        assert getattr(trainwatch_common, name) is not None


def test_event_ids_are_deterministic() -> None:
    assert job_event_id("c1", "u-1", 4) == job_event_id("c1", "u-1", 4) == "job.c1.u-1.4"
    assert job_event_id("c1", "u-1", 4) != job_event_id("c1", "u-1", 5)
    assert cluster_event_id("c1", 7) == "cluster.c1.7"
    with pytest.raises(ValueError, match="sequence"):
        job_event_id("c1", "u-1", -1)


def test_job_event_cloudevent_round_trip_and_schema() -> None:
    event = make_event(name="with.dot", sequence=2)
    payload = wrap_job_event(event).to_json()
    envelope = orjson.loads(payload)
    assert envelope["specversion"] == "1.0"
    assert envelope["id"] == event.event_id
    assert envelope["type"] == "io.trainwatch.job.status.v1"
    assert envelope["source"] == "/trainwatch/clusters/alpha"
    jsonschema.validate(envelope, json_schemas()["job-status-event.json"])
    assert parse_job_event(payload) == event


def test_schema_rejects_a_wrong_phase() -> None:
    envelope = orjson.loads(wrap_job_event(make_event()).to_json())
    envelope["data"]["phase"] = "Exploded"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(envelope, json_schemas()["job-status-event.json"])
    with pytest.raises(ValidationError):
        parse_job_event(orjson.dumps(envelope))


def spec(**overrides: object) -> ClusterSpec:
    values: dict[str, object] = {
        "id": "gpu-a", "name": "GPU A", "revision": 3, "connection_fingerprint": "sha256:abc",
        "watch": WatchOptions(include_namespaces=["team-a"], kinds=["pytorchjob"], owner_label="owner"),
    }  # fmt: skip
    values.update(overrides)
    return ClusterSpec.model_validate(values)


def test_cluster_events_round_trip_and_validate() -> None:
    event = ClusterEvent(type="updated", cluster=spec(), connection_changed=False, occurred_at=NOW)
    payload = wrap_cluster_event(event, event_id=cluster_event_id("gpu-a", 3)).to_json()
    jsonschema.validate(orjson.loads(payload), json_schemas()["cluster-event.json"])
    assert parse_cluster_event(payload) == event
    assert b"kubeconfig" not in payload

    health = ClusterHealth(
        cluster_id="gpu-a", reachable=True, kinds_served=["job"], owner="w-1", observed_at=NOW
    )
    envelope = orjson.loads(wrap_cluster_health(health, event_id="h1").to_json())
    jsonschema.validate(envelope, json_schemas()["cluster-health.json"])


@pytest.mark.parametrize("bad_id", ["", "UPPER", "-lead", "trail-", "has.dot", "x" * 64])
def test_cluster_ids_are_slugs(bad_id: str) -> None:
    with pytest.raises(ValidationError, match="slug"):
        spec(id=bad_id)


def test_watch_options_refuse_unknown_kinds_and_filter() -> None:
    with pytest.raises(ValidationError, match="unknown job kinds"):
        WatchOptions(kinds=["pytorchjob", "sparkjob"])
    options = WatchOptions(include_namespaces=["a", "b"], exclude_namespaces=["b"], kinds=["job"])
    assert options.watches_namespace("a")
    assert not options.watches_namespace("b")
    assert not options.watches_namespace("c")
    assert options.watches_kind("job")
    assert not options.watches_kind("rayjob")
    assert WatchOptions().watches_kind("rayjob")


def test_connection_never_shows_its_secret() -> None:
    connection = ClusterConnection(
        cluster_id="gpu-a", revision=1, connection_fingerprint="sha256:abc", kubeconfig="token: s3cr3t"
    )
    assert "s3cr3t" not in repr(connection)
    assert "s3cr3t" not in str(connection)
    assert "s3cr3t" not in f"{connection}"
