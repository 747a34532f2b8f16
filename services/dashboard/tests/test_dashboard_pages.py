"""Pages and admin actions against stand-ins shaped like the registry and query APIs.

The real services are exercised together in tests/integration/test_dashboard_e2e.py; here a
MockTransport answers in their documented shapes so each page's behaviour is checked alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from trainwatch_dashboard.app import create_app
from trainwatch_dashboard.settings import DashboardSettings

VIEWER, ADMIN = "viewer-token-123", "admin-token-456"

JOB = {
    "cluster_id": "sim-a",
    "uid": "uid-1",
    "namespace": "team-a",
    "kind_key": "pytorchjob",
    "kind": "PyTorchJob",
    "api_version": "kubeflow.org/v1",
    "name": "train-resnet",
    "phase": "Running",
    "sub_phase": None,
    "terminal": False,
    "previous_phase": "Pending",
    "reason": "PyTorchJobRunning",
    "message": "running",
    "owner": "alice",
    "queue": None,
    "labels": {"team": "vision"},
    "replicas": {"Worker": {"desired": 2, "active": 2, "ready": None, "succeeded": 0, "failed": 0}},
    "restart_count": 0,
    "created_at": "2026-11-29T15:00:00Z",
    "started_at": "2026-11-29T15:00:05Z",
    "finished_at": None,
    "updated_at": "2026-11-29T15:00:05Z",
    "deleted_at": None,
    "sequence": 1,
    "epoch": 1,
    "resource_version": "101",
    "event_id": "e1",
    "watcher_id": "w1",
}
TRANSITIONS = [
    {
        "event_id": "e0",
        "change": "created",
        "sequence": 0,
        "epoch": 1,
        "phase": "Pending",
        "sub_phase": "Created",
        "terminal": False,
        "previous_phase": None,
        "reason": None,
        "message": None,
        "resource_version": "100",
        "observed_at": "2026-11-29T15:00:00Z",
        "source_transition_time": None,
        "watcher_id": "w1",
        "event": {},
    },
    {
        "event_id": "e1",
        "change": "transition",
        "sequence": 1,
        "epoch": 1,
        "phase": "Running",
        "sub_phase": None,
        "terminal": False,
        "previous_phase": "Pending",
        "reason": "PyTorchJobRunning",
        "message": "PyTorchJob train-resnet is running.",
        "resource_version": "101",
        "observed_at": "2026-11-29T15:00:05Z",
        "source_transition_time": None,
        "watcher_id": "w1",
        "event": {},
    },
]
CLUSTER = {
    "id": "sim-a",
    "name": "Simulated A",
    "description": "",
    "labels": {"env": "demo"},
    "watch": {},
    "context": "sim-a",
    "server": "https://127.0.0.1:6443",
    "auth_method": "token",
    "connection_fingerprint": "abcdef0123456789",
    "revision": 2,
    "source": "api",
    "created_at": "2026-11-29T15:00:00Z",
    "updated_at": "2026-11-29T15:00:00Z",
    "health": {
        "reachable": True,
        "owner": "watcher-1",
        "epoch": 4,
        "observed_at": "2026-11-29T15:00:00Z",
        "kinds_served": ["job", "pytorchjob"],
        "informers_running": 2,
        "last_error": None,
        "watch_lag_seconds": 0.4,
    },
}
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.0.0.1:6443"}}]
users: [{name: u, user: {token: very-secret-token}}]
contexts:
- name: first
  context: {cluster: c, user: u}
- name: second
  context: {cluster: c, user: u}
current-context: second
"""


AGGREGATES = {
    "breakdown": {
        "total": 5, "by_phase": {"Running": 3, "Failed": 2}, "by_cluster": {"sim-a": 4, "sim-gone": 1},
        "by_namespace": [{"cluster_id": "sim-a", "namespace": "team-a", "count": 4}],
        "by_diagnosis": {"OOMKilled": 2, "Unschedulable": 1},
    },
    "activity": {
        "since": "2026-11-29T00:00:00Z", "until": "2026-11-30T00:00:00Z", "bucket_seconds": 3600,
        "failures": [{"start": "2026-11-29T14:00:00Z", "count": 2}],
        "running": [{"start": "2026-11-29T14:00:00Z", "count": 3}],
    },
    "durations": {
        "since": "2026-11-29T00:00:00Z",
        "queue_wait": {"edges_seconds": [10, 60], "counts": [1, 2, 0], "total": 3},
        "run_time": {"edges_seconds": [10, 60], "counts": [0, 1, 1], "total": 2},
    },
    "failure-reasons": {"since": "2026-11-29T00:00:00Z", "reasons": [{"reason": "OOMKilled", "count": 2}]},
}  # fmt: skip


