"""V5: with the NATS configuration the deploy ships, only the watcher can publish job events.

A real nats-server runs deploy/k8s/nats.conf (the file docker-compose.yml mounts too), with
passwords in its environment as the Secret gives them. Only the listening address, the port and
the JetStream directory are changed on its command line, so the users and permissions tested are
exactly the shipped ones.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml
from nats.aio.client import Client
from pydantic import SecretStr
from security_support import dashboard, registry_app

from trainwatch_common import job_subject
from trainwatch_common.streams import (
    JOBS_STREAM,
    PERSISTER_CONSUMER,
    StreamSettings,
    ensure_consumer,
    ensure_streams,
)
from trainwatch_common.testing import NatsServer, eventually
from trainwatch_common.testing.servers import nats_server_binary

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_CONFIG = ROOT / "deploy" / "k8s" / "nats.conf"
SERVICES = ("registry", "watcher", "notifier", "persister", "dashboard")
FORGED = job_subject(cluster_id="prod-a", namespace="team-a", kind_key="job", name="forged")


class ShippedNats(NatsServer):
    def command(self) -> list[str]:
        store = self.workdir / "jetstream"
        return [
            nats_server_binary(),
            "-c", str(SHIPPED_CONFIG),
            "-a", "127.0.0.1", "-p", str(self.port), "-m", "0", "-sd", str(store),
        ]  # fmt: skip


@pytest.fixture
def passwords(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    # nats-server parses an environment value as config: a password must start with a letter
    # (a leading digit reads as a number), hence the prefix; deploy/example.env says the same.
    chosen = {service: "pw" + secrets.token_hex(24) for service in SERVICES}
    for service, password in chosen.items():  # as the Secret puts them in the server's environment
        monkeypatch.setenv(f"TRAINWATCH_NATS_{service.upper()}_PASSWORD", password)
    return chosen


@pytest.fixture
def shipped_nats(tmp_path: Path, passwords: dict[str, str]) -> Iterator[str]:
    server = ShippedNats(workdir=tmp_path / "nats")
    server.workdir.mkdir()
    server.start()
    try:
        yield server.url
    finally:
        server.close()


async def connect_as(url: str, user: str, password: str, errors: list[Exception] | None = None) -> Client:
    async def on_error(exc: Exception) -> None:
        if errors is not None:
            errors.append(exc)

    return await nats.connect(
        url, user=user, password=password, allow_reconnect=False, max_reconnect_attempts=0, error_cb=on_error
    )


async def test_v5_only_the_watcher_may_publish_job_events(
    shipped_nats: str, passwords: dict[str, str]
) -> None:
    anonymous = Client()
    try:
        with pytest.raises(Exception, match=r"(?i)authorization"):  # no anonymous connections
            await anonymous.connect(shipped_nats, allow_reconnect=False, max_reconnect_attempts=0)
    finally:
        await anonymous.close()  # nats-py keeps the refused socket open otherwise

    clients: dict[str, Client] = {}
    errors: dict[str, list[Exception]] = {service: [] for service in SERVICES}
    try:
        for service in SERVICES:
            clients[service] = await connect_as(shipped_nats, service, passwords[service], errors[service])
        await ensure_streams(clients["registry"].jetstream())  # the streams' one owner
        follower = StreamSettings(manage_streams=False)
        for service in ("watcher", "notifier", "persister"):  # each waits for them at start-up
            await ensure_streams(clients[service].jetstream(), follower)
        with pytest.raises(Exception, match=r"(?i)timeout|permission|authoriz"):  # not the owner
            await ensure_streams(clients["persister"].jetstream(timeout=2), StreamSettings())
        await ensure_consumer(clients["persister"].jetstream(), PERSISTER_CONSUMER)

        ack = (
            await clients["watcher"]
            .jetstream()
            .publish(job_subject(cluster_id="prod-a", namespace="team-a", kind_key="job", name="real"), b"{}")
        )
        assert ack.stream == JOBS_STREAM.name

        for service in ("registry", "notifier", "persister", "dashboard"):
            await clients[service].publish(FORGED, b'{"forged": true}')
            await clients[service].flush()
            await eventually(
                _violation(errors[service], FORGED), timeout=5, message=f"{service}'s publish refused"
            )

        info = await clients["watcher"].jetstream().stream_info(JOBS_STREAM.name or "JOBS")
        assert info.state.messages == 1  # the watcher's event only: nothing forged was stored
        # The real consumers still read what the watcher published.
        pulled = (
            await clients["persister"]
            .jetstream()
            .pull_subscribe(
                "jobs.v1.>", durable=PERSISTER_CONSUMER.config.durable_name, stream=PERSISTER_CONSUMER.stream
            )
        )
        [message] = await pulled.fetch(1, timeout=5)
        assert message.subject.endswith(".real")
        await message.ack()
        # Cluster events and the desired set belong to the registry alone.
        await clients["registry"].jetstream().publish("clusters.v1.added.prod-a", b"{}")
        await clients["notifier"].publish("clusters.v1.added.prod-a", b"{}")
        await clients["notifier"].flush()
        await eventually(
            _violation(errors["notifier"], "clusters.v1.added.prod-a"), timeout=5, message="refused"
        )
        # Nobody may destroy the history.
        with pytest.raises(Exception):  # noqa: B017 - nats-py raises a timeout or an APIError
            await clients["watcher"].jetstream().purge_stream(JOBS_STREAM.name or "JOBS")
        assert (await clients["watcher"].jetstream().stream_info("JOBS")).state.messages == 1
    finally:
        for client in clients.values():
            await client.close()


def _violation(errors: list[Exception], subject: str) -> Callable[[], Awaitable[Any]]:
    async def seen() -> bool:
        text = " ".join(str(e) for e in errors)
        return "permissions violation" in text.lower() and subject in text

    return seen


async def test_v5_services_connect_as_their_own_user_and_work(
    shipped_nats: str, passwords: dict[str, str], tmp_path: Path
) -> None:
    """The services' own connection code with the deploy's settings: the registry creates the
    streams and the clusters bucket, the dashboard's live feed subscribes; neither needs more."""
    registry = registry_app(
        tmp_path,
        nats_url=shipped_nats,
        nats_user="registry",
        nats_password=SecretStr(passwords["registry"]),
    )
    async with registry.router.lifespan_context(registry):
        await eventually(lambda: registry.state.bus.connected, timeout=20, message="registry on NATS")
        async with dashboard(
            "http://127.0.0.1:9",
            nats_url=shipped_nats,
            nats_user="dashboard",
            nats_password=SecretStr(passwords["dashboard"]),
            dashboard_public_read=True,
        ) as client:
            ready = await eventually(
                lambda: _ready(client), timeout=20, message="dashboard's live feed subscribed"
            )
            assert ready


