"""The registry's settings, read from TRAINWATCH_* environment variables.

Registry-only fields carry a ``registry_`` prefix (TRAINWATCH_REGISTRY_DATABASE_URL, ...) so
one environment can configure every service without collisions. The intake switches keep the
names operators are told about (TRAINWATCH_ALLOW_LOOPBACK_SERVERS, ...).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from pathlib import Path

from pydantic import Field, SecretStr, model_validator

from trainwatch_common.settings import ServiceSettings

# Values copied from examples that must never protect real secrets.
_PLACEHOLDER_KEYS = frozenset({"changethis", "changeme", "secret", "example", "placeholder", "dev"})


class RegistrySettings(ServiceSettings):
    registry_database_url: str = Field(
        "sqlite+aiosqlite:///./.run/registry.db",
        description="SQLAlchemy async URL: sqlite+aiosqlite:///... (default) or postgresql+asyncpg://...",
    )
    registry_migrate_on_start: bool = Field(True, description="Run Alembic migrations to head at start-up")
    registry_encryption_keys: SecretStr = Field(
        SecretStr(""),
        description="Comma-separated Fernet keys; the first encrypts, all decrypt (rotation)",
    )
    registry_encryption_key_file: Path | None = Field(
        None, description="A mounted secret with one Fernet key per line, primary first"
    )
    registry_fingerprint_key: SecretStr = Field(
        SecretStr(""),
        description="Key of the HMAC behind connection fingerprints; default: derived from the "
        "primary encryption key (set it to keep fingerprints stable across a key rotation)",
    )
    registry_import_dir: Path | None = Field(
        None, description="A folder of kubeconfig files registered at start-up and on demand"
    )
    registry_outbox_poll_seconds: float = Field(
        1.0, gt=0, description="Safety-net poll of the outbox; commits wake the relay at once"
    )
    registry_outbox_relay_enabled: bool = Field(True, description="Run the outbox relay in this process")
    registry_health_consumer_enabled: bool = Field(True, description="Consume clusters.v1.health.*")
    registry_connect_timeout_seconds: float = Field(5.0, gt=0, description="Connectivity tests")
    registry_max_request_bytes: int = Field(4 * 1024 * 1024, gt=0)

    registry_watcher_reads_need_lease: bool = Field(
        True,
        description="A watcher reads a cluster's kubeconfig only while it holds the cluster's Redis lease "
        "(needs TRAINWATCH_REDIS_URL)",
    )
    redis_prefix: str = Field("trainwatch", description="Prefix of the watchers' lease keys in Redis")

    allow_loopback_servers: bool = Field(
        False, description="Accept API servers on loopback addresses (tests, local demo)"
    )
    registry_credentials_warning_days: float = Field(
        14.0,
        ge=0,
        description="Count a cluster in trainwatch_registry_credentials_expiring (and log a warning) "
        "when its token expires within this many days",
    )
    allow_link_local_servers: bool = Field(False, description="Accept API servers on link-local addresses")
    allow_exec_plugins: bool = Field(
        False, description="Accept exec / auth-provider credential plugins (they run commands on watchers)"
    )

    @model_validator(mode="after")
    def _refuse_placeholder_keys(self) -> RegistrySettings:
        for key in self.inline_keys():
            if key.lower() in _PLACEHOLDER_KEYS:
                raise ValueError("TRAINWATCH_REGISTRY_ENCRYPTION_KEYS holds a placeholder, not a key")
        return self

    def inline_keys(self) -> list[str]:
        raw = self.registry_encryption_keys.get_secret_value()
        return [key.strip() for key in raw.split(",") if key.strip()]

    def fingerprint_key(self) -> bytes:
        """The HMAC key of connection fingerprints (never the encryption key itself)."""
        explicit = self.registry_fingerprint_key.get_secret_value()
        if explicit:
            return explicit.encode()
        keys = self.encryption_keys()
        if not keys:
            return secrets.token_bytes(32)  # no key at all: the registry refuses to start anyway
        return hmac.new(keys[0].encode(), b"trainwatch connection fingerprint v1", hashlib.sha256).digest()

    def encryption_keys(self) -> list[str]:
        """All configured keys, primary first: the inline ones, then the mounted file's."""
        keys = self.inline_keys()
        if self.registry_encryption_key_file is not None:
            text = self.registry_encryption_key_file.read_text()
            keys += [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
        return keys
