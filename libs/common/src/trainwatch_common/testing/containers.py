"""The last resort for test servers: testcontainers, when a binary is missing and Docker answers.

testcontainers is not a dependency (no Docker engine runs on our CI machines); install it
where one does: `uv pip install testcontainers`. Containers serve the plain URL fixtures only;
fault tests (``*_process`` fixtures) need the local binaries, since they stop and restart them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from trainwatch_common.testing.servers import ServerMissing

# kind -> (image, port, command, log line when ready, URL template)
_IMAGES: dict[str, tuple[str, int, str, str, str]] = {
    "nats": ("nats:2.10-alpine", 4222, "-js", "Server is ready", "nats://{host}:{port}"),
    "redis": ("redis:7-alpine", 6379, "redis-server", "Ready to accept connections", "redis://{host}:{port}/0"),
    "postgres": (
        "postgres:16-alpine", 5432, "postgres", "database system is ready to accept connections",
        "postgresql://postgres@{host}:{port}/postgres",
    ),
}  # fmt: skip


@contextlib.contextmanager
def container_url(kind: str) -> Iterator[str]:
    try:
        from testcontainers.core.container import DockerContainer  # type: ignore[import-not-found]
        from testcontainers.core.waiting_utils import wait_for_logs  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ServerMissing(
            f"{kind} binary missing and a Docker engine answers: install testcontainers "
            "(`uv pip install testcontainers`) or the binary (`make test` installs it as root)"
        ) from exc
    image, port, command, ready, template = _IMAGES[kind]
    container = DockerContainer(image).with_exposed_ports(port).with_command(command)
    if kind == "postgres":
        container = container.with_env("POSTGRES_HOST_AUTH_METHOD", "trust")
    with container:
        wait_for_logs(container, ready, timeout=60)
        yield template.format(host=container.get_container_host_ip(), port=container.get_exposed_port(port))
