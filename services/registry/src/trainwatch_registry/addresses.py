"""The server address policy lives in ``trainwatch_common.addresses``: the watcher enforces the
same rules at connect time. Re-exported here for the registry's modules."""

from urllib.parse import urlsplit

from trainwatch_common.addresses import (
    AddressPolicy,
    AddressRefused,
    IPAddress,
    ServerProblem,
    address_problem,
    checked_addresses,
    host_problem,
    normalize_host,
    parse_host_ip,
    server_url_problems,
)

__all__ = [
    "AddressPolicy",
    "AddressRefused",
    "IPAddress",
    "ServerProblem",
    "address_problem",
    "checked_addresses",
    "host_problem",
    "normalize_host",
    "parse_host_ip",
    "server_key",
    "server_url_problems",
]


def server_key(server: str) -> tuple[str, str, int, str]:
    """An API server URL compared as the apiserver it names: host case and an explicit :443 or a
    trailing slash do not make a second cluster (one registration per API server)."""
    parts = urlsplit(server.strip())
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme.lower(), (parts.hostname or "").lower(), port, parts.path.rstrip("/")
