"""The server address policy lives in ``trainwatch_common.addresses``: the watcher enforces the
same rules at connect time. Re-exported here for the registry's modules."""

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
    "server_url_problems",
]
