"""Registry latency: p50/p99 of create and list with 1,000 clusters, on SQLite and PostgreSQL.

    uv run python bench/registry/run.py [--clusters 1000] [--backends sqlite,postgres]

The registry runs as its own process (``python -m trainwatch_registry``) on loopback, with a
real nats-server (so the outbox relay publishes every event) and the database under test. The
client sends one request at a time, so the figures are latencies, not throughput. The baseline
is the same registry's ``/healthz`` round trip measured in the same run: ratios against it show
what the work costs beyond HTTP. Bounded: about a minute in all on a 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import nats
import yaml
from cryptography.fernet import Fernet

from trainwatch_common.testing import NatsServer, PostgresServer, free_port

ADMIN = {"Authorization": "Bearer bench-admin"}


def _self_signed_ca() -> str:
    """A CA certificate for the kubeconfigs (intake checks the PEM; nothing connects)."""
    from datetime import UTC, datetime, timedelta

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench-ca")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    return base64.b64encode(cert.public_bytes(serialization.Encoding.PEM)).decode()


CA = _self_signed_ca()


def kubeconfig(index: int) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": f"https://k8s-{index}.example.com:6443",
                                                   "certificate-authority-data": CA}}],
            "users": [{"name": "u", "user": {"token": f"bench-token-{index:06d}"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
    )  # fmt: skip


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"n": len(ordered), "p50_ms": statistics.median(ordered) * 1000, "p99_ms": p99 * 1000}


async def timed(client: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> float:
    started = time.perf_counter()
    response = await client.request(method, url, **kwargs)
    elapsed = time.perf_counter() - started
    if response.status_code >= 300:
        raise RuntimeError(f"{method} {url}: {response.status_code} {response.text[:300]}")
    return elapsed


async def wait_ready(base: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient(base_url=base) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError("registry exited during start-up")
            try:
                if (await client.get("/readyz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError("registry not ready within 60 s")


async def published(nats_url: str) -> int:
    client = await nats.connect(nats_url)
    try:
        return int((await client.jetstream().stream_info("CLUSTERS")).state.messages)
    finally:
        await client.close()


async def wait_published(nats_url: str, expected: int) -> int:
    """How many events the relay published, once it reached ``expected`` (or after 60 s)."""
    deadline = time.monotonic() + 60
    count = await published(nats_url)
    while count < expected and time.monotonic() < deadline:  # polling another process
        await asyncio.sleep(0.1)
        count = await published(nats_url)
    return count


async def measure(
    backend: str, database_url: str, nats_url: str, clusters: int, workdir: Path
) -> dict[str, Any]:
    port = free_port()
    env = dict(
        os.environ,
        TRAINWATCH_REGISTRY_DATABASE_URL=database_url,
        TRAINWATCH_NATS_URL=nats_url,
        TRAINWATCH_REGISTRY_ENCRYPTION_KEYS=Fernet.generate_key().decode(),
        TRAINWATCH_ADMIN_TOKENS="bench-admin",
        TRAINWATCH_HTTP_PORT=str(port),
        TRAINWATCH_LOG_LEVEL="WARNING",
    )
    log = open(workdir / f"registry-{backend}.log", "wb")  # noqa: SIM115 - closed below
    command = [sys.executable, "-m", "trainwatch_registry"]
    process = subprocess.Popen(command, env=env, stdout=log, stderr=log)  # noqa: ASYNC220 - started once
    base = f"http://127.0.0.1:{port}"
    try:
        await wait_ready(base, process)
        async with httpx.AsyncClient(base_url=base, headers=ADMIN, timeout=30) as client:
            for _ in range(50):  # warm-up: connections, caches, the first queries
                await timed(client, "GET", "/healthz")
            baseline = [await timed(client, "GET", "/healthz") for _ in range(1000)]
            started = time.perf_counter()
            creates = []
            for index in range(clusters):
                body = {
                    "id": f"cluster-{index:04d}",
                    "name": f"Cluster {index}",
                    "labels": {"n": str(index % 10)},
                    "kubeconfig": kubeconfig(index),
                }
                creates.append(await timed(client, "POST", "/v1/clusters", json=body))
            create_wall = time.perf_counter() - started
            list_page = [
                await timed(client, "GET", "/v1/clusters", params={"limit": 100}) for _ in range(200)
            ]
            list_all = [await timed(client, "GET", "/v1/clusters", params={"limit": 1000}) for _ in range(30)]
            get_one = [
                await timed(client, "GET", f"/v1/clusters/cluster-{i:04d}") for i in range(0, clusters, 5)
            ]
        events = await wait_published(nats_url, clusters)
    finally:
        process.terminate()
        process.wait(20)
        log.close()
    return {
        "backend": backend,
        "healthz (baseline)": percentiles(baseline),
        "create": percentiles(creates),
        "list 100 of N": percentiles(list_page),
        "list all N": percentiles(list_all),
        "get one": percentiles(get_one),
        "create_per_second": clusters / create_wall,
        "events_published": events,
    }


def report(results: list[dict[str, Any]], clusters: int) -> None:
    print(f"\nRegistry latency with {clusters} clusters (sequential requests over loopback HTTP)\n")
    print("| backend | operation | n | p50 ms | p99 ms | p99 / healthz p99 |")
    print("|---|---|---|---|---|---|")
    for result in results:
        base = result["healthz (baseline)"]["p99_ms"]
        for name in ("healthz (baseline)", "create", "list 100 of N", "list all N", "get one"):
            row = result[name]
            print(f"| {result['backend']} | {name} | {row['n']} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} "
                  f"| {row['p99_ms'] / base:.1f}x |")  # fmt: skip
    for result in results:
        events = f"{result['events_published']}/{clusters}"
        rate = result["create_per_second"]
        print(f"\n{result['backend']}: {rate:.0f} creates/s; {events} events published by the outbox relay")


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--json", type=Path, help="Also write the figures here")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="trainwatch-bench-registry-") as tmp:
        workdir = Path(tmp)
        for backend in args.backends.split(","):
            with NatsServer() as nats_server:
                if backend == "sqlite":
                    url = f"sqlite+aiosqlite:///{workdir / 'registry.db'}"
                    results.append(await measure(backend, url, nats_server.url, args.clusters, workdir))
                elif backend == "postgres":
                    with PostgresServer() as pg:
                        url = pg.create_database("bench").replace("postgresql://", "postgresql+asyncpg://")
                        results.append(await measure(backend, url, nats_server.url, args.clusters, workdir))
                else:
                    raise SystemExit(f"unknown backend {backend!r}")
    report(results, args.clusters)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