class Stand:
    """Records every request and answers like the registry and the query API."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path, method = request.url.path, request.method
        if request.url.host == "query":
            if path == "/v1/jobs":
                return httpx.Response(200, json={"data": [JOB], "total": 1, "next_cursor": "c2"})
            if path == "/v1/jobs/sim-a/uid-1":
                return httpx.Response(200, json={**JOB, "transitions": TRANSITIONS})
            if path == "/v1/stats":
                rows = [
                    {"cluster_id": "sim-a", "phase": "Running", "count": 3},
                    {"cluster_id": "sim-a", "phase": "Failed", "count": 1},
                ]
                return httpx.Response(
                    200,
                    json={
                        "total": 4,
                        "deleted": 0,
                        "by_cluster": {"sim-a": 4},
                        "by_phase": {},
                        "by_cluster_phase": rows,
                    },
                )
            if path.startswith("/v1/stats/"):
                return httpx.Response(200, json=AGGREGATES[path.removeprefix("/v1/stats/")])
            if path == "/v1/jobs/export":
                body = "cluster_id,name\r\nsim-a,train-resnet\r\n"
                return httpx.Response(
                    200, text=body, headers={"content-type": "text/csv", "x-total-count": "1"}
                )
            return httpx.Response(404, json={"detail": "no such job"})
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        if token not in (VIEWER, ADMIN):  # as the registry: an unknown token is a 401
            return httpx.Response(401, json={"detail": "a valid bearer token is required"})
        if method == "GET" and path == "/v1/clusters":
            return httpx.Response(200, json={"data": [CLUSTER], "total": 1, "next_cursor": None})
        if method == "GET" and path == "/v1/clusters/sim-a":
            return httpx.Response(200, json=CLUSTER)
        if token != ADMIN:
            return httpx.Response(403, json={"detail": "admin role required"})
        body = json.loads(request.content or b"{}")
        if method == "POST" and path == "/v1/clusters":
            if "insecure" in body.get("kubeconfig", ""):
                detail = [
                    {
                        "type": "kubeconfig.insecure",
                        "loc": ["body", "kubeconfig"],
                        "msg": "insecure-skip-tls-verify is not allowed",
                    }
                ]
                return httpx.Response(422, json={"detail": detail})
            if request.url.params.get("dry_run") == "true":
                connectivity = {
                    "ok": True,
                    "server": "https://10.0.0.1:6443",
                    "elapsed_ms": 3.0,
                    "server_version": {"git_version": "v1.31.0"},
                    "kinds_served": ["job"],
                }
                return httpx.Response(
                    200, json={"dry_run": True, "cluster": CLUSTER, "connectivity": connectivity}
                )
            return httpx.Response(201, json={**CLUSTER, "id": body["id"]})
        if method == "PATCH" and path == "/v1/clusters/sim-a":
            return httpx.Response(200, json=CLUSTER)
        if method == "DELETE" and path == "/v1/clusters/sim-a":
            return httpx.Response(204)
        return httpx.Response(404, json={"detail": "not found"})


@pytest.fixture
def stand() -> Stand:
    return Stand()


@pytest.fixture
async def client(stand: Stand) -> AsyncIterator[httpx.AsyncClient]:
    settings = DashboardSettings(
        nats_url="nats://127.0.0.1:1",
        registry_url="http://registry",
        query_url="http://query",
        dashboard_api_token=VIEWER,  # type: ignore[arg-type]
        dashboard_allowed_hosts="dash",
    )
    app = create_app(settings, transport=httpx.MockTransport(stand))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://dash") as c:
            c.cookies.set(
                "tw_admin", VIEWER
            )  # read pages need a sign-in: a viewer's, unless a test changes it
            yield c


async def test_jobs_page_lists_jobs_with_filters_passed_to_the_query_api(
    client: httpx.AsyncClient, stand: Stand
) -> None:
    response = await client.get(
        "/jobs", params={"cluster": "sim-a", "phase": "Running", "name": "res", "kind": ""}
    )
    assert response.status_code == 200
    assert "train-resnet" in response.text
    assert 'href="/jobs/sim-a/uid-1"' in response.text
    assert "phase-running" in response.text
    assert "cursor=c2" in response.text  # the next page link carries the keyset cursor
    query = next(r for r in stand.requests if r.url.path == "/v1/jobs")
    assert dict(query.url.params) == {
        "cluster": "sim-a",
        "phase": "Running",
        "name": "res",
        "deleted": "false",
        "limit": "50",
    }  # fmt: skip  (deleted jobs are hidden unless the page asks for them)
    assert query.headers["authorization"] == f"Bearer {VIEWER}"
    assert VIEWER not in response.text


async def test_jobs_page_filters_by_diagnosis_category_through_the_url(
    client: httpx.AsyncClient, stand: Stand
) -> None:
    response = await client.get("/jobs", params={"diagnosis": "OOMKilled", "cluster": "sim-a"})
    assert response.status_code == 200
    text = response.text
    query = next(r for r in stand.requests if r.url.path == "/v1/jobs")
    assert dict(query.url.params) == {
        "cluster": "sim-a", "diagnosis": "OOMKilled", "deleted": "false", "limit": "50",
    }  # fmt: skip
    # The select shows the category chosen, and the next page, the export and "Clear" keep or drop it.
    select = re.search(r'<select name="diagnosis" id="filter-diagnosis">(.*?)</select>', text, re.S)
    assert select is not None
    assert '<option value="OOMKilled" selected>' in select.group(1)
    assert '<option value="Unschedulable" >' in select.group(1)
    next_link = re.search(r'id="page-next" href="\?([^"]+)"', text)
    assert next_link is not None
    assert "diagnosis=OOMKilled" in next_link.group(1).replace("&amp;", "&")
    assert "cursor=c2" in next_link.group(1)
    assert re.search(r'href="/jobs/export.csv\?[^"]*diagnosis=OOMKilled', text)
    # New jobs are inserted live here too (each event carries the job's current category, which
    # the page checks); the stream is not filtered by category, so a shown row whose category
    # moved away still gets its event, and the page marks it with the note below.
    assert 'data-insert="yes"' in text
    assert "diagnosis" not in re.search(r'data-live="([^"]*)"', text).group(1)  # type: ignore[union-attr]
    assert 'data-off-filter="No longer OOMKilled: its diagnosis changed after this list was loaded."' in text

    zh = (await client.get("/jobs", params={"diagnosis": "OOMKilled", "lang": "zh-CN"})).text
    assert "诊断" in zh
    assert '<option value="OOMKilled" selected>内存不足 (OOMKilled)</option>' in zh
    assert 'data-off-filter="已不再是内存不足 (OOMKilled)：' in zh  # noqa: RUF001

    # A category the vocabulary does not have is not passed on (the query API would refuse it).
    stand.requests.clear()
    response = await client.get("/jobs", params={"diagnosis": "Bogus"})
    assert response.status_code == 200
    query = next(r for r in stand.requests if r.url.path == "/v1/jobs")
    assert "diagnosis" not in dict(query.url.params)
    assert 'data-insert="yes"' in response.text
    assert "data-off-filter" not in response.text


async def test_job_page_shows_the_timeline_newest_first_and_replicas(client: httpx.AsyncClient) -> None:
    response = await client.get("/jobs/sim-a/uid-1")
    assert response.status_code == 200
    text = response.text
    assert text.index("PyTorchJob train-resnet is running.") < text.index('data-sequence="0"')
    assert "Worker" in text
    assert 'href="/jobs?cluster=sim-a"' in text


async def test_unknown_job_is_a_404_page(client: httpx.AsyncClient) -> None:
    response = await client.get("/jobs/sim-a/nope")
    assert response.status_code == 404
    assert "not known" in response.text


async def test_clusters_page_shows_health_owner_and_counts(client: httpx.AsyncClient) -> None:
    response = await client.get("/clusters")
    assert response.status_code == 200
    text = response.text
    for expected in ("Simulated A", "Reachable", "watcher-1", "pytorchjob", "0.4s", "https://127.0.0.1:6443"):
        assert expected in text
    assert "phase=Failed" in text
    assert "phase-failed" in text


async def test_a_reachable_cluster_forbidden_on_a_kind_is_not_shown_healthy(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 14: credentials refused on every job kind still showed "Reachable" and nothing else."""
    kinds = {
        "job": {"state": "forbidden", "error": "403"},
        "pytorchjob": {"state": "forbidden", "error": "403"},
        "mpijob": {"state": "not_installed"},
    }
    monkeypatch.setitem(CLUSTER, "health", {**CLUSTER["health"], "kinds": kinds})
    text = (await client.get("/clusters")).text
    assert 'data-state="forbidden"' in text
    assert "Forbidden" in text
    assert "pytorchjob · forbidden" in text
    assert "mpijob" not in text  # not installed: not a kind of this cluster
    assert 'data-state="ok"' not in text


