"""Silences and dead letters through the dashboard (issue 18): the card's signed link, confirmed
by a signed-in admin, silences the job; a dead letter is listed and replayed once its channel is
fixed; the pages escape what clusters send.

All real: nats-server, Redis, the notifier (in-process, on a real port, SQLite), the registry
(in-process over ASGI, SQLite, which checks the sign-ins) and the dashboard (over ASGI).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx
import nats
import pytest
from nats.js import JetStreamContext
from pydantic import SecretStr

from trainwatch_common import JobRef, JobStatusEvent, Phase, job_event_id, silence_links
from trainwatch_common.auth import ApiTokens, token_id
from trainwatch_common.testing import eventually
from trainwatch_common.testing.events import publish_job_event
from trainwatch_dashboard.app import create_app as create_dashboard
from trainwatch_dashboard.settings import DashboardSettings
from trainwatch_notifier.app import Notifier
from trainwatch_notifier.settings import NotifierSettings
from trainwatch_notifier.sink import FeishuSink
from trainwatch_registry.app import create_app as create_registry
from trainwatch_registry.crypto import Encryptor
from trainwatch_registry.settings import RegistrySettings

ADMIN = "silence-e2e-admin-token-0123456"
VIEWER = "silence-e2e-viewer-token-012345"
SECRET = "silence-e2e-link-secret-0123456"
NASTY = "<img src=x onerror=alert(1)>"


def event(name: str, sequence: int = 0, *, uid: str | None = None) -> JobStatusEvent:
    uid = uid or f"uid-{name}"
    return JobStatusEvent(
        event_id=job_event_id("alpha", uid, sequence),
        change="transition",
        sequence=sequence,
        epoch=1,
        job=JobRef(
            cluster_id="alpha", api_version="kubeflow.org/v1", kind="PyTorchJob", kind_key="pytorchjob",
            namespace="team-a", name=name, uid=uid, resource_version="1",
        ),
        phase=Phase.FAILED,
        terminal=True,
        reason="BackoffLimitExceeded",
        observed_at="2026-12-01T12:00:00Z",
    )  # fmt: skip


class Split(httpx.AsyncBaseTransport):
    """The dashboard's backends: the in-process registry by its name, the rest over the network."""

    def __init__(self, registry: httpx.AsyncBaseTransport) -> None:
        self._registry = registry
        self._network = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host == "registry":
            return await self._registry.handle_async_request(request)
        return await self._network.handle_async_request(request)

    async def aclose(self) -> None:
        await self._network.aclose()


@pytest.fixture
async def js(nats_url: str) -> AsyncIterator[JetStreamContext]:
    client = await nats.connect(nats_url)
    yield client.jetstream()
    await client.close()


@pytest.fixture
async def feishu_sink() -> AsyncIterator[FeishuSink]:
    sink = FeishuSink(secret="demo")
    await sink.start()
    yield sink
    await sink.stop()


@pytest.fixture
async def stack(
    nats_url: str,
    redis_url: str,
    tmp_path: Path,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[dict[str, Any]]:
    import asyncio

    monkeypatch.setenv("TRAINWATCH_ADMIN_TOKENS", ADMIN)
    monkeypatch.setenv("TRAINWATCH_VIEWER_TOKENS", VIEWER)
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        f"channels:\n  ml:\n    type: feishu\n    url: {feishu_sink.url('ml')}\n    secret: demo\n"
        "rules:\n  - name: all\n    channels: [ml]\n"
    )
    notifier = Notifier(
        NotifierSettings(
            nats_url=nats_url,
            redis_url=redis_url,
            rules_file=rules,
            http_port=0,
            dashboard_url="http://localhost",
            notifier_database_url=f"sqlite+aiosqlite:///{tmp_path / 'notifier.db'}",
            silence_link_secret=SecretStr(SECRET),
            instance_id="e2e-notifier",
        )
    )
    stop = asyncio.Event()
    task = asyncio.create_task(notifier.run(stop), name="e2e-notifier")
    await asyncio.wait_for(notifier.ready.wait(), 20)
    registry = create_registry(
        RegistrySettings(
            registry_database_url=f"sqlite+aiosqlite:///{tmp_path / 'registry.db'}",
            nats_url=nats_url,
            redis_url=redis_url,
            registry_encryption_keys=SecretStr(Encryptor.generate_key()),
        ),
        tokens=ApiTokens(admin_tokens=SecretStr(ADMIN), viewer_tokens=SecretStr(VIEWER)),
    )
    split = Split(httpx.ASGITransport(app=registry))
    dashboard = create_dashboard(
        DashboardSettings(
            nats_url=nats_url,
            registry_url="http://registry",
            notifier_url=f"http://127.0.0.1:{notifier.health_port}",
            dashboard_api_token=SecretStr(VIEWER),
            silence_link_secret=SecretStr(SECRET),
        ),
        transport=split,
    )
    try:
        async with registry.router.lifespan_context(registry), dashboard.router.lifespan_context(dashboard):
            browser = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=dashboard), base_url="http://localhost"
            )
            notifier_api = httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{notifier.health_port}",
                headers={"Authorization": f"Bearer {ADMIN}"},
            )
            async with browser, notifier_api:
                yield {
                    "browser": browser, "api": notifier_api, "sink": feishu_sink, "js": js, "rules": rules,
                    "notifier": notifier,
                }  # fmt: skip
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
        await split.aclose()


