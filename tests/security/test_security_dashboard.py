"""The dashboard's attack cases (issue 15: V1, V3, V6, V9, V10), against a real registry.

The registry runs under uvicorn on SQLite with its own token set; the dashboard asks it whether
a token may sign in, exactly as in production. Each test is named after the finding it closes.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from cryptography.fernet import Fernet
from security_support import (
    ADMIN,
    DASHBOARD_HOST,
    KUBECONFIG,
    VIEWER,
    WATCHER,
    dashboard,
    registry_app,
    serving,
    sign_in,
)

OURS = {"origin": f"https://{DASHBOARD_HOST}"}


@pytest.fixture
async def registry_url(tmp_path: Path) -> AsyncIterator[str]:
    async with serving(registry_app(tmp_path)) as url:
        yield url


async def registry_cluster(registry_url: str, cluster_id: str) -> int:
    async with httpx.AsyncClient(base_url=registry_url) as registry:
        response = await registry.get(
            f"/v1/clusters/{cluster_id}", headers={"authorization": f"Bearer {ADMIN}"}
        )
    return response.status_code


def billion_laughs(levels: int) -> str:
    """The classic alias bomb, its last level used as the contexts: 9**levels names if expanded."""
    lines = ['l0: &l0 {name: "lol"}']
    for level in range(1, levels + 1):
        lines.append(f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 9)}]")
    lines.append(f"contexts: *l{levels}")
    return "\n".join(lines) + "\n"


# -- V1 ---------------------------------------------------------------------------------------
async def test_v1_yaml_bomb_refused_before_sign_in(registry_url: str) -> None:
    async with dashboard(registry_url) as client:
        anonymous = await client.post(
            "/admin/kubeconfig/contexts", json={"kubeconfig": billion_laughs(5)}, headers=OURS
        )
        assert anonymous.status_code == 401, anonymous.text
        assert anonymous.json()["signin"] is True

        assert (await sign_in(client, VIEWER)).status_code == 303
        bomb = await client.post(
            "/admin/kubeconfig/contexts", json={"kubeconfig": billion_laughs(9)}, headers=OURS
        )
        assert bomb.status_code == 422, bomb.text
        assert "alias" in " ".join(bomb.json()["problems"]).lower()
        deep = await client.post("/admin/kubeconfig/contexts", json={"kubeconfig": "[" * 5000}, headers=OURS)
        assert deep.status_code == 422, deep.text  # not a RecursionError 500
        good = await client.post("/admin/kubeconfig/contexts", json={"kubeconfig": KUBECONFIG}, headers=OURS)
        assert good.json() == {"ok": True, "contexts": ["first"], "current": "first"}
        assert "very-secret-token" not in good.text


# -- V3 ---------------------------------------------------------------------------------------
async def test_v3_forged_host_with_matching_origin_is_refused(registry_url: str) -> None:
    rebound = "rebound.attacker.example"
    async with dashboard(registry_url) as client:
        assert (await sign_in(client, ADMIN)).status_code == 303
        forged = {"host": rebound, "origin": f"https://{rebound}"}
        created = await client.post(
            "/admin/clusters", json={"id": "rebound", "kubeconfig": KUBECONFIG}, headers=forged
        )
        assert created.status_code == 400, created.text
        assert (await client.get("/clusters", headers=forged)).status_code == 400
        assert (await client.post("/admin/signout", headers=forged)).status_code == 400
        assert await registry_cluster(registry_url, "rebound") == 404  # nothing reached the registry
        # Our own name still works, and probes by pod IP still answer.
        ours = await client.post(
            "/admin/clusters", json={"id": "ours", "kubeconfig": KUBECONFIG}, headers=OURS
        )
        assert ours.json()["ok"] is True, ours.text
        assert (await client.get("/healthz", headers={"host": "10.1.2.3:8000"})).status_code == 200


# -- V6 ---------------------------------------------------------------------------------------
async def test_v6_read_pages_need_a_viewer_sign_in(registry_url: str) -> None:
    async with dashboard(registry_url) as client:
        assert (await sign_in(client, ADMIN)).status_code == 303
        added = await client.post(
            "/admin/clusters", json={"id": "shown", "kubeconfig": KUBECONFIG}, headers=OURS
        )
        assert added.json()["ok"] is True, added.text
    async with dashboard(registry_url) as client:
        for path in ("/jobs", "/clusters", "/jobs/shown/uid-1"):
            anonymous = await client.get(path)
            assert anonymous.status_code == 303, path
            assert anonymous.headers["location"].startswith("/admin/signin?next="), path
            assert "10.0.0.1" not in anonymous.text
        assert (await client.get("/events/jobs")).status_code == 401
        assert (await client.get("/events/health")).status_code == 401
        client.cookies.set("tw_admin", "a-made-up-token-0123456789", domain=DASHBOARD_HOST)
        assert (await client.get("/clusters")).status_code == 303  # a cookie is not a sign-in
        client.cookies.clear()
        assert (await sign_in(client, VIEWER, next_path="/clusters")).headers["location"] == "/clusters"
        page = await client.get("/clusters")
        assert page.status_code == 200
        assert "https://10.0.0.1:6443" in page.text
    # The explicit open read-only demo: reads without sign-in, changes still need one.
    async with dashboard(registry_url, dashboard_public_read=True) as client:
        assert (await client.get("/clusters")).status_code == 200
        assert (await client.get("/clusters/new")).status_code == 303
        refused = await client.post(
            "/admin/clusters", json={"id": "x", "kubeconfig": KUBECONFIG}, headers=OURS
        )
        assert refused.status_code == 401


# -- V9 ---------------------------------------------------------------------------------------
async def test_v9_sign_in_refuses_a_token_the_registry_does_not_accept(registry_url: str) -> None:
    async with dashboard(registry_url) as client:
        for token in ("any-string-at-all-0123456789", WATCHER):  # unknown; a role that may not read
            answer = await sign_in(client, token)
            assert answer.status_code == 303
            assert "refused=1" in answer.headers["location"]
            assert "set-cookie" not in answer.headers
        assert (await client.get("/clusters")).status_code == 303


async def test_v9_cookie_is_secure_and_every_answer_has_the_security_headers(registry_url: str) -> None:
    async with dashboard(registry_url) as client:
        signed = await sign_in(client, ADMIN)
        cookie = signed.headers["set-cookie"]
        for attribute in ("Secure", "HttpOnly", "SameSite=strict"):
            assert attribute in cookie
        for path in ("/admin/signin", "/clusters", "/static/dashboard.js"):
            headers = (await client.get(path)).headers
            assert "frame-ancestors 'none'" in headers["content-security-policy"], path
            assert "script-src 'self'" in headers["content-security-policy"], path
            assert headers["x-frame-options"] == "DENY", path
            assert headers["x-content-type-options"] == "nosniff", path
            assert headers["referrer-policy"] == "same-origin", path
    # Only plain http to a loopback address (make run) goes without Secure, unless configured.
    async with dashboard(registry_url, dashboard_allowed_hosts="127.0.0.1") as client:
        client.base_url = httpx.URL("http://127.0.0.1")
        assert "Secure" not in (await sign_in(client, ADMIN)).headers["set-cookie"]


async def test_v9_sign_out_refuses_a_cross_site_post(registry_url: str) -> None:
    async with dashboard(registry_url) as client:
        assert (await sign_in(client, VIEWER)).status_code == 303
        crossed = await client.post("/admin/signout", headers={"origin": "https://evil.example"})
        assert crossed.status_code == 403
        assert "set-cookie" not in crossed.headers
        assert (await client.get("/clusters")).status_code == 200  # still signed in
        ours = await client.post("/admin/signout", headers=OURS)
        assert ours.status_code == 303
        assert 'tw_admin=""' in ours.headers["set-cookie"]


# -- V10 --------------------------------------------------------------------------------------
async def test_v10_failed_sign_ins_are_limited_per_address_and_logged(
    registry_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    wrong = [f"wrong-token-{n:02d}-0123456789abcdef" for n in range(10)]
    async with dashboard(registry_url) as client:
        for token in wrong:
            assert "refused=1" in (await sign_in(client, token)).headers["location"]
        limited = await sign_in(client, ADMIN)  # even the right token waits out the minute
        assert limited.status_code == 429
        assert 1 <= int(limited.headers["retry-after"]) <= 61
        client.cookies.set("tw_admin", "a-guess-by-cookie-0123456789", domain=DASHBOARD_HOST)
        assert (await client.get("/clusters")).status_code == 429
    failures = [r for r in caplog.records if r.getMessage() == "authentication failed"]
    by_dashboard = [r for r in failures if r.name.startswith("trainwatch_dashboard")]
    assert len(by_dashboard) == 10
    assert {getattr(r, "client", None) for r in by_dashboard} == {"127.0.0.1"}
    # The registry logs each refusal it gave the dashboard's checks too (its API is not limited
    # per address: the dashboard asks for everyone, so a limit there would lock everyone out).
    assert len([r for r in failures if r.name.startswith("trainwatch_registry")]) == 10
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    for token in [*wrong, ADMIN]:
        assert token not in logged


async def test_v10_admin_changes_record_who_made_them(
    registry_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with dashboard(registry_url) as client:
        assert (await sign_in(client, ADMIN)).status_code == 303
        added = await client.post(
            "/admin/clusters", json={"id": "audited", "kubeconfig": KUBECONFIG}, headers=OURS
        )
        assert added.json()["ok"] is True, added.text
        removed = await client.post(
            "/admin/clusters/audited/delete", json={"confirm": "audited"}, headers=OURS
        )
        assert removed.json()["ok"] is True, removed.text
    changes = [r for r in caplog.records if r.getMessage() == "admin change"]
    assert [getattr(r, "action", None) for r in changes] == [
        "POST /admin/clusters",
        "POST /admin/clusters/audited/delete",
    ]
    # The actor is named by a short digest of the token: stable across lines, not the token.
    assert {getattr(r, "actor", None) for r in changes} == {hashlib.sha256(ADMIN.encode()).hexdigest()[:12]}
    assert {getattr(r, "client", None) for r in changes} == {"127.0.0.1"}
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert ADMIN not in logged
    assert "very-secret-token" not in logged


@pytest.mark.parametrize(
    ("module", "env"),
    [
        ("trainwatch_dashboard", {"TRAINWATCH_DASHBOARD_API_TOKEN": "replace-me"}),
        ("trainwatch_registry", {"TRAINWATCH_ADMIN_TOKENS": f"{ADMIN},changeme"}),
        ("trainwatch_persister", {"TRAINWATCH_VIEWER_TOKENS": "tiny1"}),
    ],
)
def test_v10_placeholder_and_short_tokens_stop_the_start(
    module: str, env: dict[str, str], tmp_path: Path
) -> None:
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TRAINWATCH_")},
        "TRAINWATCH_HTTP_PORT": "0",
        "TRAINWATCH_NATS_URL": "nats://127.0.0.1:1",
        "TRAINWATCH_REGISTRY_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'registry.db'}",
        "TRAINWATCH_REGISTRY_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
        "TRAINWATCH_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'jobs.db'}",
        **env,
    }
    # Before the check these would serve (and this would time out); now they exit at once.
    done = subprocess.run(
        [sys.executable, "-m", module],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "weak tokens" in last
    assert "Traceback" not in done.stderr
    for value in env.values():  # the setting is named, its value never shown
        for token in value.split(","):
            assert token not in done.stderr
