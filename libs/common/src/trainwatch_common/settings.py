"""Settings shared by every service, read from TRAINWATCH_* environment variables.

Each service subclasses ``ServiceSettings`` with its own fields; nothing is read at import time.
"""

from __future__ import annotations

import ssl
from typing import Any

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TRAINWATCH_", env_file=None, extra="ignore")

    nats_url: str = Field("nats://127.0.0.1:4222", description="NATS server(s), comma separated")
    nats_user: str = Field(
        "",
        description="NATS user: one per service, allowed only its subjects (deploy/k8s/nats.conf)",
    )
    nats_password: SecretStr = Field(SecretStr(""), description="The NATS user's password (a secret)")
    nats_token: SecretStr = Field(SecretStr(""), description="A NATS token, for a server set up with one")
    nats_creds_file: str = Field(
        "", description="A NATS .creds file (decentralized JWT auth: the user JWT and its NKey seed)"
    )
    nats_nkey_seed_file: str = Field("", description="A file holding the NATS user's NKey seed (SU...)")
    nats_tls_ca_file: str = Field(
        "", description="CA bundle (PEM) that signed the NATS servers' certificates; set it to use TLS"
    )
    nats_tls_cert_file: str = Field(
        "", description="Client certificate (PEM) for a server that verifies clients"
    )
    nats_tls_key_file: str = Field("", description="The client certificate's private key (PEM)")
    nats_tls_hostname: str = Field(
        "", description="The name the servers' certificates carry, when it is not the URL's host"
    )
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0", description="Redis by URL (used unless TRAINWATCH_REDIS_SENTINELS is set)"
    )
    redis_sentinels: str = Field(
        "",
        description="Redis Sentinel addresses, host:port comma separated: find the master through them",
    )
    redis_sentinel_master: str = Field(
        "trainwatch", description="The master's name in the sentinels' configuration (sentinel monitor)"
    )
    redis_db: int = Field(0, ge=0, description="The Redis database number, with Sentinel")
    redis_username: str = Field("", description="Redis ACL user (with TRAINWATCH_REDIS_PASSWORD)")
    redis_password: SecretStr = Field(SecretStr(""), description="The Redis password (a secret)")
    redis_sentinel_username: str = Field("", description="The sentinels' ACL user, if they have one")
    redis_sentinel_password: SecretStr = Field(
        SecretStr(""), description="The sentinels' own password, if they require one (a secret)"
    )
    redis_tls_ca_file: str = Field(
        "",
        description="CA bundle (PEM) of the Redis servers' certificates: TLS to the sentinels and the "
        "master (with a URL, use rediss://)",
    )
    log_level: str = "INFO"
    log_format: str = Field("json", pattern="^(json|text)$")
    http_host: str = "127.0.0.1"
    http_port: int = Field(8000, ge=0, le=65535, description="Serves /healthz, /readyz, /metrics (0 = any)")
    instance_id: str | None = Field(None, description="This replica's name; defaults to host-pid")

    def nats_servers(self) -> list[str]:
        return [url.strip() for url in self.nats_url.split(",") if url.strip()]

    @model_validator(mode="after")
    def _one_nats_identity(self) -> ServiceSettings:
        given = [
            name
            for name, value in (
                ("TRAINWATCH_NATS_USER", self.nats_user),
                ("TRAINWATCH_NATS_TOKEN", self.nats_token.get_secret_value()),
                ("TRAINWATCH_NATS_CREDS_FILE", self.nats_creds_file),
                ("TRAINWATCH_NATS_NKEY_SEED_FILE", self.nats_nkey_seed_file),
            )
            if value
        ]
        if len(given) > 1:
            raise ValueError(f"set one NATS identity, not several: {', '.join(given)}")
        if bool(self.nats_tls_cert_file) != bool(self.nats_tls_key_file):
            raise ValueError("TRAINWATCH_NATS_TLS_CERT_FILE and TRAINWATCH_NATS_TLS_KEY_FILE go together")
        return self

    def nats_auth(self) -> dict[str, Any]:
        """Identity and TLS options for ``nats.connect(**...)``: one of user and password, a token,
        a ``.creds`` file or an NKey seed (or none, for local runs), plus TLS when a CA or a client
        certificate is set.

        Kept out of the URL on purpose: server URLs are logged, credentials never are.
        """
        options: dict[str, Any] = {}
        if self.nats_user:
            options.update(user=self.nats_user, password=self.nats_password.get_secret_value())
        elif self.nats_token.get_secret_value():
            options.update(token=self.nats_token.get_secret_value())
        elif self.nats_creds_file:
            options.update(user_credentials=self.nats_creds_file)
        elif self.nats_nkey_seed_file:
            options.update(nkeys_seed=self.nats_nkey_seed_file)
        tls = self.nats_tls_context()
        if tls is not None:
            options.update(tls=tls)
            if self.nats_tls_hostname:
                options.update(tls_hostname=self.nats_tls_hostname)
        return options

    def nats_tls_context(self) -> ssl.SSLContext | None:
        """The client's TLS context (server verified against the CA, client certificate if set)."""
        if not (self.nats_tls_ca_file or self.nats_tls_cert_file):
            return None
        context = ssl.create_default_context(cafile=self.nats_tls_ca_file or None)
        if self.nats_tls_cert_file:
            context.load_cert_chain(self.nats_tls_cert_file, self.nats_tls_key_file)
        return context
