"""The persister's settings, read from TRAINWATCH_* environment variables."""

from __future__ import annotations

from pydantic import Field

from trainwatch_common.settings import ServiceSettings

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./trainwatch.db"


class PersisterSettings(ServiceSettings):
    http_port: int = Field(
        8082, ge=0, le=65535, description="Query API, /healthz, /readyz, /metrics (0 = any)"
    )
    database_url: str = Field(
        DEFAULT_DATABASE_URL,
        description="SQLAlchemy URL; postgresql:// and sqlite:/// are given their async drivers",
    )
    migrate_on_start: bool = Field(True, description="Run the Alembic migrations before serving")
    consume: bool = Field(True, description="Run the JetStream consumer (False: serve queries only)")

    batch_size: int = Field(500, ge=1, le=10_000, description="Most events written in one transaction")
    batch_max_wait_ms: int = Field(200, ge=1, description="Longest wait for a batch to fill")
    batch_coalesce_ms: int = Field(
        100,
        ge=0,
        description="After a fetch smaller than batch_size, how long to wait for more before writing "
        "(one transaction for the events that trickle in meanwhile; 0 = write each fetch at once)",
    )
    retry_initial_seconds: float = Field(0.2, gt=0, description="First back-off after a database error")
    retry_max_seconds: float = Field(10.0, gt=0, description="Longest back-off between database retries")

    retention_days: float = Field(
        90.0, ge=0, description="Transitions and deleted jobs older than this are pruned (0 = keep forever)"
    )
    prune_interval_seconds: float = Field(3600.0, gt=0, description="How often the pruning task runs")
    jobs_gauge_interval_seconds: float = Field(
        15.0, gt=0, description="How often trainwatch_persister_jobs{cluster,kind,phase} is read from SQL"
    )
