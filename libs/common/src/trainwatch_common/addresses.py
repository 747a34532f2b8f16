"""Where a registered API server may live: the server-URL half of kubeconfig intake.

The registry (connectivity tests) and every watcher connect to the URL an operator typed in,
so a URL aimed at the host itself (loopback), at the link-local range, or at a cloud metadata
service would turn Trainwatch into a way to reach what only the host should reach. These are
refused unless the operator allows loopback / link-local servers; metadata services are
refused always (no Kubernetes API lives there).

The policy is checked three times, because a name is not an address: on the URL as written
(intake), on every address the name resolves to when the registry accepts it, and again on the
resolved address each time a watcher connects (``checked_addresses``), since DNS may change
after intake (``vm`` -> 127.0.0.1, ``169.254.169.254.nip.io``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import unicodedata
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean...
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud (OCI) instance metadata
        "168.63.129.16",  # Azure wire server (host agent, DNS, health probes)
        "fd20:ce::254",  # GCP metadata over IPv6
    )
)
# Label separators IDNA treats as a full stop: ideographic, fullwidth and halfwidth ideographic.
_DOTS = re.compile("[\u3002\uff0e\uff61]")
# Wildcard DNS services answer <ip>.nip.io with <ip>; seen as the address they name, with no DNS.
_WILDCARD_DNS = re.compile(
    r"(?:^|[.-])(\d{1,3}[.-]\d{1,3}[.-]\d{1,3}[.-]\d{1,3})\.(?:nip\.io|sslip\.io|xip\.io|traefik\.me)$"
)
_METADATA_NAMES = frozenset(
    {"metadata", "metadata.google.internal", "instance-data", "metadata.azure.internal"}
)
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    allow_loopback: bool = False
    allow_link_local: bool = False


@dataclass(frozen=True, slots=True)
class ServerProblem:
    code: str
    message: str


def parse_host_ip(host: str) -> IPAddress | None:
    """The address a host string denotes, including the legacy IPv4 forms resolvers accept.

    ``2130706433``, ``0x7f.1`` and ``127.1`` all mean 127.0.0.1 to getaddrinfo.
    """
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if host and all(ch in "0123456789abcdefxABCDEFX." for ch in host) and any(c.isdigit() for c in host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def address_problem(ip: IPAddress, policy: AddressPolicy) -> ServerProblem | None:
    """Why an API server must not live at ``ip``, or None."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip in _METADATA_ADDRESSES:
        return ServerProblem("server_metadata", f"server address {ip} is a cloud metadata service")
    if (ip.is_loopback or ip.is_unspecified) and not policy.allow_loopback:
        return ServerProblem(
            "server_loopback",
            f"server address {ip} is loopback-only (set TRAINWATCH_ALLOW_LOOPBACK_SERVERS=true to allow)",
        )
    if ip.is_link_local and not policy.allow_link_local:
        return ServerProblem(
            "server_link_local",
            f"server address {ip} is link-local (set TRAINWATCH_ALLOW_LINK_LOCAL_SERVERS=true to allow)",
        )
    # Python counts ::1 and :: as "reserved" (all of ::/8 is): loopback and unspecified were
    # decided above, so an allowed [::1] is not refused here.
    if ip.is_multicast or (ip.is_reserved and not (ip.is_loopback or ip.is_unspecified)):
        return ServerProblem("server_address", f"server address {ip} cannot be an API server")
    return None


def normalize_host(host: str) -> str:
    """The host name a resolver will look up: NFKC-folded, IDNA dots as '.', lower case, no
    trailing dot. ``metadata。google。internal`` and fullwidth digits become what they mean."""
    name = unicodedata.normalize("NFKC", host)
    return _DOTS.sub(".", name).lower().rstrip(".")


def host_problem(host: str, policy: AddressPolicy) -> ServerProblem | None:
    """Why ``host`` (a name or an address, as written in the URL) is refused, or None."""
    name = normalize_host(host)
    if name in _METADATA_NAMES:
        return ServerProblem("server_metadata", f"server host {host!r} is a cloud metadata service")
    if (name in _LOOPBACK_NAMES or name.endswith(".localhost")) and not policy.allow_loopback:
        return ServerProblem(
            "server_loopback",
            f"server host {host!r} is loopback-only (set TRAINWATCH_ALLOW_LOOPBACK_SERVERS=true to allow)",
        )
    ip = parse_host_ip(name)
    if ip is None and (wildcard := _WILDCARD_DNS.search(name)) is not None:
        ip = parse_host_ip(wildcard.group(1).replace("-", "."))
    return address_problem(ip, policy) if ip is not None else None


class AddressRefused(OSError):
    """The host resolves to an address the policy refuses (an OSError: a connection failure)."""

    def __init__(self, problem: ServerProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


async def checked_addresses(host: str, port: int, policy: AddressPolicy) -> list[IPAddress]:
    """Resolve ``host`` and return its addresses, or raise ``AddressRefused`` if any is refused.

    One refused address refuses the name: a client may pick any of them, and a name that mixes
    a public address with 127.0.0.1 is an attack, not a configuration. Resolution failures
    propagate as the resolver's own ``OSError``.
    """
    problem = host_problem(host, policy)
    if problem is not None:
        raise AddressRefused(problem)
    name = normalize_host(host)
    ip = parse_host_ip(name)
    if ip is not None:
        return [ip]
    infos = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_STREAM)
    addresses: list[IPAddress] = []
    for info in infos:
        address = parse_host_ip(str(info[4][0]).split("%")[0])
        if address is None:
            continue
        problem = address_problem(address, policy)
        if problem is not None:
            message = f"{host!r} resolves to a refused address: {problem.message}"
            raise AddressRefused(ServerProblem(problem.code, message))
        if address not in addresses:
            addresses.append(address)
    return addresses


def server_url_problems(server: str, policy: AddressPolicy) -> list[ServerProblem]:
    """Every reason the API server URL is refused (an empty list means it is acceptable)."""
    if any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in server):
        return [ServerProblem("server_url", "server URL contains whitespace or control characters")]
    try:
        parts = urlsplit(server)
        port = parts.port
    except ValueError as exc:
        return [ServerProblem("server_url", f"server URL is malformed: {exc}")]
    problems: list[ServerProblem] = []
    if parts.scheme.lower() != "https":
        problems.append(ServerProblem("server_not_https", f"server URL must use https, not {parts.scheme!r}"))
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        problems.append(
            ServerProblem("server_credentials", "server URL carries credentials (user:password@)")
        )
    if parts.query or parts.fragment:
        problems.append(ServerProblem("server_url", "server URL carries a query or fragment"))
    host = parts.hostname
    if not host:
        problems.append(ServerProblem("server_url", "server URL names no host"))
        return problems
    if port == 0:
        problems.append(ServerProblem("server_url", "server URL has port 0"))
    problem = host_problem(host, policy)
    if problem is not None:
        problems.append(problem)
    return problems
