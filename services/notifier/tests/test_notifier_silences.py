"""Silences (issue 18), end to end: real nats-server, Redis, SQLite/PostgreSQL, the Feishu sink.

A silenced event reaches no bot; its suppression is recorded (which silence, which event) before
the ack and listed by the API; expiring the silence restores notifications without re-sending
what it held; every replica honours a silence created through any of them, and a restart keeps it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest
from nats.js import JetStreamContext
from notifier_support import feishu_rules, make_event, publish, running, settings_for

from trainwatch_common import silence_links
from trainwatch_common.events.diagnosis import Blame, Diagnosis, DiagnosisCategory
from trainwatch_common.testing import eventually
from trainwatch_common.testing.servers import PostgresServer
from trainwatch_notifier.app import Notifier
from trainwatch_notifier.sink import FeishuSink

ADMIN = "admin-token-for-silence-tests-0123"
VIEWER = "viewer-token-for-silence-tests-0123"
LINK_SECRET = "silence-link-key-for-the-tests-0123"


@pytest.fixture(autouse=True)
def _tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWATCH_ADMIN_TOKENS", ADMIN)
    monkeypatch.setenv("TRAINWATCH_VIEWER_TOKENS", VIEWER)


async def all_acked(js: JetStreamContext) -> bool:
    info = await js.consumer_info("JOBS", "notifier")
    return info.num_ack_pending == 0 and info.num_pending == 0


def api(notifier: Notifier, token: str | None = ADMIN) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{notifier.health_port}", headers=headers)


async def silence(notifier: Notifier, matchers: dict[str, Any], *, seconds: int = 3600) -> dict[str, Any]:
    async with api(notifier) as http:
        response = await http.post(
            "/v1/silences",
            json={
                "matchers": matchers,
                "reason": "maintenance",
                "author": "ops",
                "duration_seconds": seconds,
            },
        )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def suppressions(notifier: Notifier, **params: str) -> list[dict[str, Any]]:
    async with api(notifier, VIEWER) as http:
        response = await http.get("/v1/suppressions", params=params)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def titles(sink: FeishuSink) -> list[str]:
    return [r.body["card"]["header"]["title"]["content"] for r in sink.received]


async def test_a_silenced_failure_sends_nothing_and_is_recorded_an_unmatched_job_still_notifies(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    rules = rules_path(feishu_rules(feishu_sink.url("ml")))
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))
    async with running(notifier):
        created = await silence(notifier, {"cluster": "alpha", "job": "train-1"})
        assert created["state"] == "active"
        assert created["author"] == "ops"
        assert len(created["created_by"]) == 12  # the token's short id, never the token
        silenced = make_event(name="train-1")
        await publish(js, silenced)
        await publish(js, make_event(name="train-2"))
        await eventually(lambda: all_acked(js), message="both events acked")
        await eventually(lambda: len(feishu_sink.received) == 1, message="the unmatched job's card")
        assert titles(feishu_sink) == ["❌ PyTorchJob team-a/train-2 Failed"]
        [record] = await suppressions(notifier)
        assert record["event_id"] == silenced.event_id
        assert record["silence_id"] == created["id"]
        assert record["channels"] == ["ml-feishu"]
        assert (record["name"], record["phase"]) == ("train-1", "Failed")
        # The suppressed event itself is kept, as received: nothing of it is lost.
        assert notifier.silences is not None
        kept = await notifier.silences.suppressed_event(silenced.event_id)
        assert kept is not None
        assert silenced.event_id in kept


async def test_matchers_namespace_kind_owner_label_and_diagnosis_category(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    rules = rules_path(feishu_rules(feishu_sink.url("ml")))
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))
    oom = Diagnosis(
        category=DiagnosisCategory.OOM_KILLED, blame=Blame.USER_CODE, summary="memory limit reached"
    )
    async with running(notifier):
        await silence(notifier, {"namespace": "quiet"})
        await silence(notifier, {"kind": "MPIJob"})
        await silence(notifier, {"owner": "bob"})
        await silence(notifier, {"labels": {"team": "vision", "tier": "dev"}})
        await silence(notifier, {"category": "OOMKilled"})
        silenced = [
            make_event(name="ns", namespace="quiet"),
            make_event(name="mpi", kind="MPIJob", kind_key="mpijob"),
            make_event(name="bobs", owner="bob"),
            make_event(name="labelled", labels={"team": "vision", "tier": "dev", "x": "y"}),
            make_event(name="oom").model_copy(update={"diagnosis": oom}),
        ]
        notified = [
            make_event(name="other-owner", owner="alice"),
            make_event(name="one-label", labels={"team": "vision"}),  # every pair must match
        ]
        for event in silenced + notified:
            await publish(js, event)
        await eventually(lambda: all_acked(js), message="all acked")
        await eventually(lambda: len(feishu_sink.received) == 2, message="the two unmatched jobs' cards")
        assert sorted(titles(feishu_sink)) == [
            "❌ PyTorchJob team-a/one-label Failed",
            "❌ PyTorchJob team-a/other-owner Failed",
        ]
        recorded = {r["event_id"] for r in await suppressions(notifier)}
        assert recorded == {event.event_id for event in silenced}


async def test_expiry_restores_notifications_and_resends_nothing_already_suppressed(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    rules = rules_path(feishu_rules(feishu_sink.url("ml")))
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))
    async with running(notifier):
        created = await silence(notifier, {"job": "uid-train-1"})  # by uid
        held = make_event(name="train-1", sequence=0)
        await publish(js, held)
        await eventually(lambda: all_acked(js), message="the silenced event acked")
        async with api(notifier) as http:
            expired = await http.post(f"/v1/silences/{created['id']}/expire")
            assert expired.status_code == 200
            assert expired.json()["state"] == "expired"
            assert expired.json()["expired_by"] == created["created_by"]
            listed = (await http.get("/v1/silences", params={"state": "expired"})).json()["items"]
        assert [s["id"] for s in listed] == [created["id"]]  # an expired silence stays listed
        # A copy of the suppressed event (a replay under another Msg-Id) is still not sent ...
        await publish(js, held, msg_id="replayed")
        # ... while the job's next event, after the expiry, is.
        await publish(js, make_event(name="train-1", sequence=1, reason="Again"))
        await eventually(lambda: len(feishu_sink.received) == 1, message="the next event's card")
        await eventually(lambda: all_acked(js), message="all acked")
        assert len(feishu_sink.received) == 1
        assert [r["event_id"] for r in await suppressions(notifier)] == [held.event_id]


async def test_two_replicas_honour_a_silence_created_through_either_and_a_restart_keeps_it(
    nats_url: str,
    redis_url: str,
    postgres_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    rules = rules_path(feishu_rules(feishu_sink.url("ml")))

    def replica(name: str) -> Notifier:
        return Notifier(
            settings_for(
                nats_url=nats_url,
                redis_url=redis_url,
                rules_file=rules,
                instance_id=name,
                notifier_database_url=postgres_url,
            )
        )

    a, b = replica("notifier-a"), replica("notifier-b")
    async with running(a), running(b):
        through_a = await silence(a, {"namespace": "ns-a"})
        through_b = await silence(b, {"namespace": "ns-b"})
        events = [
            make_event(name=f"{ns}-job-{i}", namespace=ns) for ns in ("ns-a", "ns-b") for i in range(10)
        ]
        for event in events:
            await publish(js, event)
        await eventually(lambda: all_acked(js), message="all acked")
        by_silence = {r["event_id"]: r["silence_id"] for r in await suppressions(b)}
        assert by_silence == {
            e.event_id: through_a["id"] if e.job.namespace == "ns-a" else through_b["id"] for e in events
        }
        async with running(replica("notifier-a2")) as restarted:
            # Each replica alone: b honours what a created, the restarted one what b created.
            async with api(restarted, VIEWER) as http:
                active = (await http.get("/v1/silences", params={"state": "active"})).json()["items"]
            assert {s["id"] for s in active} == {through_a["id"], through_b["id"]}
    async with running(replica("notifier-a3")) as alone:
        late = [make_event(name="late-a", namespace="ns-a"), make_event(name="late-b", namespace="ns-b")]
        for event in late:
            await publish(js, event)
        await publish(js, make_event(name="loud", namespace="ns-c"))
        await eventually(lambda: len(feishu_sink.received) == 1, message="the unsilenced job's card")
        await eventually(lambda: all_acked(js), message="all acked")
        recorded = {r["event_id"] for r in await suppressions(alone)}
        assert {e.event_id for e in late} <= recorded
    assert titles(feishu_sink) == ["❌ PyTorchJob ns-c/loud Failed"]


async def test_the_silence_api_needs_an_admin_to_change_and_a_viewer_to_read(
    nats_url: str, redis_url: str, feishu_sink: FeishuSink, rules_path: Callable[[str], Path]
) -> None:
    rules = rules_path(feishu_rules(feishu_sink.url("ml")))
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))
    body = {"matchers": {"job": "x"}, "reason": "r", "duration_seconds": 60}
    async with running(notifier):
        async with api(notifier, None) as anonymous:
            assert (await anonymous.post("/v1/silences", json=body)).status_code == 401
            assert (await anonymous.get("/v1/silences")).status_code == 401
            assert (await anonymous.get("/v1/suppressions")).status_code == 401
        async with api(notifier, VIEWER) as viewer:
            assert (await viewer.post("/v1/silences", json=body)).status_code == 403
            assert (await viewer.get("/v1/silences")).json() == {"items": []}
        async with api(notifier) as admin:
            # A silence that names nothing would mute everything: refused, nothing stored.
            empty = await admin.post("/v1/silences", json={**body, "matchers": {}})
            assert empty.status_code == 422
            assert "at least one" in empty.text
            unknown = await admin.post("/v1/silences", json={**body, "matchers": {"category": "Nope"}})
            assert unknown.status_code == 422
            created = (await admin.post("/v1/silences", json=body)).json()
            assert created["author"] == f"token:{created['created_by']}"  # no author given
            async with api(notifier, VIEWER) as viewer:
                expire = await viewer.post(f"/v1/silences/{created['id']}/expire")
                assert expire.status_code == 403
            assert (await admin.post("/v1/silences/nope/expire")).status_code == 404
            assert [s["id"] for s in (await admin.get("/v1/silences")).json()["items"]] == [created["id"]]


async def test_every_card_carries_a_signed_silence_link_for_its_job(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    rules = rules_path(feishu_rules(feishu_sink.url("ml")))
    settings = settings_for(
        nats_url=nats_url, redis_url=redis_url, rules_file=rules, silence_link_secret=LINK_SECRET
    )
    async with running(Notifier(settings)):
        await publish(js, make_event(name="train-1"))
        await eventually(lambda: len(feishu_sink.received) == 1, message="the card")
    buttons = [e for e in feishu_sink.received[0].body["card"]["body"]["elements"] if e["tag"] == "button"]
    assert [b["text"]["content"] for b in buttons] == ["Open in dashboard", "Silence this job for 1 h"]
    url = buttons[1]["behaviors"][0]["default_url"]
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == "https://dash.example.com/silences/new"
    job, _ = silence_links.verify(LINK_SECRET, dict(parse_qsl(parts.query)))
    assert job == silence_links.JobIdentity("alpha", "team-a", "pytorchjob", "train-1", "uid-train-1")


async def test_the_cli_creates_lists_and_expires_silences_and_lists_what_they_suppressed(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    from typer.testing import CliRunner

    from trainwatch_registry.cli import app as cli

    rules = rules_path(feishu_rules(feishu_sink.url("ml")))
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules))
    runner = CliRunner()

    async def trainwatch(*args: str, token: str = ADMIN) -> Any:
        env = {
            "TRAINWATCH_NOTIFIER_URL": f"http://127.0.0.1:{notifier.health_port}",
            "TRAINWATCH_API_TOKEN": token,
        }
        # In a thread: the CLI is synchronous and the notifier answers on this event loop.
        return await asyncio.to_thread(runner.invoke, cli, ["silences", *args], env=env)

    async with running(notifier):
        created = await trainwatch(
            "create", "--cluster", "alpha", "--label", "team=vision", "--for", "2h",
            "--reason", "upgrading drivers", "--author", "carol", "-o", "json",
        )  # fmt: skip
        assert created.exit_code == 0, created.output
        silence_id = json.loads(created.output)["id"]
        refused = await trainwatch("create", "--job", "x", "--for", "1h", "--reason", "r", token=VIEWER)
        assert refused.exit_code == 1
        assert "403" in refused.output
        await publish(js, make_event(name="vision-1", labels={"team": "vision"}))
        await eventually(lambda: all_acked(js), message="acked")
        listed = await trainwatch("list", "--state", "active", token=VIEWER)
        assert listed.exit_code == 0, listed.output
        assert silence_id in listed.output
        assert "carol" in listed.output
        assert "cluster=alpha team=vision" in listed.output
        suppressed = await trainwatch("suppressed", "--silence", silence_id, "-o", "json", token=VIEWER)
        assert [r["name"] for r in json.loads(suppressed.output)] == ["vision-1"]
        expired = await trainwatch("expire", silence_id)
        assert expired.exit_code == 0, expired.output
        assert "expired" in expired.output
        after = await trainwatch("list", "--state", "expired", "-o", "json", token=VIEWER)
        assert [s["id"] for s in json.loads(after.output)] == [silence_id]
    assert feishu_sink.received == []


def test_the_published_openapi_document_is_current() -> None:
    from trainwatch_notifier.openapi import PUBLISHED, render

    assert PUBLISHED.read_text() == render(), (
        "docs/openapi/notifier.json is stale: run `uv run python -m trainwatch_notifier.openapi`"
    )


async def test_while_the_database_is_down_events_wait_unacked_and_none_is_sent_or_lost(
    nats_url: str,
    redis_url: str,
    postgres_process: PostgresServer,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    rules = rules_path(feishu_rules(feishu_sink.url("ml")))
    settings = settings_for(
        nats_url=nats_url, redis_url=redis_url, rules_file=rules, notifier_database_url=postgres_process.url
    )
    notifier = Notifier(settings)
    async with running(notifier):
        await silence(notifier, {"job": "train-1"})
        postgres_process.kill()
        silenced, loud = make_event(name="train-1"), make_event(name="train-2")
        await publish(js, silenced)
        await publish(js, loud)

        async def held_unacked() -> bool:
            # The fetch loop waits for SQL as it waits for Redis, so the second may not be fetched.
            info = await js.consumer_info("JOBS", "notifier")
            return info.num_ack_pending >= 1 and info.num_ack_pending + info.num_pending == 2

        await eventually(held_unacked, message="the events fetched and held")
        async with httpx.AsyncClient() as http:
            ready = await http.get(f"http://127.0.0.1:{notifier.health_port}/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["sql"] != "ok"
        # Nobody can say whether an event is silenced: nothing goes out, nothing is acked.
        assert feishu_sink.received == []
        assert await held_unacked()
        postgres_process.start()
        await eventually(lambda: all_acked(js), timeout=60, message="both acked once the database is back")
        assert titles(feishu_sink) == ["❌ PyTorchJob team-a/train-2 Failed"]
        assert [r["event_id"] for r in await suppressions(notifier)] == [silenced.event_id]
