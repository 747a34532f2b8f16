"""The overview's aggregates (/v1/stats/*) and the export (/v1/jobs/export), on PostgreSQL and SQLite."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from persister_factories import make_event
from test_api import Api
from test_api import api as api  # the fixture: re-exported, not redefined

from trainwatch_common import JobStatusEvent, Phase, ReplicaCounts
from trainwatch_persister.aggregates import bucket_starts


def at(hours_ago: float) -> datetime:
    return datetime.now(UTC).replace(minute=30, second=0, microsecond=0) - timedelta(hours=hours_ago)


def job(
    uid: str,
    phase: Phase,
    *,
    sequence: int = 1,
    cluster: str = "alpha",
    namespace: str = "team-a",
    created: datetime,
    started: datetime | None = None,
    finished: datetime | None = None,
    observed: datetime | None = None,
    reason: str | None = None,
    change: str | None = None,
    **extra: Any,
) -> JobStatusEvent:
    event = make_event(
        uid=uid, cluster=cluster, namespace=namespace, phase=phase, sequence=sequence, created_at=created,
        observed_at=observed or finished or started or created, change=change, **extra,
    )  # fmt: skip
    return event.model_copy(update={"started_at": started, "finished_at": finished, "reason": reason})


async def seed(api: Api) -> None:
    await api.write(
        # failed 2 h ago after 10 min in the queue and 20 min of running
        job("f1", Phase.FAILED, created=at(2.5), started=at(2.5) + timedelta(minutes=10),
            finished=at(2), reason="OOMKilled"),
        job("f2", Phase.FAILED, created=at(3), started=at(3) + timedelta(seconds=5),
            finished=at(2) + timedelta(minutes=5), reason="OOMKilled", cluster="beta"),
        job("f3", Phase.FAILED, created=at(6), started=at(6) + timedelta(seconds=20),
            finished=at(5), reason="BackoffLimitExceeded", namespace="team-b"),
        # failed long ago: outside the window
        job("f4", Phase.FAILED, created=at(50), started=at(50), finished=at(49), reason="Ancient"),
        # running since 30 h ago, never heard from since (a quiet long job)
        job("r1", Phase.RUNNING, created=at(30), started=at(30)),
        job("r2", Phase.RUNNING, created=at(1), started=at(1) + timedelta(seconds=40), namespace="team-b",
            cluster="beta"),
        job("s1", Phase.SUCCEEDED, created=at(4), started=at(4) + timedelta(minutes=2), finished=at(3)),
        job("p1", Phase.PENDING, sequence=0, created=at(0.2)),
    )  # fmt: skip
    # a running job deleted 10 h ago: it counted while it ran, not after
    await api.write(
        job("d1", Phase.RUNNING, created=at(12), started=at(12)),
        job(
            "d1", Phase.RUNNING, sequence=2, created=at(12), started=at(12), observed=at(10), change="deleted"
        ),
    )


def bucket_of(buckets: list[dict[str, Any]], moment: datetime) -> int:
    for bucket in buckets:
        start = datetime.fromisoformat(bucket["start"])
        if start <= moment < start + timedelta(hours=1):
            return int(bucket["count"])
    raise AssertionError(f"no bucket holds {moment}")


async def test_breakdown_counts_live_jobs_per_phase_cluster_and_namespace(api: Api) -> None:
    await seed(api)
    body = await api.get("/v1/stats/breakdown")
    assert body["total"] == 8  # d1 is deleted
    assert body["by_phase"] == {"Failed": 4, "Pending": 1, "Running": 2, "Succeeded": 1}
    assert body["by_cluster"] == {"alpha": 6, "beta": 2}
    assert body["by_namespace"][0] == {"cluster_id": "alpha", "namespace": "team-a", "count": 5}
    assert {(n["cluster_id"], n["namespace"], n["count"]) for n in body["by_namespace"]} == {
        ("alpha", "team-a", 5), ("alpha", "team-b", 1), ("beta", "team-a", 1), ("beta", "team-b", 1),
    }  # fmt: skip
    # the list's filters apply
    assert (await api.get("/v1/stats/breakdown", {"cluster": "beta"}))["by_phase"] == {
        "Failed": 1,
        "Running": 1,
    }
    assert (await api.get("/v1/stats/breakdown", {"deleted": "true"}))["total"] == 1


async def test_activity_counts_failures_per_hour_and_running_jobs(api: Api) -> None:
    await seed(api)
    body = await api.get("/v1/stats/activity", {"hours": 24})
    assert body["bucket_seconds"] == 3600
    assert len(body["failures"]) == 24
    assert len(body["running"]) == 24
    failures, running = body["failures"], body["running"]
    assert sum(b["count"] for b in failures) == 3  # f4 is too old
    assert bucket_of(failures, at(2)) == 2  # f1 at :30 and f2 at :35 of the same hour
    assert bucket_of(failures, at(5)) == 1
    assert bucket_of(failures, at(3)) == 0
    # r1 runs through every bucket (unheard of for 30 h); d1 from 11.5 h ago until deleted 9.5 h ago
    assert bucket_of(running, at(20)) == 1  # r1
    assert bucket_of(running, at(11)) == 2  # r1, d1
    assert bucket_of(running, at(8)) == 1  # r1: a deleted job stops counting
    assert bucket_of(running, at(2.5)) == 3  # r1, f1, f2 (s1 finished as the hour began)
    assert bucket_of(running, at(0)) == 2  # r1, r2
    by_cluster = await api.get("/v1/stats/activity", {"cluster": "beta"})
    assert sum(b["count"] for b in by_cluster["failures"]) == 1


async def test_durations_are_histograms_of_queue_wait_and_run_time(api: Api) -> None:
    await seed(api)
    body = await api.get("/v1/stats/durations", {"hours": 24})
    edges = body["queue_wait"]["edges_seconds"]
    assert len(body["queue_wait"]["counts"]) == len(edges) + 1

    def bucket(seconds: float) -> int:
        return next((i for i, edge in enumerate(edges) if seconds < edge), len(edges))

    wait, run = body["queue_wait"]["counts"], body["run_time"]["counts"]
    # started in the window: f1 (10 min), f2 (5 s), f3 (20 s), r2 (40 s), s1 (2 min), d1 (0 s)
    assert body["queue_wait"]["total"] == 6
    for seconds in (600, 5, 20, 40, 120, 0):
        assert wait[bucket(seconds)] >= 1
    # finished in the window: f1 (20 min), f2 (~55 min), f3 (~1 h), s1 (58 min)
    assert body["run_time"]["total"] == 4
    assert run[bucket(20 * 60)] == 1
    assert (await api.get("/v1/stats/durations", {"namespace": "team-b"}))["run_time"]["total"] == 1


async def test_top_failure_reasons(api: Api) -> None:
    await seed(api)
    body = await api.get("/v1/stats/failure-reasons", {"hours": 24})
    assert body["reasons"] == [
        {"reason": "OOMKilled", "count": 2},
        {"reason": "BackoffLimitExceeded", "count": 1},
    ]
    longer = (await api.get("/v1/stats/failure-reasons", {"hours": 72}))["reasons"]
    assert {"reason": "Ancient", "count": 1} in longer  # ties: by reason
    assert (await api.get("/v1/stats/failure-reasons", {"limit": 1}))["reasons"] == [
        {"reason": "OOMKilled", "count": 2}
    ]


async def test_stats_need_a_viewer_token_and_bounded_windows(api: Api) -> None:
    for path in (
        "/v1/stats/breakdown",
        "/v1/stats/activity",
        "/v1/stats/durations",
        "/v1/stats/failure-reasons",
    ):
        assert (await api.client.get(path)).status_code == 401
    await api.get("/v1/stats/activity", {"hours": 0}, status=422)
    await api.get("/v1/stats/activity", {"hours": 10_000}, status=422)
    await api.get("/v1/stats/breakdown", {"label": "not a label"}, status=422)


def test_buckets_are_whole_hours_ending_after_now() -> None:
    now = datetime(2026, 12, 1, 12, 35, tzinfo=UTC)
    starts = bucket_starts(now, hours=24, bucket_seconds=3600)
    assert len(starts) == 24
    assert starts[-1] == datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert starts[0] == datetime(2026, 11, 30, 13, 0, tzinfo=UTC)


async def test_export_streams_what_the_filter_matches_as_csv_and_json(api: Api) -> None:
    await seed(api)
    replicas = {
        "Worker": ReplicaCounts(desired=8, active=8, ready=7),
        "Master": ReplicaCounts(desired=1, ready=1),
    }
    await api.write(
        job("x1", Phase.RUNNING, created=at(1), started=at(1), reason="=cmd|' /C calc'!A0").model_copy(
            update={"replicas": replicas}
        )
    )
    response = await api.client.get(
        "/v1/jobs/export", params={"cluster": "alpha"}, headers={"Authorization": "Bearer viewer-token"}
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/csv")
    assert response.headers["x-total-count"] == "8"  # the deleted d1 too: no filter says otherwise
    assert 'filename="jobs.csv"' in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode("utf-8-sig"))))
    assert len(rows) == 8
    assert {r["cluster_id"] for r in rows} == {"alpha"}
    x1 = next(r for r in rows if r["uid"] == "x1")
    assert (x1["replicas_ready"], x1["replicas_desired"]) == ("8", "9")
    assert x1["reason"].startswith("'=")  # a spreadsheet shows it, never runs it
    as_json = await api.client.get(
        "/v1/jobs/export", params={"format": "json", "phase": "Failed", "limit": 2},
        headers={"Authorization": "Bearer viewer-token"},
    )  # fmt: skip
    assert as_json.headers["x-total-count"] == "4"
    assert as_json.headers["x-export-limit"] == "2"
    body = json.loads(as_json.content)
    assert len(body) == 2
    assert {j["phase"] for j in body} == {"Failed"}
    assert (await api.client.get("/v1/jobs/export")).status_code == 401
    await api.get("/v1/jobs/export", {"limit": 10_001}, status=422)


@pytest.mark.parametrize("rows", [1_234])
async def test_export_pages_through_more_rows_than_one_page(api: Api, rows: int) -> None:
    created = at(3)
    await api.write(*(job(f"m{i:05d}", Phase.RUNNING, created=created, started=created,
                          observed=created + timedelta(seconds=i)) for i in range(rows)))  # fmt: skip
    response = await api.client.get(
        "/v1/jobs/export", params={"format": "json"}, headers={"Authorization": "Bearer viewer-token"}
    )
    uids = [j["uid"] for j in json.loads(response.content)]
    assert len(uids) == rows == len(set(uids))
    assert uids[0] == f"m{rows - 1:05d}"  # newest change first