def card_silence_link(sink: FeishuSink, index: int) -> str:
    elements = sink.received[index].body["card"]["body"]["elements"]
    [link] = [e["behaviors"][0]["default_url"] for e in elements if e["tag"] == "button"][1:]
    return str(link)


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


async def sign_in(browser: httpx.AsyncClient, token: str) -> None:
    response = await browser.post("/admin/signin", content=urlencode({"token": token, "next": "/silences"}))
    assert response.status_code == 303
    assert response.headers["location"] == "/silences"


async def test_a_cards_link_silences_its_job_after_a_signed_in_admin_confirms(stack: dict[str, Any]) -> None:
    browser, api, sink, js = stack["browser"], stack["api"], stack["sink"], stack["js"]
    await publish_job_event(js, event("train-1"))
    await eventually(lambda: len(sink.received) == 1, message="the first card")
    link = path_of(card_silence_link(sink, 0))

    page = await browser.get(link)  # opening the link changes nothing ...
    assert page.status_code == 200
    assert "team-a/train-1" in page.text
    assert 'id="silence-confirm"' in page.text
    assert (await api.get("/v1/silences")).json()["items"] == []
    fields = dict(parse_qsl(urlsplit(link).query))
    form = urlencode({**fields, "reason": "known flaky"})

    # ... confirming needs a sign-in, and a post from our own pages.
    anonymous = await browser.post("/silences/new", content=form)
    assert anonymous.status_code == 303
    assert anonymous.headers["location"].startswith("/admin/signin?next=/silences/new%3F")
    await sign_in(browser, ADMIN)
    forged = await browser.post("/silences/new", content=form, headers={"Origin": "https://evil.example"})
    assert forged.status_code == 403
    assert (await api.get("/v1/silences")).json()["items"] == []

    confirmed = await browser.post("/silences/new", content=form)
    assert confirmed.status_code == 303
    [silence] = (await api.get("/v1/silences")).json()["items"]
    assert confirmed.headers["location"] == f"/silences?created={silence['id']}"
    assert silence["matchers"]["cluster"] == "alpha"
    assert silence["matchers"]["job"] == "uid-train-1"
    assert silence["author"] == f"token:{token_id(ADMIN)}"  # the signed-in user, not the page's say
    assert silence["reason"] == "known flaky"

    # The job's next failure is held back and listed; another job still notifies.
    await publish_job_event(js, event("train-1", sequence=1))
    await publish_job_event(js, event("train-2"))
    await eventually(lambda: len(sink.received) == 2, message="the other job's card")
    listed = await browser.get("/silences")
    assert listed.status_code == 200
    assert silence["id"] in listed.text
    assert job_event_id("alpha", "uid-train-1", 1) in listed.text