async def _ready(client: Any) -> bool:
    return bool((await client.get("/readyz")).status_code == 200)


def test_v5_compose_and_kubernetes_ship_that_config_with_a_user_per_service() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for node in ("nats-1", "nats-2", "nats-3"):  # a three-node cluster, each node on the shipped config
        assert "./deploy/k8s/nats.conf:/etc/nats/nats.conf:ro" in compose[node]["volumes"]
        assert compose[node]["command"][:2] == ["-c", "/etc/nats/nats.conf"]
    kustomization = yaml.safe_load((ROOT / "deploy" / "k8s" / "kustomization.yaml").read_text())
    assert {"name": "trainwatch-nats-config", "files": ["nats.conf"]} in kustomization["configMapGenerator"]
    assert "nats.yaml" in kustomization["resources"]
    for service in SERVICES:
        assert compose[service]["environment"]["TRAINWATCH_NATS_USER"] == service
        [deployment] = [
            doc
            for doc in yaml.safe_load_all((ROOT / "deploy" / "k8s" / f"{service}.yaml").read_text())
            if doc["kind"] == "Deployment"
        ]
        env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["TRAINWATCH_NATS_USER"]["value"] == service
        assert env["TRAINWATCH_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
            "name": "trainwatch-nats",
            "key": service,
        }
