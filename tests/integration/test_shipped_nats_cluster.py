"""The NATS cluster docker-compose.yml ships, run for real (issue 17): three nats-server processes
with deploy/k8s/nats.conf and each node's command-line flags taken from the compose file (only
host names become loopback ports). The registry's user creates R3 streams (the streams' one
owner), the persister's may not; the watcher's publishing goes on when a node is killed."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
import yaml

from trainwatch_common import job_subject
from trainwatch_common.streams import JOBS_STREAM, StreamSettings, ensure_streams
from trainwatch_common.testing import NatsServer, free_port
from trainwatch_common.testing.servers import nats_server_binary

ROOT = Path(__file__).resolve().parents[2]
NODES = ("nats-1", "nats-2", "nats-3")
USERS = ("registry", "watcher", "notifier", "persister", "dashboard")


class ComposeNode(NatsServer):
    def __init__(self, *, workdir: Path, flags: list[str]) -> None:
        super().__init__(workdir=workdir)
        self.flags = flags

    def command(self) -> list[str]:
        store = self.workdir / "jetstream"
        return [nats_server_binary(), *self.flags, "-a", "127.0.0.1", "-p", str(self.port), "-m", "0",
                "-sd", str(store)]  # fmt: skip


@pytest.fixture
def compose_nats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[dict[str, ComposeNode], dict[str, str]]]:
    passwords = {user: "pw" + secrets.token_hex(16) for user in USERS}
    for user, password in passwords.items():
        monkeypatch.setenv(f"TRAINWATCH_NATS_{user.upper()}_PASSWORD", password)
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    route_ports = {node: free_port() for node in NODES}
    nodes: dict[str, ComposeNode] = {}
    for node in NODES:
        flags = [str(flag) for flag in compose[node]["command"]]
        flags[flags.index("/etc/nats/nats.conf")] = str(ROOT / "deploy" / "k8s" / "nats.conf")
        store = flags.index("-sd")
        del flags[store : store + 2]  # the harness's own store directory instead
        line = " ".join(flags).replace("0.0.0.0:6222", f"127.0.0.1:{route_ports[node]}")
        for other, port in route_ports.items():
            line = line.replace(f"{other}:6222", f"127.0.0.1:{port}")
        nodes[node] = ComposeNode(workdir=tmp_path / node, flags=line.split(" "))
        nodes[node].workdir.mkdir()
    try:
        for server in nodes.values():
            server.start()
        yield nodes, passwords
    finally:
        for server in nodes.values():
            server.close()


async def test_the_shipped_cluster_replicates_and_survives_a_node(
    compose_nats: tuple[dict[str, ComposeNode], dict[str, str]],
) -> None:
    nodes, passwords = compose_nats
    urls = [server.url for server in nodes.values()]

    async def connect(user: str) -> nats.aio.client.Client:
        return await nats.connect(urls, user=user, password=passwords[user], max_reconnect_attempts=-1,
                                  reconnect_time_wait=0.1)  # fmt: skip

    registry, watcher, persister = (
        await connect("registry"),
        await connect("watcher"),
        await connect("persister"),
    )
    try:
        settings = StreamSettings(stream_replicas=3)
        deadline = time.monotonic() + 30
        while True:  # the cluster elects its meta leader first
            try:
                await ensure_streams(registry.jetstream(timeout=3), settings)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
        js = watcher.jetstream(timeout=3)
        info = await js.stream_info(JOBS_STREAM.name or "")
        assert info.config.num_replicas == 3
        with pytest.raises(Exception, match=r"(?i)timeout|permission|authoriz"):
            await persister.jetstream(timeout=2).update_stream(config=info.config)

        async def publish(index: int) -> None:
            subject = job_subject(cluster_id="c", namespace="ns", kind_key="job", name=f"j{index}")
            while True:
                try:
                    await js.publish(subject, b"{}", headers={"Nats-Msg-Id": f"m{index}"}, timeout=2)
                    return
                except (TimeoutError, nats.errors.Error):
                    await asyncio.sleep(0.1)

        for index in range(50):
            await publish(index)
        leader = (await js.stream_info(JOBS_STREAM.name or "")).cluster.leader  # type: ignore[union-attr]
        assert leader in nodes
        nodes[leader].kill()
        killed = time.monotonic()
        for index in range(50, 100):
            await publish(index)
        print(
            f"shipped NATS cluster: {leader} (JOBS leader) killed, "
            f"50 more acked in {time.monotonic() - killed:.2f}s"
        )
        assert (await js.stream_info(JOBS_STREAM.name or "")).state.messages == 100
    finally:
        for client in (registry, watcher, persister):
            await client.close()
