"""Credentials expiry: read from a JWT token's exp at intake, shown as credentials_expire_at,
counted by trainwatch_registry_credentials_expiring."""

from __future__ import annotations

import base64
import json
import re
import time
from datetime import UTC, datetime

from conftest import Harness
from registry_kubeconfigs import ADMIN, as_yaml, create_body, kubeconfig, server_of

from trainwatch_common.testing import eventually
from trainwatch_registry.kubeconfig import token_expiry


def _b64(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def jwt(exp: float | None, **claims: object) -> str:
    payload = {"sub": "system:serviceaccount:trainwatch:trainwatch", **claims}
    if exp is not None:
        payload["exp"] = int(exp)
    return f"{_b64({'alg': 'RS256', 'kid': 'k'})}.{_b64(payload)}.c2lnbmF0dXJl"


def test_token_expiry_reads_exp_without_verifying() -> None:
    assert token_expiry(jwt(1_900_000_000)) == datetime.fromtimestamp(1_900_000_000, UTC)
    assert token_expiry(jwt(None)) is None  # a token Secret's JWT: no exp
    assert token_expiry(f"{_b64({'alg': 'none'})}.{_b64({'exp': 'soon'})}.") is None
    assert token_expiry("opaque-static-token") is None
    assert token_expiry("a.%%%.c") is None
    assert token_expiry(None) is None


def _metric(text: str) -> float:
    match = re.search(r"^trainwatch_registry_credentials_expiring (\S+)$", text, re.M)
    assert match, "metric missing"
    return float(match.group(1))


async def test_expiry_is_public_and_counted_until_rotated(registry: Harness) -> None:
    soon = jwt(time.time() + 3 * 86400)
    later = jwt(time.time() + 60 * 86400)
    created = await registry.create(
        create_body("soon", as_yaml(kubeconfig(server=server_of("soon"), token=soon)))
    )
    assert created["credentials_expire_at"] is not None
    assert soon not in json.dumps(created)
    other = await registry.create(
        create_body("later", as_yaml(kubeconfig(server=server_of("later"), token=later)))
    )
    assert datetime.fromisoformat(other["credentials_expire_at"]) > datetime.fromisoformat(
        created["credentials_expire_at"]
    )
    static = await registry.create(create_body("static"))
    assert static["credentials_expire_at"] is None

    async def expiring_is(value: float) -> bool:
        return _metric((await registry.client.get("/metrics")).text) == value

    await eventually(lambda: expiring_is(1.0), message="one cluster expiring within 14 days")

    response = await registry.client.patch(
        "/v1/clusters/soon",
        json={"kubeconfig": as_yaml(kubeconfig(server=server_of("soon"), token=later))},
        headers=ADMIN,
    )
    assert response.status_code == 200, response.text
    assert response.json()["credentials_expire_at"] == other["credentials_expire_at"]
    listed = (await registry.client.get("/v1/clusters/soon", headers=ADMIN)).json()
    assert listed["credentials_expire_at"] == other["credentials_expire_at"]
    await eventually(lambda: expiring_is(0.0), message="nothing expiring after the rotation")


async def test_the_cluster_reply_says_whether_credentials_are_expiring(registry: Harness) -> None:
    tokens = {
        "expired": jwt(time.time() - 3600),
        "soon": jwt(time.time() + 3 * 86400),  # within the default 14-day window
        "later": jwt(time.time() + 60 * 86400),
    }
    for cluster_id, token in tokens.items():
        await registry.create(
            create_body(cluster_id, as_yaml(kubeconfig(server=server_of(cluster_id), token=token)))
        )
    await registry.create(create_body("static"))

    listed = (await registry.client.get("/v1/clusters", headers=ADMIN)).json()["data"]
    assert {c["id"]: c["credentials_state"] for c in listed} == {
        "expired": "expired",
        "soon": "expiring",
        "later": "ok",
        "static": None,  # no expiry known
    }
    one = (await registry.client.get("/v1/clusters/soon", headers=ADMIN)).json()
    assert one["credentials_state"] == "expiring"
    assert all(token not in json.dumps(listed) + json.dumps(one) for token in tokens.values())
