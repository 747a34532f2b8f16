"""The query API on real PostgreSQL and SQLite: auth, every filter, sorting, pagination, detail, stats."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from persister_factories import BASE_TIME, make_event, oom_diagnosis
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_common import JobStatusEvent, Phase
from trainwatch_common.auth import ApiTokens
from trainwatch_common.events.diagnosis import Blame, Diagnosis, DiagnosisCategory
from trainwatch_persister import repository
from trainwatch_persister.app import create_app
from trainwatch_persister.settings import PersisterSettings

VIEWER = {"Authorization": "Bearer viewer-token"}


class Api:
    def __init__(self, client: httpx.AsyncClient, engine: AsyncEngine) -> None:
        self.client = client
        self.engine = engine

    async def write(self, *events: JobStatusEvent) -> None:
        async with self.engine.begin() as conn:
            await repository.write_events(conn, list(events))

    async def get(self, path: str, params: Any = None, status: int = 200) -> Any:
        response = await self.client.get(path, params=params, headers=VIEWER)
        assert response.status_code == status, response.text
        return response.json()

    async def names(self, params: Any) -> list[str]:
        return sorted(job["name"] for job in (await self.get("/v1/jobs", params))["data"])


@pytest.fixture
async def api(database_url: str) -> AsyncIterator[Api]:
    settings = PersisterSettings(database_url=database_url, consume=False, retention_days=0)
    tokens = ApiTokens(
        admin_tokens=SecretStr("admin-token"),
        viewer_tokens=SecretStr("viewer-token"),
        watcher_tokens=SecretStr("watcher-token"),
    )
    app = create_app(settings, tokens=tokens)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://persister") as client:
            yield Api(client, app.state.engine)


def job_events(
    uid: str, *, cluster: str, namespace: str, kind: str, name: str, phases: list[Phase], **extra: Any
) -> list[JobStatusEvent]:
    created = extra.pop("created_at", BASE_TIME)
    return [
        make_event(
            uid=uid, cluster=cluster, namespace=namespace, kind_key=kind, name=name, phase=phase,
            sequence=seq, created_at=created, observed_at=created + timedelta(minutes=10 * seq), **extra,
        )
        for seq, phase in enumerate(phases)
    ]  # fmt: skip


async def seed_four_jobs(api: Api) -> None:
    await api.write(
        *job_events("u1", cluster="alpha", namespace="team-a", kind="pytorchjob", name="resnet-train",
                    phases=[Phase.PENDING, Phase.RUNNING], owner="alice",
                    labels={"team": "vision", "tier": "gpu"},
                    created_at=BASE_TIME),
        *job_events("u2", cluster="alpha", namespace="team-b", kind="mpijob", name="bert_finetune",
                    phases=[Phase.PENDING, Phase.RUNNING, Phase.SUCCEEDED], owner="bob",
                    labels={"team": "nlp"},
                    created_at=BASE_TIME + timedelta(hours=1)),
        *job_events("u3", cluster="beta", namespace="team-a", kind="job", name="ResNet-eval",
                    phases=[Phase.PENDING, Phase.FAILED], owner="alice",
                    labels={"team": "vision", "app.kubernetes.io/name": "eval"},
                    created_at=BASE_TIME + timedelta(hours=2)),
        *job_events("u4", cluster="beta", namespace="team-c", kind="pytorchjob", name="llama",
                    phases=[Phase.PENDING], created_at=BASE_TIME + timedelta(hours=3)),
    )  # fmt: skip
    await api.write(make_event(uid="u4", cluster="beta", namespace="team-c", name="llama", sequence=1,
                               change="deleted", observed_at=BASE_TIME + timedelta(hours=4),
                               created_at=BASE_TIME + timedelta(hours=3)))  # fmt: skip


async def test_reading_needs_a_viewer_or_admin_token(api: Api) -> None:
    assert (await api.client.get("/v1/jobs")).status_code == 401
    bad = await api.client.get("/v1/jobs", headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401
    assert bad.headers["www-authenticate"] == "Bearer"
    assert (
        await api.client.get("/v1/stats", headers={"Authorization": "Bearer watcher-token"})
    ).status_code == 403
    admin = await api.client.get("/v1/jobs", headers={"Authorization": "Bearer admin-token"})
    assert admin.status_code == 200
    assert "viewer-token" not in admin.text
    assert (await api.client.get("/healthz")).status_code == 200  # probes need no token
    assert (await api.client.get("/readyz")).json()["ready"] is True
    assert b"trainwatch_persister_events_total" in (await api.client.get("/metrics")).content


FILTER_CASES: list[tuple[dict[str, Any], list[str]]] = [
        ({}, ["ResNet-eval", "bert_finetune", "llama", "resnet-train"]),
        ({"cluster": "alpha"}, ["bert_finetune", "resnet-train"]),
        ({"cluster": ["alpha", "beta"]}, ["ResNet-eval", "bert_finetune", "llama", "resnet-train"]),
        ({"namespace": "team-a"}, ["ResNet-eval", "resnet-train"]),
        ({"kind": "pytorchjob"}, ["llama", "resnet-train"]),
        ({"kind": ["mpijob", "job"]}, ["ResNet-eval", "bert_finetune"]),
        ({"phase": "Running"}, ["resnet-train"]),
        ({"phase": ["Failed", "Succeeded"]}, ["ResNet-eval", "bert_finetune"]),
        ({"terminal": "true"}, ["ResNet-eval", "bert_finetune"]),
        ({"terminal": "false"}, ["llama", "resnet-train"]),
        ({"deleted": "true"}, ["llama"]),
        ({"deleted": "false"}, ["ResNet-eval", "bert_finetune", "resnet-train"]),
        ({"owner": "alice"}, ["ResNet-eval", "resnet-train"]),
        ({"label": "team=vision"}, ["ResNet-eval", "resnet-train"]),
        ({"label": ["team=vision", "tier=gpu"]}, ["resnet-train"]),
        ({"label": "app.kubernetes.io/name=eval"}, ["ResNet-eval"]),
        ({"label": "team=nobody"}, []),
        ({"name": "resnet"}, ["ResNet-eval", "resnet-train"]),  # substring, case-insensitive
        ({"name": "_"}, ["bert_finetune"]),  # LIKE wildcards are literal
        ({"name": "%"}, []),
        ({"created_after": "2026-11-01T13:00:00Z"}, ["ResNet-eval", "bert_finetune", "llama"]),
        ({"created_before": "2026-11-01T13:00:00Z"}, ["resnet-train"]),
        ({"created_after": "2026-11-01T13:00:00+00:00", "created_before": "2026-11-01T15:00:00"},
         ["ResNet-eval", "bert_finetune"]),
        ({"updated_after": "2026-11-01T14:00:00Z"}, ["ResNet-eval", "llama"]),
        ({"updated_before": "2026-11-01T12:30:00Z"}, ["resnet-train"]),
        ({"cluster": "alpha", "phase": "Succeeded", "owner": "bob", "label": "team=nlp"}, ["bert_finetune"]),
]  # fmt: skip


async def test_every_filter(api: Api) -> None:
    await seed_four_jobs(api)
    for params, expected in FILTER_CASES:
        assert await api.names(params) == expected, params
        assert (await api.get("/v1/jobs", params))["total"] == len(expected), params


async def test_sorting(api: Api) -> None:
    await seed_four_jobs(api)

    async def order(params: dict[str, str]) -> list[str]:
        return [job["name"] for job in (await api.get("/v1/jobs", params))["data"]]

    assert await order({}) == ["llama", "ResNet-eval", "bert_finetune", "resnet-train"]  # updated_at desc
    assert await order({"sort": "created_at"}) == ["llama", "ResNet-eval", "bert_finetune", "resnet-train"]
    assert await order({"sort": "created_at", "order": "asc"}) == [
        "resnet-train", "bert_finetune", "ResNet-eval", "llama",
    ]  # fmt: skip
    assert await order({"sort": "name"}) == ["ResNet-eval", "bert_finetune", "llama", "resnet-train"]
    # A created_at range with the updated_at order takes the sort-after-filtering path: same order.
    assert await order({"created_after": "2026-11-01T12:30:00Z"}) == ["llama", "ResNet-eval", "bert_finetune"]
    assert await order({"updated_before": "2026-11-01T23:00:00Z", "sort": "name", "order": "desc"}) == [
        "resnet-train", "llama", "bert_finetune", "ResNet-eval",
    ]  # fmt: skip
    assert await order({"sort": "name", "order": "desc"}) == [
        "resnet-train",
        "llama",
        "bert_finetune",
        "ResNet-eval",
    ]


async def test_bad_requests_change_nothing_and_say_why(api: Api) -> None:
    await seed_four_jobs(api)
    assert "label" in (await api.get("/v1/jobs", {"label": "no-equals-sign"}, status=422))["detail"]
    await api.get("/v1/jobs", {"limit": 501}, status=422)
    await api.get("/v1/jobs", {"phase": "Sleeping"}, status=422)
    await api.get("/v1/jobs", {"cursor": "!!not-a-cursor"}, status=400)
    page = await api.get("/v1/jobs", {"limit": 1})
    other_filters = {"limit": 1, "cursor": page["next_cursor"], "cluster": "alpha"}
    assert "start again" in (await api.get("/v1/jobs", other_filters, status=400))["detail"]
    await api.get("/v1/jobs", {"limit": 1, "cursor": page["next_cursor"], "sort": "name"}, status=400)


SORTS = [
    {"sort": "updated_at"},
    {"sort": "created_at", "order": "asc"},
    {"sort": "name"},
    {"sort": "name", "order": "desc"},
]


@pytest.mark.parametrize("sort", SORTS)
async def test_paging_while_rows_arrive_skips_and_repeats_nothing(api: Api, sort: dict[str, str]) -> None:
    rng = random.Random(7)
    # Many jobs share timestamps, so the (cluster, uid) tie-breaker matters.
    originals = [
        make_event(uid=f"o{i:03d}", cluster=rng.choice(["alpha", "beta"]),
                   name=f"job-{rng.randrange(40):02d}",
                   created_at=BASE_TIME + timedelta(minutes=rng.randrange(20)),
                   observed_at=BASE_TIME + timedelta(minutes=rng.randrange(20)))
        for i in range(90)
    ]  # fmt: skip
    await api.write(*originals)
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params = {**sort, "limit": 7, **({"cursor": cursor} if cursor else {})}
        page = await api.get("/v1/jobs", params)
        seen.extend(job["uid"] for job in page["data"])
        pages += 1
        # Between pages, new jobs arrive all over the order (times and names before and after the cursor).
        await api.write(
            *(make_event(uid=f"n{pages:02d}{k}", name=f"job-{rng.randrange(40):02d}",
                         created_at=BASE_TIME + timedelta(minutes=rng.randrange(-5, 30)),
                         observed_at=BASE_TIME + timedelta(minutes=rng.randrange(-5, 30)))
              for k in range(3))
        )  # fmt: skip
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)), "a row was repeated"
    assert {e.job.uid for e in originals} <= set(seen), "a row was skipped"
    assert page["total"] == 90 + 3 * pages - 3  # the count in the last response is current


async def test_one_job_with_its_history(api: Api) -> None:
    await seed_four_jobs(api)
    await api.write(make_event(uid="u2", cluster="alpha", sequence=1, epoch=0, event_id="late-dup"))  # stale
    detail = await api.get("/v1/jobs/alpha/u2")
    assert (detail["name"], detail["phase"], detail["terminal"]) == ("bert_finetune", "Succeeded", True)
    assert [(t["sequence"], t["epoch"], t["phase"]) for t in detail["transitions"]] == [
        (0, 1, "Pending"), (1, 0, "Pending"), (1, 1, "Running"), (2, 1, "Succeeded"),
    ]  # fmt: skip
    assert detail["transitions"][0]["event"]["job"]["uid"] == "u2"
    assert detail["labels"] == {"team": "nlp"}
    gone = await api.get("/v1/jobs/beta/u4")
    assert gone["deleted_at"] == "2026-11-01T16:00:00Z"
    assert "nope" in (await api.get("/v1/jobs/beta/nope", status=404))["detail"]


async def test_stats_count_live_jobs_per_cluster_and_phase(api: Api) -> None:
    await seed_four_jobs(api)
    stats = await api.get("/v1/stats")
    assert stats["total"] == 3
    assert stats["deleted"] == 1
    assert stats["by_cluster"] == {"alpha": 2, "beta": 1}
    assert stats["by_phase"] == {"Failed": 1, "Running": 1, "Succeeded": 1}
    assert {(c["cluster_id"], c["phase"], c["count"]) for c in stats["by_cluster_phase"]} == {
        ("alpha", "Running", 1), ("alpha", "Succeeded", 1), ("beta", "Failed", 1),
    }  # fmt: skip


async def seed_diagnosed_jobs(api: Api) -> None:
    """u1 OOMKilled, u3 QuotaExceeded then cleared, u5 Unschedulable, u6 ImagePullFailed."""
    infra = {"blame": Blame.INFRASTRUCTURE}
    quota = oom_diagnosis(category=DiagnosisCategory.QUOTA_EXCEEDED, summary="quota", **infra)
    no_gpus = oom_diagnosis(category=DiagnosisCategory.UNSCHEDULABLE, summary="no GPUs", **infra)
    bad_tag = oom_diagnosis(category=DiagnosisCategory.IMAGE_PULL_FAILED, summary="no such tag")
    await seed_four_jobs(api)
    await api.write(
        make_event(uid="u1", cluster="alpha", name="resnet-train", sequence=2, phase=Phase.RESTARTING,
                   diagnosis=oom_diagnosis(), observed_at=BASE_TIME + timedelta(hours=5)),
        make_event(uid="u3", cluster="beta", name="ResNet-eval", sequence=2, phase=Phase.FAILED,
                   change="diagnosis", previous_phase=Phase.FAILED,
                   diagnosis=quota),
        make_event(uid="u3", cluster="beta", name="ResNet-eval", sequence=3, phase=Phase.FAILED,
                   change="diagnosis", previous_phase=Phase.FAILED, diagnosis=None),
        make_event(uid="u5", cluster="beta", name="gpt-pretrain", sequence=0,
                   diagnosis=no_gpus),
        make_event(uid="u6", cluster="alpha", name="vit-sweep", sequence=0,
                   diagnosis=bad_tag),
    )  # fmt: skip


DIAGNOSIS_FILTER_CASES: list[tuple[dict[str, Any], list[str]]] = [
    ({"diagnosis": "OOMKilled"}, ["resnet-train"]),
    ({"diagnosis": ["Unschedulable", "ImagePullFailed"]}, ["gpt-pretrain", "vit-sweep"]),
    ({"diagnosis": "QuotaExceeded"}, []),  # cleared by a later diagnosis update
    ({"blame": "infrastructure"}, ["gpt-pretrain"]),
    ({"blame": ["user_config", "user_code"]}, ["resnet-train", "vit-sweep"]),
    ({"diagnosis": "ImagePullFailed", "cluster": "alpha", "blame": "user_config"}, ["vit-sweep"]),
    ({"diagnosis": "OOMKilled", "phase": "Running"}, []),
]


async def test_filter_by_diagnosis_category_and_blame(api: Api) -> None:
    await seed_diagnosed_jobs(api)
    for params, expected in DIAGNOSIS_FILTER_CASES:
        assert await api.names(params) == expected, params
        assert (await api.get("/v1/jobs", params))["total"] == len(expected), params
    # Paging a category filter: the cursor is bound to it.
    page = await api.get("/v1/jobs", {"diagnosis": ["OOMKilled", "ImagePullFailed"], "limit": 1})
    assert page["next_cursor"]
    assert page["total"] == 2
    rest = await api.get(
        "/v1/jobs", {"diagnosis": ["OOMKilled", "ImagePullFailed"], "cursor": page["next_cursor"]}
    )
    assert {j["name"] for j in page["data"] + rest["data"]} == {"resnet-train", "vit-sweep"}
    await api.get("/v1/jobs", {"diagnosis": "OOMKilled", "cursor": page["next_cursor"]}, status=400)
    # A category outside the vocabulary, or a blame, is refused with the reason.
    assert "diagnosis" in str((await api.get("/v1/jobs", {"diagnosis": "Sleepy"}, status=422))["detail"])
    await api.get("/v1/jobs", {"blame": "the-intern"}, status=422)


async def test_the_job_detail_carries_the_diagnosis_and_its_history(api: Api) -> None:
    await seed_diagnosed_jobs(api)
    oom = await api.get("/v1/jobs/alpha/u1")
    assert oom["diagnosis"]["category"] == "OOMKilled"
    assert Diagnosis.model_validate(oom["diagnosis"]) == oom_diagnosis()
    assert [t["diagnosis"] and t["diagnosis"]["category"] for t in oom["transitions"]] == [
        None,
        None,
        "OOMKilled",
    ]
    assert [(h["sequence"], h["diagnosis"]["category"]) for h in oom["diagnosis_history"]] == [
        (2, "OOMKilled")
    ]

    cleared = await api.get("/v1/jobs/beta/u3")
    assert (cleared["phase"], cleared["diagnosis"]) == ("Failed", None)
    steps = [(h["sequence"], h["change"], h["diagnosis"] and h["diagnosis"]["category"])
             for h in cleared["diagnosis_history"]]  # fmt: skip
    assert steps == [(2, "diagnosis", "QuotaExceeded"), (3, "diagnosis", None)]
    listed = {j["name"]: j for j in (await api.get("/v1/jobs"))["data"]}
    assert listed["gpt-pretrain"]["diagnosis"]["summary"] == "no GPUs"
    assert listed["llama"]["diagnosis"] is None
    assert listed["llama"]["gpus"] is None


async def test_breakdown_counts_jobs_per_current_diagnosis_category(api: Api) -> None:
    """The overview's per-category counts: the current diagnosis only (u3's QuotaExceeded was
    cleared), most jobs first, under the same filters as the list."""
    await seed_diagnosed_jobs(api)
    body = await api.get("/v1/stats/breakdown")
    assert body["by_diagnosis"] == {"ImagePullFailed": 1, "OOMKilled": 1, "Unschedulable": 1}
    assert list(body["by_diagnosis"]) == ["ImagePullFailed", "OOMKilled", "Unschedulable"]
    assert (await api.get("/v1/stats/breakdown", {"cluster": "alpha"}))["by_diagnosis"] == {
        "ImagePullFailed": 1,
        "OOMKilled": 1,
    }
    assert (await api.get("/v1/stats/breakdown", {"blame": "infrastructure"}))["by_diagnosis"] == {
        "Unschedulable": 1
    }
