"""Settings shared by every service, read from TRAINWATCH_* environment variables.

Each service subclasses ``ServiceSettings`` with its own fields; nothing is read at import time.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, SecretStr
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
    redis_url: str = "redis://127.0.0.1:6379/0"
    log_level: str = "INFO"
    log_format: str = Field("json", pattern="^(json|text)$")
    http_host: str = "127.0.0.1"
    http_port: int = Field(8000, ge=0, le=65535, description="Serves /healthz, /readyz, /metrics (0 = any)")
    instance_id: str | None = Field(None, description="This replica's name; defaults to host-pid")

    def nats_servers(self) -> list[str]:
        return [url.strip() for url in self.nats_url.split(",") if url.strip()]

    def nats_auth(self) -> dict[str, Any]:
        """Credentials for ``nats.connect(**...)``: user and password, a token, or none (local runs).

        Kept out of the URL on purpose: server URLs are logged, credentials never are.
        """
        if self.nats_user:
            return {"user": self.nats_user, "password": self.nats_password.get_secret_value()}
        if self.nats_token.get_secret_value():
            return {"token": self.nats_token.get_secret_value()}
        return {}
