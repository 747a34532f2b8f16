"""V13 end to end: a watcher replica reads a cluster's kubeconfig from the real registry (uvicorn on
loopback, SQLite, real Redis) only with the value of the lease it holds, which the claim loop
makes with a secret nonce; the shared watcher token alone reads nothing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest
import uvicorn
from cryptography.fernet import Fernet
from pydantic import SecretStr
from redis.asyncio import Redis

from trainwatch_common.auth import ApiTokens
from trainwatch_common.testing import eventually, free_port
from trainwatch_registry.app import create_app
from trainwatch_registry.settings import RegistrySettings
from trainwatch_watcher import errors
from trainwatch_watcher.claims import ClaimLoop
from trainwatch_watcher.connections import RegistryConnections

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://k8s.example.com:6443"}}]
users: [{name: u, user: {token: v13-cluster-token}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


@pytest.fixture
async def registry_url(sqlite_url: str, nats_url: str, redis_url: str) -> AsyncIterator[str]:
    settings = RegistrySettings(
        _env_file=None,  # type: ignore[call-arg]
        registry_database_url=sqlite_url,
        nats_url=nats_url,
        redis_url=redis_url,
        registry_encryption_keys=SecretStr(Fernet.generate_key().decode()),
    )
    tokens = ApiTokens(admin_tokens=SecretStr("v13-admin"), watcher_tokens=SecretStr("v13-watcher"))
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings, tokens=tokens), host="127.0.0.1", port=port, log_config=None)
    )
    task = asyncio.create_task(server.serve(), name="v13-registry")
    while not server.started:
        if task.done():
            await task
        await asyncio.sleep(0.01)  # polling uvicorn's start flag, not standing in for a result
    try:
        url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer v13-admin"}) as admin:
            response = await admin.post(
                "/v1/clusters", json={"id": "gpu-a", "name": "A", "kubeconfig": KUBECONFIG}
            )
            assert response.status_code == 201, response.text
        yield url
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_v13_watcher_proves_its_lease_to_read_a_connection(registry_url: str, redis_url: str) -> None:
    token = SecretStr("v13-watcher")
    # The token alone (what a leaked watcher credential gives): refused.
    bare = RegistryConnections(registry_url, token)
    try:
        with pytest.raises(errors.ConnectionUnavailable, match="403"):
            await bare.fetch("gpu-a")
    finally:
        await bare.close()

    fetched: list[str] = []
    redis = Redis.from_url(redis_url)
    connections = RegistryConnections(registry_url, token)

    async def start(cluster_id: str, epoch: int) -> None:
        fetched.append((await connections.fetch(cluster_id)).kubeconfig)

    async def stop(cluster_id: str, reason: str) -> None:
        return None

    loop = ClaimLoop(redis, replica_id="watcher-v13", start_cluster=start, stop_cluster=stop, ttl_ms=5000)
    connections.lease_proof = loop.connection_proof  # as the watcher app wires it
    running = asyncio.create_task(loop.run(), name="v13-claims")
    try:
        loop.set_desired(["gpu-a"])
        await eventually(lambda: loop.owned().get("gpu-a"), message="the loop claims gpu-a")
        await eventually(lambda: fetched, message="the worker fetched its connection")
        assert "v13-cluster-token" in fetched[0]
        # The lease's holder carries a nonce: the public "replica|epoch" is not its value.
        proof = loop.connection_proof("gpu-a")
        assert proof is not None
        assert proof != f"watcher-v13|{loop.owned()['gpu-a']}"
        assert proof.startswith("watcher-v13#")
        assert loop.connection_proof("gpu-b") is None
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await loop.release_all(timeout=5)
        await connections.close()
        await redis.aclose()