async def test_language_switch_by_query_then_cookie(client: httpx.AsyncClient) -> None:
    response = await client.get("/jobs?lang=zh-CN")
    assert "任务" in response.text
    assert 'lang="zh-CN"' in response.text
    assert "tw_lang=zh-CN" in response.headers["set-cookie"]
    client.cookies.set("tw_lang", "zh-CN")
    again = await client.get("/clusters")
    assert "可访问" in again.text
    client.cookies.delete("tw_lang")
    english = await client.get("/clusters", headers={"accept-language": "en-US"})
    assert "Reachable" in english.text


async def test_admin_actions_need_a_sign_in(client: httpx.AsyncClient, stand: Stand) -> None:
    client.cookies.clear()
    page = await client.get("/clusters/new")
    assert page.status_code == 303
    assert page.headers["location"].startswith("/admin/signin")
    refused = await client.post("/admin/clusters", json={"id": "x", "kubeconfig": KUBECONFIG})
    assert refused.status_code == 401
    assert refused.json()["signin"] is True
    assert not [r for r in stand.requests if r.method == "POST"]


async def test_signed_in_admin_token_is_forwarded_and_never_shown(
    client: httpx.AsyncClient, stand: Stand
) -> None:
    signin = await client.post(
        "/admin/signin",
        content=f"token={ADMIN}&next=/clusters/new",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert signin.status_code == 303
    assert signin.headers["location"] == "/clusters/new"
    cookie = signin.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    client.cookies.set("tw_admin", ADMIN)
    form = await client.get("/clusters/new")
    assert form.status_code == 200
    assert ADMIN not in form.text
    tested = await client.post(
        "/admin/clusters/test",
        json={"id": "new-one", "kubeconfig": KUBECONFIG, "context": "first", "labels": "env=dev"},
    )
    assert tested.json()["ok"] is True
    assert tested.json()["result"]["connectivity"]["server_version"]["git_version"] == "v1.31.0"
    created = await client.post(
        "/admin/clusters", json={"id": "new-one", "kubeconfig": KUBECONFIG, "kinds": ["job"]}
    )
    assert created.json() == {"ok": True, "result": {"redirect": "/clusters?added=new-one"}}
    posts = [r for r in stand.requests if r.method == "POST"]
    assert [r.headers["authorization"] for r in posts] == [f"Bearer {ADMIN}"] * 2
    body = json.loads(posts[1].content)
    assert body["watch"]["kinds"] == ["job"]
    assert body["name"] == "new-one"
    assert json.loads(posts[0].content)["labels"] == {"env": "dev"}
    assert json.loads(posts[0].content)["context"] == "first"


async def test_registry_validation_errors_come_back_plainly(client: httpx.AsyncClient) -> None:
    client.cookies.set("tw_admin", ADMIN)
    bad = KUBECONFIG.replace("server:", "insecure-skip-tls-verify: true, server:")
    answer = await client.post("/admin/clusters", json={"id": "bad", "kubeconfig": bad})
    assert answer.status_code == 422
    assert answer.json()["problems"] == ["kubeconfig: insecure-skip-tls-verify is not allowed"]


async def test_a_refused_admin_token_signs_the_browser_out(client: httpx.AsyncClient) -> None:
    client.cookies.set("tw_admin", "wrong")
    answer = await client.post("/admin/clusters/sim-a/delete", json={"confirm": "sim-a"})
    assert answer.status_code == 401
    assert answer.json()["signin"] is True
    assert 'tw_admin=""' in answer.headers["set-cookie"]


async def test_a_viewer_token_may_read_but_not_change_and_stays_signed_in(client: httpx.AsyncClient) -> None:
    answer = await client.post("/admin/clusters/sim-a/delete", json={"confirm": "sim-a"})
    assert answer.status_code == 403
    assert "admin token" in answer.json()["problems"][0]
    assert "set-cookie" not in answer.headers


async def test_edit_rotate_and_remove(client: httpx.AsyncClient, stand: Stand) -> None:
    client.cookies.set("tw_admin", ADMIN)
    page = await client.get("/clusters/sim-a/edit")
    assert page.status_code == 200
    assert "env=demo" in page.text
    updated = await client.post("/admin/clusters/sim-a", json={"labels": "env=prod\nteam=ml", "name": "A"})
    assert updated.json()["ok"] is True
    rotated = await client.post(
        "/admin/clusters/sim-a/rotate", json={"kubeconfig": KUBECONFIG, "context": "second"}
    )
    assert rotated.json()["ok"] is True
    wrong = await client.post("/admin/clusters/sim-a/delete", json={"confirm": "nope"})
    assert wrong.status_code == 422
    removed = await client.post("/admin/clusters/sim-a/delete", json={"confirm": "sim-a"})
    assert removed.json()["result"]["redirect"] == "/clusters?removed=sim-a"
    patches = [json.loads(r.content) for r in stand.requests if r.method == "PATCH"]
    assert patches[0]["labels"] == {"env": "prod", "team": "ml"}
    assert "kubeconfig" not in patches[0]
    assert patches[1] == {"kubeconfig": KUBECONFIG, "context": "second"}
    assert [r.method for r in stand.requests if r.url.path == "/v1/clusters/sim-a"][-1] == "DELETE"


async def test_cross_site_admin_posts_are_refused(client: httpx.AsyncClient, stand: Stand) -> None:
    client.cookies.set("tw_admin", ADMIN)
    answer = await client.post(
        "/admin/clusters/sim-a/delete", json={"confirm": "sim-a"}, headers={"origin": "https://evil.example"}
    )
    assert answer.status_code == 403
    assert not [r for r in stand.requests if r.method == "DELETE"]


async def test_kubeconfig_contexts_are_listed_without_secrets(client: httpx.AsyncClient) -> None:
    answer = await client.post("/admin/kubeconfig/contexts", json={"kubeconfig": KUBECONFIG})
    assert answer.json() == {"ok": True, "contexts": ["first", "second"], "current": "second"}
    assert "very-secret-token" not in answer.text
    broken = await client.post("/admin/kubeconfig/contexts", json={"kubeconfig": "- just\n- a list"})
    assert broken.status_code == 422


async def test_backends_down_show_a_banner_not_a_500() -> None:
    settings = DashboardSettings(  # an open read-only demo: nothing could check a sign-in
        nats_url="nats://127.0.0.1:1",
        registry_url="http://127.0.0.1:9",
        query_url="http://127.0.0.1:9",
        dashboard_allowed_hosts="d",
        dashboard_public_read=True,
    )
    app = create_app(settings)
    transport = httpx.ASGITransport(app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://d") as c,
    ):
        jobs, clusters = await c.get("/jobs"), await c.get("/clusters")
        ready = await c.get("/readyz")
    assert jobs.status_code == 200
    assert "not answering" in jobs.text
    assert clusters.status_code == 200
    assert "not answering" in clusters.text
    assert ready.status_code == 503
    assert ready.json()["checks"]["nats"] == "NATS not reachable yet (retrying)", ready.text


async def test_the_landing_page_is_the_overview(client: httpx.AsyncClient) -> None:
    response = await client.get("/", follow_redirects=False)
    assert response.headers["location"] == "/overview"


async def test_overview_shows_counts_and_chart_data_for_the_filters(
    client: httpx.AsyncClient, stand: Stand
) -> None:
    response = await client.get("/overview", params={"cluster": "sim-a", "hours": "72"})
    assert response.status_code == 200
    text = response.text
    assert 'data-phase="Running" data-count="3"' in text
    assert "team-a" in text
    assert "OOMKilled" in text
    assert '<script type="application/json" id="overview-data">' in text
    assert "/static/vendor/chartjs/chart.umd.min.js" in text
    # sim-gone is not registered: its jobs are no longer tracked
    assert "No longer tracked" in text
    asked = {r.url.path: dict(r.url.params) for r in stand.requests if r.url.path.startswith("/v1/stats/")}
    assert asked["/v1/stats/activity"] == {"cluster": "sim-a", "hours": "72"}
    assert asked["/v1/stats/breakdown"] == {"cluster": "sim-a"}
    zh = (await client.get("/overview?lang=zh-CN")).text
    assert "每小时失败数" in zh
    assert "概览" in zh


async def test_overview_counts_jobs_per_diagnosis_category_linking_to_the_filtered_list(
    client: httpx.AsyncClient,
) -> None:
    text = (await client.get("/overview", params={"cluster": "sim-a", "kind": "pytorchjob"})).text
    card = re.search(r'<div class="card" id="counts-diagnosis">(.*?)</div>', text, re.S)
    assert card is not None
    row = r'<tr data-category="([^"]+)"><td><a href="([^"]+)">[^<]+</a></td><td class="num">(\d+)</td>'
    rows = re.findall(row, card.group(1))
    assert [(category, count) for category, _, count in rows] == [("OOMKilled", "2"), ("Unschedulable", "1")]
    oom_link = rows[0][1].replace("&amp;", "&")
    assert oom_link == "/jobs?cluster=sim-a&kind=pytorchjob&diagnosis=OOMKilled"
    zh = (await client.get("/overview", params={"lang": "zh-CN"})).text
    assert "各诊断类别任务数" in zh
    assert "内存不足 (OOMKilled)" in zh


async def test_a_quiet_healthy_cluster_is_up_to_date_not_41_s_behind(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 19: "watch lag" showed 30-41 s on healthy quiet clusters: that was the time since the
    last event, which grows with the quiet. A fresh report with every kind watching is up to date."""
    now = datetime.now(UTC).isoformat()
    kinds = {
        "pytorchjob": {"state": "watching"},
        "job": {"state": "watching"},
        "mpijob": {"state": "not_installed"},
    }
    health = {**CLUSTER["health"], "watch_lag_seconds": 41.0, "observed_at": now, "kinds": kinds}
    monkeypatch.setitem(CLUSTER, "health", health)
    text = (await client.get("/clusters")).text
    lag = re.search(r'<dd data-field="lag"[^>]*>(.*?)</dd>', text, re.S)
    assert lag is not None
    assert 'data-state="up_to_date"' in lag.group(0)
    assert lag.group(1).startswith("Up to date")
    assert "last event or bookmark 41s ago" in lag.group(1)  # still told, but not as a lag
    # a kind still listing is catching up; a report older than 90 s is stale
    monkeypatch.setitem(CLUSTER, "health", {**health, "kinds": {**kinds, "job": {"state": "starting"}}})
    assert 'data-state="catching_up"' in (await client.get("/clusters")).text
    old = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    monkeypatch.setitem(CLUSTER, "health", {**health, "observed_at": old})
    assert 'data-state="stale"' in (await client.get("/clusters")).text


async def test_a_removed_clusters_running_jobs_are_no_longer_tracked(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 19: a removed cluster's jobs stayed "Running" forever."""
    monkeypatch.setitem(JOB, "cluster_id", "sim-gone")
    text = (await client.get("/jobs")).text
    assert "No longer tracked" in text
    assert 'data-phase="Running"' not in text
    job_page = (await client.get("/jobs/sim-a/uid-1")).text  # the stand answers with the moved JOB
    assert 'id="job-untracked"' in job_page
    assert "已不再跟踪" in (await client.get("/jobs?lang=zh-CN")).text


async def test_jobs_list_columns_and_deleted_toggle(client: httpx.AsyncClient, stand: Stand) -> None:
    text = (await client.get("/jobs")).text
    assert '<time class="local-time" datetime="2026-11-29T15:00:05Z"' in text  # UTC fallback, local by script
    assert 'title="2026-11-29 15:00:05 UTC"' in text
    assert '<td class="cell-replicas nowrap">2/2</td>' in text  # ready unknown: active of desired
    assert 'data-page-size="50"' in text
    table = text[text.index('id="jobs-table"') :]
    head, row = table.split("</thead>", 1)
    assert head.count("<th>") == row.split("</tr>", 1)[0].count("<td")  # every column has its cell
    assert "<td>alice</td>" in row
    await client.get("/jobs", params={"deleted": "include"})
    asked = [dict(r.url.params) for r in stand.requests if r.url.path == "/v1/jobs"]
    assert asked[0]["deleted"] == "false"
    assert "deleted" not in asked[1]


async def test_export_streams_the_filtered_jobs_from_the_query_api(
    client: httpx.AsyncClient, stand: Stand
) -> None:
    response = await client.get("/jobs/export.csv", params={"cluster": "sim-a"})
    assert response.status_code == 200
    assert response.text.startswith("cluster_id,name")
    assert response.headers["x-total-count"] == "1"
    assert "attachment" in response.headers["content-disposition"]
    asked = next(r for r in stand.requests if r.url.path == "/v1/jobs/export")
    assert dict(asked.url.params) == {"cluster": "sim-a", "deleted": "false", "format": "csv"}
    assert (await client.get("/jobs/export.xlsx")).status_code == 404
