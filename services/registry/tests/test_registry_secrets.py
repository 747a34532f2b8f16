"""Kubeconfigs at rest are encrypted, key rotation works, and only watchers read connections (logged)."""

from __future__ import annotations

import logging

import pytest
import yaml
from conftest import Harness, make_settings, running_registry
from cryptography.fernet import Fernet
from registry_kubeconfigs import ADMIN, VIEWER, create_body
from sqlalchemy import text

from trainwatch_common import ClusterConnection
from trainwatch_registry.__main__ import _with_registry
from trainwatch_registry.crypto import EncryptionKeyError, Encryptor
from trainwatch_registry.settings import RegistrySettings


async def _raw_blob(harness: Harness, cluster_id: str) -> bytes:
    async with harness.engine.connect() as conn:
        row = (
            await conn.execute(
                text("SELECT kubeconfig_encrypted FROM clusters WHERE id = :id"), {"id": cluster_id}
            )
        ).one()
    return bytes(row[0])


async def test_the_raw_row_holds_ciphertext_only(registry_on: Harness, encryption_key: str) -> None:
    await registry_on.create(create_body("vault"))
    blob = await _raw_blob(registry_on, "vault")
    assert b"sim-token-1234" not in blob
    assert b"server" not in blob
    assert b"BEGIN CERTIFICATE" not in blob
    plaintext = yaml.safe_load(Fernet(encryption_key.encode()).decrypt(blob))
    assert plaintext["users"] == [{"name": "ops", "user": {"token": "sim-token-1234"}}]
    assert [c["name"] for c in plaintext["contexts"]] == ["main"]  # reduced to the one context used
    assert "other-secret-token" not in str(plaintext)


async def test_watchers_read_the_connection_and_every_read_is_logged_without_the_secret(
    registry: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    created = await registry.create(create_body("gpu-east"))
    watcher = await registry.watcher_headers("gpu-east")
    with caplog.at_level(logging.INFO, logger="trainwatch_registry.audit"):
        response = await registry.client.get("/v1/clusters/gpu-east/connection", headers=watcher)
    assert response.status_code == 200
    connection = ClusterConnection.model_validate(response.json())
    assert connection.connection_fingerprint == created["connection_fingerprint"]
    assert connection.revision == 1
    assert yaml.safe_load(connection.kubeconfig)["users"][0]["user"]["token"] == "sim-token-1234"
    reads = [r for r in caplog.records if r.getMessage() == "connection config read"]
    assert len(reads) == 1
    assert reads[0].cluster_id == "gpu-east"  # type: ignore[attr-defined]
    assert reads[0].caller_role == "watcher"  # type: ignore[attr-defined]
    assert reads[0].connection_fingerprint == created["connection_fingerprint"]  # type: ignore[attr-defined]
    assert "sim-token-1234" not in caplog.text
    assert watcher["X-Trainwatch-Lease"] not in caplog.text  # the lease proof is a secret too
    for headers in (ADMIN, VIEWER):
        assert (
            await registry.client.get("/v1/clusters/gpu-east/connection", headers=headers)
        ).status_code == 403


async def test_no_log_line_ever_carries_the_secret(
    registry: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        await registry.create(create_body("quiet"))
        watcher = await registry.watcher_headers("quiet")
        assert (
            await registry.client.get("/v1/clusters/quiet/connection", headers=watcher)
        ).status_code == 200
        await registry.client.post("/v1/clusters?dry_run=true", json=create_body("dry"), headers=ADMIN)
        await registry.client.delete("/v1/clusters/quiet", headers=ADMIN)
    assert "sim-token-1234" not in caplog.text
    assert "other-secret-token" not in caplog.text


async def test_rotate_key_re_encrypts_every_row(
    sqlite_url: str, nats_url: str, redis_url: str, encryption_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(database_url=sqlite_url, nats_url=nats_url, encryption_key=encryption_key)
    async with running_registry(settings) as old:
        await old.create(create_body("a"))
        await old.create(create_body("b"))
        before = await _raw_blob(old, "a")

    new_key = Encryptor.generate_key()
    monkeypatch.setenv("TRAINWATCH_REGISTRY_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("TRAINWATCH_REGISTRY_ENCRYPTION_KEYS", f"{new_key},{encryption_key}")
    await _with_registry("rotate-key", RegistrySettings(_env_file=None))  # type: ignore[call-arg]

    only_new = make_settings(
        database_url=sqlite_url, nats_url=nats_url, encryption_key=new_key, redis_url=redis_url
    )
    async with running_registry(only_new) as rotated:
        after = await _raw_blob(rotated, "a")
        assert after != before
        assert Fernet(new_key.encode()).decrypt(after)
        watcher = await rotated.watcher_headers("b")
        response = await rotated.client.get("/v1/clusters/b/connection", headers=watcher)
        assert response.status_code == 200  # readable with the new key alone: the old one can go


def test_the_registry_refuses_to_start_without_a_usable_key() -> None:
    with pytest.raises(EncryptionKeyError, match="no encryption key"):
        Encryptor([])
    with pytest.raises(EncryptionKeyError, match="#1 is not a Fernet key"):
        Encryptor(["not-a-key"])
    with pytest.raises(ValueError, match="placeholder"):
        RegistrySettings(_env_file=None, registry_encryption_keys="changethis")  # type: ignore[call-arg, arg-type]


async def test_keys_can_come_from_a_mounted_file(tmp_path: pytest.TempPathFactory) -> None:
    key = Encryptor.generate_key()
    secret = tmp_path / "keys"  # type: ignore[operator]
    secret.write_text(f"# primary first\n{key}\n")
    settings = RegistrySettings(_env_file=None, registry_encryption_key_file=secret)  # type: ignore[call-arg]
    assert settings.encryption_keys() == [key]
