"""The system under test as real processes on loopback, and the servers it needs.

nats-server, redis-server and PostgreSQL come from the test harness
(``trainwatch_common.testing.servers``); kubesim runs in its own process
(``chaos.kubesim_host``); the registry, the persister, the notifier and the watchers are started
exactly as in production (``python -m trainwatch_<service>``) with settings from the
environment. The Feishu-compatible sink (``trainwatch_notifier.sink``) runs inside the runner,
so the run reads what it accepted directly.

Every child gets SIGKILL when the runner dies (PR_SET_PDEATHSIG) and runs in a session of its
own (Ctrl-C reaches the runner only, which then stops each child by its pid).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from cryptography.fernet import Fernet
from prometheus_client.parser import text_string_to_metric_families

from trainwatch_common.testing.servers import NatsCluster, NatsServer, PostgresServer, RedisServer, free_port
from trainwatch_notifier.sink import FeishuSink

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL it when the runner dies, however it dies."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def base_env() -> dict[str, str]:
    """This process's environment without any TRAINWATCH_ setting a developer may have exported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINWATCH_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env["TRAINWATCH_LOG_FORMAT"] = "text"
    return env


class Proc:
    """One child process, its log file and its HTTP port (health, metrics)."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path, port: int) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.port = port
        self.log_path = log_dir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            log.write(f"==== start {self.starts + 1} at {time.strftime('%H:%M:%S')}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.argv, env=self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent,
            )  # fmt: skip
        self.starts += 1

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def kill(self) -> None:
        """kill -9 by pid, and reap it."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def signal(self, sig: signal.Signals) -> None:
        if self.alive:
            os.kill(self.pid, sig)

    async def terminate(self, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds."""
        if not self.alive:
            return
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
            os.kill(self.process.pid, signal.SIGTERM)
        process = self.process
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(process.wait, grace)
        self.kill()

    async def get(self, path: str, timeout: float = 2.0) -> httpx.Response:
        async with httpx.AsyncClient(timeout=timeout) as client:
            return await client.get(f"http://127.0.0.1:{self.port}{path}")

    async def ready(self) -> bool:
        try:
            return self.alive and (await self.get("/readyz")).status_code == 200
        except httpx.HTTPError:
            return False

    async def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of ``name`` whose labels include ``labels`` (0 if unreachable)."""
        try:
            text = (await self.get("/metrics")).text
        except httpx.HTTPError:
            return 0.0
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
        return total

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


class System:
    """Everything the run starts, with the knobs of its mode."""

    def __init__(
        self, run_dir: Path, *, clusters: int, seed: int, settings: dict[str, str], nats_cluster: bool = False
    ) -> None:
        self.run_dir = run_dir
        self.log_dir = run_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_ids = [f"c{i:02d}" for i in range(1, clusters + 1)]
        self.seed = seed
        self.settings = settings  # mode-specific TRAINWATCH_* values
        (run_dir / "nats").mkdir(exist_ok=True)
        (run_dir / "redis").mkdir(exist_ok=True)
        # One nats-server, or (``nats_cluster``) three forming one JetStream cluster, every stream
        # with three replicas and every service given all three URLs, as the shipped deploy runs.
        self.nats: NatsServer | None = None
        self.nats_cluster: NatsCluster | None = None
        if nats_cluster:
            self.nats_cluster = NatsCluster(run_dir / "nats")
        else:
            self.nats = NatsServer(workdir=run_dir / "nats")
        self.redis = RedisServer(workdir=run_dir / "redis")
        self.postgres = PostgresServer()  # its own dir under /tmp: as root it runs as 'postgres'
        self.admin_token = secrets.token_urlsafe(18)
        self.watcher_token = secrets.token_urlsafe(18)
        self.feishu_secret = secrets.token_urlsafe(12)
        self.sink = FeishuSink(secret=self.feishu_secret, tokens=[self.bot(c) for c in self.cluster_ids])
        self.sink_port = free_port()
        self.kubesim: Proc | None = None
        self.registry: Proc | None = None
        self.persister: Proc | None = None
        self.notifier: Proc | None = None
        self.watchers: dict[str, Proc] = {}
        self._watcher_count = 0
        self.database_url = ""

    @staticmethod
    def bot(cluster_id: str) -> str:
        return f"bot-{cluster_id}"

    # -- servers --------------------------------------------------------------------------
    @property
    def nats_urls(self) -> list[str]:
        if self.nats_cluster is not None:
            return [node.url for node in self.nats_cluster.nodes]
        assert self.nats is not None
        return [self.nats.url]

    @property
    def stream_replicas(self) -> int:
        return len(self.nats_urls)

    def start_servers(self) -> None:
        """Blocking (a server's start waits for its ready line): call it from a thread."""
        if self.nats_cluster is not None:
            self.nats_cluster.start()
        else:
            assert self.nats is not None
            self.nats.start()
        self.redis.start()
        self.postgres.start()
        self.database_url = self.postgres.create_database("chaos")

    def common_env(self) -> dict[str, str]:
        return {
            **base_env(),
            "TRAINWATCH_NATS_URL": ",".join(self.nats_urls),
            "TRAINWATCH_STREAM_REPLICAS": str(self.stream_replicas),
            "TRAINWATCH_REDIS_URL": self.redis.url,
            "TRAINWATCH_ADMIN_TOKENS": self.admin_token,
            "TRAINWATCH_VIEWER_TOKENS": self.admin_token,
            "TRAINWATCH_WATCHER_TOKENS": self.watcher_token,
            "TRAINWATCH_ALLOW_LOOPBACK_SERVERS": "true",  # kubesim listens on 127.0.0.1
            **self.settings,
        }

    def _proc(self, name: str, module: str, env: dict[str, str], *args: str) -> Proc:
        port = free_port()
        env = {**self.common_env(), "TRAINWATCH_HTTP_PORT": str(port), **env}
        return Proc(name, [sys.executable, "-m", module, *args], env, self.log_dir, port)

    # -- kubesim ----------------------------------------------------------------------------
    def start_kubesim(self, *, rate: float, concurrency: int) -> Proc:
        control = free_port()
        self.kubesim = Proc(
            "kubesim",
            [sys.executable, "-m", "chaos.kubesim_host", "--clusters", str(len(self.cluster_ids)),
             "--seed", str(self.seed), "--rate", str(rate), "--concurrency", str(concurrency),
             "--control-port", str(control), "--workdir", str(self.run_dir / "kubesim")],
            base_env(), self.log_dir, control,
        )  # fmt: skip
        self.kubesim.start()
        return self.kubesim

    # -- services ---------------------------------------------------------------------------
    @property
    def registry_url(self) -> str:
        assert self.registry is not None
        return f"http://127.0.0.1:{self.registry.port}"

    def start_registry(self) -> Proc:
        self.registry = self._proc("registry", "trainwatch_registry", {
            "TRAINWATCH_REGISTRY_DATABASE_URL": f"sqlite+aiosqlite:///{self.run_dir / 'registry.db'}",
            "TRAINWATCH_REGISTRY_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
        })  # fmt: skip
        self.registry.start()
        return self.registry

    def start_persister(self) -> Proc:
        if self.persister is None:
            self.persister = self._proc("persister", "trainwatch_persister", {
                "TRAINWATCH_DATABASE_URL": self.database_url,
                "TRAINWATCH_RETRY_MAX_SECONDS": "1",  # back within a second of PostgreSQL
            })  # fmt: skip
        self.persister.start()
        return self.persister

    def write_rules(self) -> Path:
        """One Feishu bot per cluster, cards for the default phases, no digests: every routed
        event becomes one card the run can match to its job (a digest lists only some jobs)."""
        lines = ["version: 1", "channels:"]
        for c in self.cluster_ids:
            lines.append(
                f'  {self.bot(c)}: {{type: feishu, url: "${{CHAOS_FEISHU_URL_{c.upper()}}}", '
                f'secret: "${{CHAOS_FEISHU_SECRET}}", format: card, digest: {{enabled: false}}}}'
            )
        lines.append("rules:")
        for c in self.cluster_ids:
            lines.append(f"  - {{name: chaos-{c}, match: {{clusters: [{c}]}}, channels: [{self.bot(c)}]}}")
        path = self.run_dir / "rules.yaml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def start_notifier(self) -> Proc:
        if self.notifier is None:
            env = {
                "TRAINWATCH_RULES_FILE": str(self.write_rules()),
                "CHAOS_FEISHU_SECRET": self.feishu_secret,
                **{f"CHAOS_FEISHU_URL_{c.upper()}": self.sink.url(self.bot(c)) for c in self.cluster_ids},
            }
            self.notifier = self._proc("notifier", "trainwatch_notifier", env)
        self.notifier.start()
        return self.notifier

    def start_watcher(self) -> Proc:
        """A new replica (a new pod: a new instance id)."""
        self._watcher_count += 1
        name = f"w{self._watcher_count}"
        watcher = self._proc(name, "trainwatch_watcher", {
            "TRAINWATCH_INSTANCE_ID": name,
            "TRAINWATCH_REGISTRY_URL": self.registry_url,
            "TRAINWATCH_WATCHER_TOKEN": self.watcher_token,
        })  # fmt: skip
        self.watchers[name] = watcher
        watcher.start()
        return watcher

    @property
    def live_watchers(self) -> list[Proc]:
        return [w for w in self.watchers.values() if w.alive]

    def services(self) -> list[Proc]:
        return [p for p in (self.registry, self.persister, self.notifier) if p is not None]

    async def start_sink(self) -> None:
        await self.sink.start(port=self.sink_port)

    # -- stopping -----------------------------------------------------------------------------
    async def stop_all(self) -> None:
        """Producers first (watchers, kubesim), then consumers, then the servers; each child by
        its pid, SIGTERM then SIGKILL. Safe to call twice and after a partial start."""
        for watcher in self.watchers.values():
            watcher.signal(signal.SIGCONT)
        await asyncio.gather(*(w.terminate(5) for w in self.watchers.values()))
        for proc in (self.kubesim, self.notifier, self.persister, self.registry):
            if proc is not None:
                await proc.terminate(5)
        with contextlib.suppress(Exception):
            await self.sink.stop()
        await asyncio.to_thread(self.stop_servers)

    def stop_servers(self) -> None:
        nats_servers = self.nats_cluster.nodes if self.nats_cluster is not None else [self.nats]
        for server in (self.postgres, self.redis, *nats_servers):
            if server is None:
                continue
            with contextlib.suppress(Exception):
                if server is self.postgres:
                    server.kill()  # a smart shutdown would wait for the persister's sessions
                else:
                    server.stop()
        with contextlib.suppress(Exception):
            shutil.rmtree(self.postgres.workdir, ignore_errors=True)

    def describe(self) -> dict[str, Any]:
        return {
            "nats": ",".join(self.nats_urls),
            "redis": self.redis.url,
            "postgres": self.database_url,
            "sink": f"http://127.0.0.1:{self.sink_port}",
            "logs": str(self.log_dir),
        }
