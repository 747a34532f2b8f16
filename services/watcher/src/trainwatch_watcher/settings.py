"""The watcher's settings, from TRAINWATCH_* environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr

from trainwatch_common.settings import ServiceSettings
from trainwatch_watcher.claims import ClaimSettings


class WatchTimings(ServiceSettings):
    """Timings of the list/watch machinery; tests shorten them."""

    # As client-go's reflector: each watch asks for a random timeoutSeconds in [w, 2w] (w = 5 min),
    # so reconnects of many informers spread out. Real bookmarks come only when the resource changed
    # (none on an idle one, none at all without the watch cache), so silence is normal on a watch
    # and no read timeout may be shorter than the watch's own lifetime.
    watch_timeout_seconds: int = Field(
        300,
        ge=1,
        description="Minimum timeoutSeconds asked of the server; each watch asks a random value in [w, 2w]",
    )
    read_timeout: float = Field(
        30.0,
        gt=0,
        description="A watch still silent this long after its timeoutSeconds has passed is dead: reconnect",
    )
    silence_probe_interval: float = Field(
        60.0,
        gt=0,
        description=(
            "A watch silent this long is probed on a new connection: the server's resourceVersion "
            "(behind ours: etcd restored, relist) and whether the stream missed events (server stopping)"
        ),
    )
    probe_watch_seconds: int = Field(
        1, ge=1, description="timeoutSeconds of the short watch a probe opens to look for missed events"
    )
    busy_retry: float = Field(
        1.0, gt=0, description="Wait after a 429 (storage initializing), as the server's Retry-After says"
    )
    connect_timeout: float = Field(10.0, gt=0)
    request_timeout: float = Field(60.0, gt=0, description="Whole-request timeout of LIST and discovery")
    list_page_size: int = Field(500, ge=1)
    backoff_initial: float = Field(1.0, gt=0)
    backoff_max: float = Field(30.0, gt=0)
    backoff_reset_after: float = Field(60.0, gt=0, description="A connection stable this long resets backoff")
    rediscovery_interval: float = Field(60.0, gt=0, description="How often served kinds are re-read")
    use_watch_list: bool = Field(
        True, description="Use sendInitialEvents (WatchList) where the server has it"
    )
    tcp_keepalive_idle: int = Field(
        30,
        ge=1,
        description="Seconds of idle before TCP keepalive probes: a dead peer is noticed in ~2x this",
    )
    max_response_bytes: int = Field(
        32 * 1024 * 1024,
        ge=1024,
        description="Largest LIST page or discovery answer read (lower list_page_size if a page is larger)",
    )
    max_event_bytes: int = Field(
        16 * 1024 * 1024, ge=1024, description="Largest line of a watch stream (one event) read"
    )
    # The same switches, with the same names, as the registry's intake: the watcher checks the
    # address it actually connects to, which may differ from what the registry saw.
    allow_loopback_servers: bool = Field(
        False, description="Connect to API servers on loopback addresses (tests, local demo)"
    )
    allow_link_local_servers: bool = Field(
        False, description="Connect to API servers on link-local addresses"
    )


class WatcherSettings(WatchTimings, ClaimSettings):
    registry_url: str | None = Field(None, description="Registry base URL, for connection configs")
    watcher_token: SecretStr | None = Field(None, description="Bearer token with the watcher role")
    kubeconfig_dir: Path | None = Field(
        None, description="Folder of <cluster-id>.yaml kubeconfigs: a static cluster set, no registry needed"
    )
    health_interval: float = Field(30.0, gt=0, description="Cluster health is re-published this often")
    kind_return_poll: float = Field(
        1.0,
        gt=0,
        description="Where CRDs cannot be watched: rediscover this often after a kind went away (404)",
    )
    kind_return_window: float = Field(
        600.0, gt=0, description="...for this long after it went away; then only every rediscovery_interval"
    )
    diagnosis_enabled: bool = Field(
        True,
        description="Watch pods, Warning events, Workloads and PodGroups; put a diagnosis on job events",
    )
    diagnosis_log_tails: bool = Field(
        False, description="Attach the redacted tail of the failing container's log (needs get pods/log)"
    )
    diagnosis_log_timeout: float = Field(5.0, gt=0, description="Seconds one log tail fetch may take")
    diagnosis_log_concurrency: int = Field(4, ge=1, description="Log tail fetches at a time, per cluster")
    diagnosis_ready_timeout: float = Field(
        10.0, gt=0, description="How long job informers wait for the evidence to be listed before they start"
    )
    publish_ack_timeout: float = Field(5.0, gt=0)
    publish_max_in_flight: int = Field(1000, ge=1, description="Unacknowledged publishes per informer")
    redis_max_connections: int = Field(50, ge=1, description="Redis connections shared by all informers")
    safety_resync_interval: float = Field(
        300.0, gt=0, description="Re-read the desired cluster set this often"
    )
