"""The notifier's settings, read from TRAINWATCH_* environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr

from trainwatch_common import ServiceSettings


class NotifierSettings(ServiceSettings):
    http_port: int = Field(8083, ge=0, le=65535, description="/healthz, /readyz, /metrics (0 = any)")
    rules_file: Path = Field(
        Path("rules.yaml"), description="Routing rules and channels (YAML), hot-reloaded"
    )
    rules_poll_seconds: float = Field(1.0, gt=0, description="How often the rules file's mtime is checked")
    dashboard_url: str = Field("http://127.0.0.1:8080", description="Base URL of the dashboard for job links")
    notifier_database_url: str = Field(
        "sqlite+aiosqlite:///./.run/notifier.db",
        description="Silences and suppressions (SQL, shared by the replicas): sqlite+aiosqlite:///... "
        "(one host) or postgresql+asyncpg://...",
    )
    notifier_migrate_on_start: bool = Field(True, description="Run Alembic migrations to head at start-up")
    silence_link_secret: SecretStr = Field(
        SecretStr(""),
        description="HMAC key of the 'silence this job for 1 h' links (the dashboard's is the same); "
        "empty: cards carry no such link",
    )
    silence_link_ttl_seconds: int = Field(
        7 * 24 * 3600, gt=0, description="How long a card's silence link can be used"
    )

    redis_prefix: str = Field("trainwatch", description="Prefix of the notifier's Redis keys")
    redis_max_connections: int = Field(
        50, ge=1, description="Redis connections shared by the consumer, the order keeper and the senders"
    )
    idempotency_ttl_seconds: int = Field(
        14 * 24 * 3600, gt=0, description="How long a (event, channel) send is remembered (> JOBS max_age)"
    )
    unconfirmed_after_seconds: float = Field(
        120.0,
        gt=0,
        description="Age after which a 'held' or 'sending' marker is judged left behind by a crash",
    )
    unconfirmed_policy: Literal["deadletter", "resend"] = Field(
        "resend",
        description="A send whose outcome is unknown (a crash with its request out): resend it, "
        "marked as a resend under the same idempotency key (never lost), or dead-letter it "
        "(never twice, but lost)",
    )

    shared_rate_limits: bool = Field(
        True, description="Count each bot's rate limits in Redis, across all replicas (else per process)"
    )
    fetch_batch: int = Field(100, ge=1, le=1000)
    max_in_flight: int = Field(1000, ge=1, description="Events held unacked at once (digests hold events)")
    retry_base_seconds: float = Field(1.0, gt=0)
    retry_cap_seconds: float = Field(60.0, gt=0)
    retry_max_seconds: float = Field(
        600.0, gt=0, description="Give up (dead-letter) after retrying this long"
    )
    http_timeout_seconds: float = Field(10.0, gt=0)
    shutdown_grace_seconds: float = Field(10.0, ge=0, description="Time to finish in-flight sends on SIGTERM")