async def test_a_tampered_or_expired_link_is_refused(stack: dict[str, Any]) -> None:
    browser, api, sink, js = stack["browser"], stack["api"], stack["sink"], stack["js"]
    await publish_job_event(js, event("train-1"))
    await eventually(lambda: len(sink.received) == 1, message="the card")
    fields = dict(parse_qsl(urlsplit(card_silence_link(sink, 0)).query))
    await sign_in(browser, ADMIN)
    job = silence_links.JobIdentity("alpha", "team-a", "pytorchjob", "train-1", "uid-train-1")
    expired = silence_links.sign(SECRET, job, expires=int(time.time()) - 1)
    other_key = silence_links.sign("another-secret-of-another-setup", job, expires=int(time.time()) + 600)
    for bad in (
        {**fields, "uid": "uid-someone-else"},
        {**fields, "expires": str(int(fields["expires"]) + 3600)},
        expired,
        other_key,
        {k: v for k, v in fields.items() if k != "sig"},
    ):
        page = await browser.get(f"/silences/new?{urlencode(bad)}")
        assert page.status_code == 403, bad
        assert 'id="silence-confirm"' not in page.text  # no form to confirm
        posted = await browser.post("/silences/new", content=urlencode(bad))
        assert posted.status_code == 403, bad
    assert "expired" in (await browser.get(f"/silences/new?{urlencode(expired)}")).text
    assert (await api.get("/v1/silences")).json()["items"] == []


async def test_a_viewer_may_look_but_not_silence(stack: dict[str, Any]) -> None:
    browser, api, sink, js = stack["browser"], stack["api"], stack["sink"], stack["js"]
    await publish_job_event(js, event("train-1"))
    await eventually(lambda: len(sink.received) == 1, message="the card")
    fields = dict(parse_qsl(urlsplit(card_silence_link(sink, 0)).query))
    await sign_in(browser, VIEWER)
    refused = await browser.post("/silences/new", content=urlencode(fields))
    assert refused.status_code == 303
    assert "admin" in (await browser.get(refused.headers["location"])).text
    assert (await api.get("/v1/silences")).json()["items"] == []
    assert (await browser.get("/silences")).status_code == 200


async def test_silence_pages_escape_text_from_clusters_and_users(stack: dict[str, Any]) -> None:
    browser, api, js = stack["browser"], stack["api"], stack["js"]
    created = await api.post(
        "/v1/silences",
        json={
            "matchers": {"job": f"{NASTY}"},
            "reason": "<script>alert(2)</script>",
            "duration_seconds": 600,
        },
    )
    assert created.status_code == 201
    # A job name no Kubernetes would allow, as a broken or hostile cluster could still send it.
    await publish_job_event(js, event(NASTY, uid="uid-nasty"))

    async def suppressed() -> bool:
        return len((await api.get("/v1/suppressions")).json()["items"]) == 1

    await eventually(suppressed, message="the nasty job's event suppressed")
    await sign_in(browser, VIEWER)
    page = (await browser.get("/silences")).text
    assert NASTY not in page
    assert "<script>alert(2)" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page
    # The link page shows the job's identity from the (signed) link escaped too.
    job = silence_links.JobIdentity("alpha", "team-a", "pytorchjob", NASTY, "uid-nasty")
    link = silence_links.sign(SECRET, job, expires=int(time.time()) + 600)
    confirm = (await browser.get(f"/silences/new?{urlencode(link)}")).text
    assert NASTY not in confirm
    assert "&lt;img src=x onerror=alert(1)&gt;" in confirm


def rules_for(sink: FeishuSink, secret: str) -> str:
    return (
        f"channels:\n  ml:\n    type: feishu\n    url: {sink.url('ml')}\n    secret: {secret}\n"
        "    digest: {enabled: false}\nrules:\n  - name: all\n    channels: [ml]\n"
    )


