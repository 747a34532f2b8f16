"""Every way of connecting to NATS that ServiceSettings offers, against real nats-server
processes (issue 17): TLS with a verified client certificate, an NKey user, and a ``.creds``
file (decentralized JWT auth, an operator-mode server). Each is refused without the settings
and accepted with them; ``nats_auth()`` is what every service passes to ``nats.connect``."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import nkeys
import pytest
from nats.aio.client import Client
from pydantic import ValidationError

from trainwatch_common.settings import ServiceSettings
from trainwatch_common.testing import NatsServer
from trainwatch_common.testing.pki import throwaway_pki


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, str]:
    return throwaway_pki(tmp_path, server="nats", client="persister")


def _server(tmp_path: Path, config: str) -> Iterator[NatsServer]:
    server = NatsServer(workdir=tmp_path / "nats", config=config)
    server.workdir.mkdir()
    server.start()
    try:
        yield server
    finally:
        server.close()


async def _refused(url: str, **options: object) -> None:
    client = Client()
    try:
        with pytest.raises((nats.errors.Error, OSError, TimeoutError)):
            await client.connect(
                url, allow_reconnect=False, connect_timeout=2, max_reconnect_attempts=0, **options
            )
    finally:
        if client._transport is not None:  # nats-py leaves a refused handshake's socket open
            client._transport.close()  # type: ignore[no-untyped-call]


async def _round_trip(settings: ServiceSettings) -> None:
    client = await nats.connect(
        settings.nats_servers(), allow_reconnect=False, connect_timeout=2, **settings.nats_auth()
    )
    try:
        subscription = await client.subscribe("trainwatch.auth.check")
        await client.publish("trainwatch.auth.check", b"ok")
        assert (await subscription.next_msg(timeout=2)).data == b"ok"
    finally:
        await client.close()


# -- TLS --------------------------------------------------------------------------------------------
async def test_tls_with_a_verified_client_certificate(tmp_path: Path, pki: dict[str, str]) -> None:
    config = f"""tls {{
  cert_file: "{pki["server_cert"]}"
  key_file: "{pki["server_key"]}"
  ca_file: "{pki["ca"]}"
  verify: true
  timeout: 2
}}
"""
    for server in _server(tmp_path, config):
        await _refused(server.url)  # plain, no certificate
        only_ca = ServiceSettings(nats_url=server.url, nats_tls_ca_file=pki["ca"])
        await _refused(server.url, **only_ca.nats_auth())  # the server wants a client certificate
        settings = ServiceSettings(
            nats_url=server.url,
            nats_tls_ca_file=pki["ca"],
            nats_tls_cert_file=pki["client_cert"],
            nats_tls_key_file=pki["client_key"],
        )
        await _round_trip(settings)


# -- NKey -------------------------------------------------------------------------------------------
async def test_nkey_user(tmp_path: Path) -> None:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    seed_file = tmp_path / "persister.nk"
    seed_file.write_bytes(seed)
    for server in _server(tmp_path, f"authorization {{ users: [ {{ nkey: {public} }} ] }}\n"):
        await _refused(server.url)
        await _round_trip(ServiceSettings(nats_url=server.url, nats_nkey_seed_file=str(seed_file)))


# -- .creds (decentralized JWT) -------------------------------------------------------------------
def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _jwt(issuer_seed: bytes, subject: str, name: str, nats_claims: dict[str, object]) -> str:
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    issuer = nkeys.from_seed(bytearray(issuer_seed))
    claims = {"jti": _b64(os.urandom(16)), "iat": int(time.time()), "iss": issuer.public_key.decode(),
              "name": name, "sub": subject, "nats": {**nats_claims, "version": 2}}  # fmt: skip
    payload = _b64(json.dumps(claims).encode())
    signature = issuer.sign(f"{header}.{payload}".encode())
    return f"{header}.{payload}.{_b64(signature)}"


def _keys(prefix: int) -> tuple[bytes, str]:
    seed = nkeys.encode_seed(os.urandom(32), prefix)
    return seed, nkeys.from_seed(bytearray(seed)).public_key.decode()


async def test_creds_file(tmp_path: Path) -> None:
    operator_seed, operator = _keys(nkeys.PREFIX_BYTE_OPERATOR)
    account_seed, account = _keys(nkeys.PREFIX_BYTE_ACCOUNT)
    _, system = _keys(nkeys.PREFIX_BYTE_ACCOUNT)  # JetStream needs a system account
    user_seed, user = _keys(nkeys.PREFIX_BYTE_USER)
    unlimited = {"subs": -1, "data": -1, "payload": -1}
    operator_jwt = _jwt(operator_seed, operator, "test-operator", {"type": "operator"})
    limits = {**unlimited, "imports": -1, "exports": -1, "wildcards": True, "conn": -1, "leaf": -1}
    account_jwt = _jwt(operator_seed, account, "trainwatch", {"type": "account", "limits": limits})
    system_jwt = _jwt(operator_seed, system, "SYS", {"type": "account", "limits": limits})
    user_jwt = _jwt(account_seed, user, "persister", {"type": "user", "pub": {}, "sub": {}, **unlimited})
    creds = tmp_path / "persister.creds"
    creds.write_text(
        f"-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{user_seed.decode()}\n------END USER NKEY SEED------\n"
    )
    config = f"""operator: {operator_jwt}
system_account: {system}
resolver: MEMORY
resolver_preload: {{
  {account}: {account_jwt}
  {system}: {system_jwt}
}}
"""
    for server in _server(tmp_path, config):
        await _refused(server.url)
        await _round_trip(ServiceSettings(nats_url=server.url, nats_creds_file=str(creds)))


# -- settings ---------------------------------------------------------------------------------------
def test_one_identity_and_a_whole_client_certificate() -> None:
    with pytest.raises(ValidationError, match="one NATS identity"):
        ServiceSettings(nats_user="persister", nats_creds_file="/run/secrets/nats.creds")
    with pytest.raises(ValidationError, match="go together"):
        ServiceSettings(nats_tls_cert_file="/run/secrets/tls.crt")
    assert ServiceSettings().nats_auth() == {}
    assert ServiceSettings(nats_creds_file="/x.creds").nats_auth() == {"user_credentials": "/x.creds"}
