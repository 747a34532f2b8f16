"""The dashboard's settings, read from TRAINWATCH_* environment variables."""

from __future__ import annotations

from pydantic import Field, SecretStr

from trainwatch_common.settings import ServiceSettings


class DashboardSettings(ServiceSettings):
    http_port: int = Field(8080, ge=0, le=65535, description="The page, its SSE streams and /healthz")
    registry_url: str = Field("http://127.0.0.1:8081", description="The registry API (clusters)")
    query_url: str = Field("http://127.0.0.1:8082", description="The persister's query API (jobs)")
    notifier_url: str = Field("http://127.0.0.1:8083", description="The notifier's admin API (silences)")
    silence_link_secret: SecretStr = Field(
        SecretStr(""),
        description="HMAC key of the notifier's 'silence this job for 1 h' links (the notifier's is the "
        "same); empty: such links are refused",
    )
    dashboard_api_token: SecretStr = Field(
        SecretStr(""), description="A viewer token the dashboard presents to the registry and query APIs"
    )
    dashboard_admin_token: SecretStr = Field(
        SecretStr(""),
        description=(
            "Optional. When set, every visitor may administer clusters without signing in: for a "
            "trusted local setup only. Otherwise an admin signs in with their own admin token."
        ),
    )
    backend_timeout_seconds: float = Field(10.0, gt=0)
    page_size: int = Field(50, ge=1, le=500, description="Jobs per page")
    sse_queue_size: int = Field(
        256, ge=1, description="Events buffered per browser; a client that falls further behind is dropped"
    )
    sse_heartbeat_seconds: float = Field(15.0, gt=0)
    secure_cookies: bool | None = Field(
        None,
        description=(
            "Mark cookies Secure. Unset: Secure unless the request is plain http to a loopback address "
            "(make run); set true behind HTTPS, which the manifests do"
        ),
    )
    dashboard_allowed_hosts: str = Field(
        "localhost,127.0.0.1,::1",
        description=(
            "Comma-separated host names this dashboard answers to (the Host header, port ignored). "
            "Anything else is refused, so a DNS-rebound name cannot reach the pages or the admin actions"
        ),
    )
    dashboard_public_read: bool = Field(
        False,
        description=(
            "An open read-only demo: the jobs and clusters pages need no sign-in. Off by default: "
            "pages show API server URLs and job details, so a viewer signs in"
        ),
    )
    auth_failures_per_minute: int = Field(
        10, ge=1, description="Failed sign-ins per client address per minute before answering 429"
    )
    session_check_seconds: float = Field(
        60.0, gt=0, description="How long a token the registry accepted is trusted before asking again"
    )

    def allowed_hosts(self) -> frozenset[str]:
        return frozenset(
            h.strip().lower().strip("[]") for h in self.dashboard_allowed_hosts.split(",") if h.strip()
        )