async def test_a_dead_letter_is_listed_escaped_and_replayed_by_an_admin_once_the_channel_is_fixed(
    stack: dict[str, Any],
) -> None:
    """Issue 18 item 6: the dashboard shows the dead letters; only an admin replays one."""
    browser, api, sink, js, rules = stack["browser"], stack["api"], stack["sink"], stack["js"], stack["rules"]
    rules.write_text(rules_for(sink, "a-wrong-secret-for-the-bot"))

    async def reloaded() -> bool:
        await publish_job_event(js, event("probe", uid=f"uid-probe-{time.monotonic_ns()}"))
        letters = (await api.get("/v1/dead-letters")).json()["items"]
        return any(letter["reason"] == "feishu-bad-signature" for letter in letters)

    await eventually(reloaded, timeout=15, message="the wrong secret loaded and refused")
    await publish_job_event(js, event(NASTY, uid="uid-nasty"))

    async def nasty_letter() -> dict[str, Any] | None:
        letters = (await api.get("/v1/dead-letters")).json()["items"]
        return next((d for d in letters if d["job"] and d["job"]["uid"] == "uid-nasty"), None)

    letter = await eventually(nasty_letter, message="the nasty job's notification dead-lettered")
    seq = letter["seq"]
    await sign_in(browser, VIEWER)
    page = (await browser.get("/dead-letters")).text
    assert f'id="dead-letter-{seq}"' in page
    assert "feishu-bad-signature" in page
    assert NASTY not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    refused = await browser.post(f"/dead-letters/{seq}/replay")
    assert refused.status_code == 303
    assert "admin" in (await browser.get(refused.headers["location"])).text
    before = len(sink.received)

    rules.write_text(rules_for(sink, "demo"))  # fixed

    async def ready() -> bool:
        return (await api.get("/readyz")).status_code == 200

    await eventually(ready, timeout=15, message="the fixed channel loaded")
    await sign_in(browser, ADMIN)
    replayed = await browser.post(f"/dead-letters/{seq}/replay")
    assert replayed.status_code == 303
    assert "outcome=sent" in replayed.headers["location"]
    assert f"Dead letter {seq} sent and removed." in (await browser.get(replayed.headers["location"])).text
    titles = [r.body["card"]["header"]["title"]["content"] for r in sink.received[before:]]
    assert titles == [f"❌ PyTorchJob team-a/{NASTY} Failed"]
    assert f'id="dead-letter-{seq}"' not in (await browser.get("/dead-letters")).text


async def test_a_digests_link_opens_the_view_of_exactly_its_jobs_escaped(stack: dict[str, Any]) -> None:
    """Issue 18 item 5: a digest's "open" link shows the jobs it digested, not the whole dashboard."""
    browser, sink, js, rules = stack["browser"], stack["sink"], stack["js"], stack["rules"]
    rules.write_text(
        f"channels:\n  ml:\n    type: feishu\n    url: {sink.url('ml')}\n    secret: demo\n"
        "    digest: {threshold: 1, window_seconds: 60, hold_seconds: 1.0, max_listed: 2}\n"
        "rules:\n  - name: all\n    channels: [ml]\n"
    )
    loaded = stack["notifier"].rules.version
    await eventually(lambda: stack["notifier"].rules.version > loaded, message="the digest rules loaded")
    await publish_job_event(js, event("warm-up"))  # the channel has sent once: the burst is on
    await eventually(lambda: len(sink.received) == 1, timeout=15, message="the first card")
    names = [NASTY] + [f"burst-{n}" for n in range(5)]  # the first of the burst opens the digest
    for n, name in enumerate(names):
        await publish_job_event(js, event(name, uid=f"uid-burst-{n}"))

    def digest_link() -> str | None:
        for received in sink.received[1:]:
            card = received.body["card"]
            if "job updates" in card["header"]["title"]["content"]:
                return str(card["body"]["elements"][1]["behaviors"][0]["default_url"])
        return None

    link = await eventually(digest_link, timeout=15, message="a digest card")
    assert link.startswith("http://localhost/digests/")
    recorded = (await stack["api"].get(f"/v1/digests/{link.rsplit('/', 1)[1]}")).json()["items"]
    assert recorded[0]["name"] == NASTY
    assert len(recorded) >= 2  # load may split the burst in two digests; this one holds its start
    await sign_in(browser, VIEWER)
    page = (await browser.get(urlsplit(link).path)).text
    for job in recorded:  # exactly its jobs, every one (the card lists only 2)
        assert f'href="/jobs/alpha/{job["uid"]}"' in page
    assert page.count('<tr id="digest-job-') == len(recorded)
    assert NASTY not in page
    assert "team-a/&lt;img src=x onerror=alert(1)&gt;" in page
    assert (await browser.get("/digests/" + "0" * 32)).status_code == 404
