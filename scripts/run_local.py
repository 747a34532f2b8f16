"""`make run`: the whole Trainwatch system on one machine, with embedded defaults.

Starts a local nats-server (JetStream) and Redis, SQLite databases, the registry, two watcher
replicas, the notifier (to a local Feishu-compatible sink that prints what it receives), the
persister, the dashboard, and kubesim with three clusters running demo jobs of every kind,
which it registers through the registry's API like an operator would. Ctrl-C stops everything.

Why a small launcher rather than honcho and a Procfile: the start has an order that a Procfile
cannot express (servers ready before services; the registry up before clusters are registered
through its API) and honcho stops every process when a one-shot step exits. This launcher stays
small: child processes in their own sessions, their output interleaved with a coloured name,
and on Ctrl-C or SIGTERM a SIGTERM to each in reverse order, then SIGKILL after a grace period,
so no process is left behind.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from cryptography.fernet import Fernet

from trainwatch_common.testing.servers import NatsServer, RedisServer

ROOT = Path(__file__).resolve().parents[1]
RUN_DIR = Path(os.environ.get("TRAINWATCH_RUN_DIR", ROOT / ".run"))
COLOURS = ["36", "32", "33", "35", "34", "31", "96", "92", "93", "95"]
GRACE_SECONDS = 15.0


def port_or_free(preferred: int) -> int:
    """The preferred port when it is free (stable URLs for the user), else any free one."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    process: asyncio.subprocess.Process | None = None


class Launcher:
    def __init__(self) -> None:
        self.children: list[Child] = []
        self._colour = 0

    async def start(self, child: Child, tasks: asyncio.TaskGroup) -> None:
        env = {**os.environ, "TRAINWATCH_LOG_FORMAT": "text", "PYTHONUNBUFFERED": "1", **child.env}
        child.process = await asyncio.create_subprocess_exec(
            *child.argv,
            env=env,
            cwd=ROOT,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches the launcher only; it stops children in order
        )
        self.children.append(child)
        with open(RUN_DIR / "pids", "a") as pids:  # lets a test prove nothing is left behind
            pids.write(f"{child.process.pid} {child.name}\n")
        colour = COLOURS[self._colour % len(COLOURS)]
        self._colour += 1
        tasks.create_task(self._relay(child, colour), name=f"logs {child.name}")

    async def _relay(self, child: Child, colour: str) -> None:
        assert child.process is not None
        assert child.process.stdout is not None
        prefix = f"\033[{colour}m{child.name:<12}\033[0m| "
        async for line in child.process.stdout:
            sys.stdout.write(prefix + line.decode(errors="replace"))
            sys.stdout.flush()
        code = await child.process.wait()
        sys.stdout.write(f"{prefix}exited with {code}\n")

    async def stop_all(self) -> None:
        """SIGTERM each child in reverse start order and wait for it: producers (kubesim, watchers)
        stop before consumers, and the local Feishu sink last, so in-flight work can finish."""
        for child in reversed(self.children):
            process = child.process
            if process is None or process.returncode is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), GRACE_SECONDS)
            except TimeoutError:
                print(f"{child.name} did not stop in {GRACE_SECONDS:.0f}s: killing it", flush=True)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()


async def stop_when_any_exits(launcher: Launcher, stop: asyncio.Event) -> None:
    """A service that dies takes the demo down with a clear message rather than half-running."""
    waits = {asyncio.ensure_future(c.process.wait()): c for c in launcher.children if c.process}
    done, pending = await asyncio.wait(
        [*waits, asyncio.ensure_future(stop.wait())], return_when=asyncio.FIRST_COMPLETED
    )
    for future in pending:
        future.cancel()
    for future in done:
        if future in waits and not stop.is_set():
            print(f"{waits[future].name} exited: stopping everything", flush=True)
    stop.set()


async def wait_http(url: str, *, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=2) as client:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(url)).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer within {timeout:.0f}s")
            await asyncio.sleep(0.2)


async def wait_files(folder: Path, count: int, *, timeout: float = 60.0) -> list[Path]:
    deadline = time.monotonic() + timeout
    while True:
        found = sorted(folder.glob("*.kubeconfig")) if folder.exists() else []
        if len(found) >= count:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"kubesim wrote {len(found)} of {count} kubeconfigs in {folder}")
        await asyncio.sleep(0.2)


async def register_clusters(registry_url: str, admin_token: str, kubeconfigs: list[Path]) -> None:
    headers = {"Authorization": f"Bearer {admin_token}"}
    async with httpx.AsyncClient(base_url=registry_url, headers=headers, timeout=30) as client:
        for index, path in enumerate(kubeconfigs):
            cluster_id = path.stem
            body = {
                "id": cluster_id,
                "name": f"Demo cluster {cluster_id}",
                "description": "A kubesim cluster running demo jobs of every kind",
                "labels": {"env": "demo", "region": ["east", "west", "north"][index % 3]},
                "kubeconfig": path.read_text(),
                "watch": {"owner_annotation": "trainwatch.io/owner"},
            }
            response = await client.post("/v1/clusters", json=body)
            if response.status_code not in (200, 201, 409):
                raise RuntimeError(f"registering {cluster_id} failed: {response.status_code} {response.text}")
            print(f"registered cluster {cluster_id} through the registry API", flush=True)


@dataclass(frozen=True)
class Options:
    clusters: int = 3
    rate: float = 1.0  # status writes per second per demo job
    language: str = "en"  # the dashboard link's ?lang= (the dashboard remembers it)
    rules: Path = ROOT / "services/notifier/rules.example.yaml"
    feishu_demo: bool = False  # send the simulated jobs' cards to TRAINWATCH_FEISHU_WEBHOOK


async def jobs_flowing(query_url: str, viewer_token: str, *, timeout: float = 120.0) -> None:
    """Until the persister has stored a job: the watchers, the bus and the persister are through
    their start-up (and their start-up logging)."""
    deadline = time.monotonic() + timeout
    headers = {"Authorization": f"Bearer {viewer_token}"}
    async with httpx.AsyncClient(timeout=2, headers=headers) as client:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                page = (await client.get(f"{query_url}/v1/jobs", params={"limit": 1})).json()
                if page["total"] > 0:
                    return
            await asyncio.sleep(0.5)


def banner(dashboard_url: str, token_file: Path, rules: Path) -> str:
    return (
        f"\n\033[1mTrainwatch is running: open {dashboard_url}\033[0m"
        f"\n  tokens and URLs for the CLI and the API (kept out of the logs): {token_file}"
        f"\n  notification rules: {rules}"
        "\n  Ctrl-C stops everything.\n"
    )


async def run(options: Options) -> None:
    clusters = options.clusters
    shutil.rmtree(RUN_DIR, ignore_errors=True)  # every run starts clean: kubesim makes new clusters
    RUN_DIR.mkdir(parents=True)
    (RUN_DIR / "nats").mkdir()
    (RUN_DIR / "redis").mkdir()

    nats = NatsServer(workdir=RUN_DIR / "nats", port=port_or_free(4222))
    redis = RedisServer(workdir=RUN_DIR / "redis", port=port_or_free(6379))
    nats.start()
    redis.start()
    (RUN_DIR / "pids").write_text(f"{nats.pid} nats-server\n{redis.pid} redis-server\n")
    print(f"nats-server {nats.url} (JetStream in {nats.workdir}); redis {redis.url}", flush=True)

    admin_token = secrets.token_urlsafe(24)
    viewer_token = secrets.token_urlsafe(24)
    watcher_token = secrets.token_urlsafe(24)
    feishu_secret = secrets.token_urlsafe(16)
    silence_link_secret = secrets.token_urlsafe(24)
    token_file = RUN_DIR / "tokens.env"
    token_file.touch(mode=0o600)
    ports = {name: port_or_free(p) for name, p in
             [("dashboard", 8080), ("registry", 8081), ("persister", 8082), ("notifier", 8083),
              ("watcher-1", 8084), ("watcher-2", 8085), ("feishu-sink", 8090)]}  # fmt: skip
    registry_url = f"http://127.0.0.1:{ports['registry']}"
    query_url = f"http://127.0.0.1:{ports['persister']}"
    notifier_url = f"http://127.0.0.1:{ports['notifier']}"
    token_file.write_text(  # for the CLI and consumers: `set -a; . .run/tokens.env; set +a`
        f"TRAINWATCH_API_URL={registry_url}\nTRAINWATCH_API_TOKEN={admin_token}\n"
        f"TRAINWATCH_VIEWER_TOKEN={viewer_token}\nTRAINWATCH_QUERY_URL={query_url}\n"
        f"TRAINWATCH_NATS_URL={nats.url}\nTRAINWATCH_NOTIFIER_URL={notifier_url}\n"
    )
    dashboard_url = f"http://127.0.0.1:{ports['dashboard']}"
    dashboard_link = (
        f"{dashboard_url}/?lang={options.language}" if options.language != "en" else dashboard_url
    )
    common = {
        "TRAINWATCH_NATS_URL": nats.url,
        "TRAINWATCH_REDIS_URL": redis.url,
        "TRAINWATCH_ADMIN_TOKENS": admin_token,
        "TRAINWATCH_VIEWER_TOKENS": viewer_token,
        "TRAINWATCH_WATCHER_TOKENS": watcher_token,
    }
    python = [sys.executable, "-m"]
    kubeconfig_dir = RUN_DIR / "kubesim"
    feishu_webhook = os.environ.get("TRAINWATCH_FEISHU_WEBHOOK")
    if feishu_webhook and not options.feishu_demo:
        # A team's real bot must not get a card for every simulated job by accident.
        print("TRAINWATCH_FEISHU_WEBHOOK is set: the simulated jobs' cards go to the local sink, not to "
              "that bot (make run FEISHU_DEMO=1 sends them there)", flush=True)  # fmt: skip
        feishu_webhook = None
    feishu_env = {
        "TRAINWATCH_FEISHU_WEBHOOK": feishu_webhook
        or f"http://127.0.0.1:{ports['feishu-sink']}/open-apis/bot/v2/hook/demo",
        "TRAINWATCH_FEISHU_SECRET": os.environ.get("TRAINWATCH_FEISHU_SECRET", feishu_secret)
        if feishu_webhook
        else feishu_secret,
    }

    children = []
    if not feishu_webhook:
        sink_argv = [*python, "trainwatch_notifier.sink", "--port", str(ports["feishu-sink"])]
        # The secret goes in the environment: a command line is readable by anyone on the machine (ps).
        children.append(Child("feishu-sink", sink_argv, {"TRAINWATCH_SINK_SECRET": feishu_secret}))
    children += [
        Child("registry", [*python, "trainwatch_registry"], {
            **common, "TRAINWATCH_HTTP_PORT": str(ports["registry"]),
            "TRAINWATCH_REGISTRY_DATABASE_URL": f"sqlite+aiosqlite:///{RUN_DIR / 'registry.db'}",
            "TRAINWATCH_REGISTRY_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
            "TRAINWATCH_ALLOW_LOOPBACK_SERVERS": "true",
        }),
        Child("persister", [*python, "trainwatch_persister"], {
            **common, "TRAINWATCH_HTTP_PORT": str(ports["persister"]),
            "TRAINWATCH_DATABASE_URL": f"sqlite+aiosqlite:///{RUN_DIR / 'jobs.db'}",
        }),
        Child("notifier", [*python, "trainwatch_notifier"], {
            **common, **feishu_env, "TRAINWATCH_HTTP_PORT": str(ports["notifier"]),
            "TRAINWATCH_RULES_FILE": str(options.rules),
            "TRAINWATCH_DASHBOARD_URL": dashboard_url,
            "TRAINWATCH_NOTIFIER_DATABASE_URL": f"sqlite+aiosqlite:///{RUN_DIR / 'notifier.db'}",
            "TRAINWATCH_SILENCE_LINK_SECRET": silence_link_secret,
        }),
        # Before the watchers, so that Ctrl-C (reverse order) stops the watchers first: a cluster
        # gone under a running watcher logs "watch failed; retrying" per kind until it stops.
        Child("kubesim", [*python, "kubesim", "--clusters", str(clusters), "--scenario", "demo",
                          "--rate", str(options.rate), "--kubeconfig-dir", str(kubeconfig_dir)]),
        *[
            Child(f"watcher-{n}", [*python, "trainwatch_watcher"], {
                **common, "TRAINWATCH_HTTP_PORT": str(ports[f"watcher-{n}"]),
                "TRAINWATCH_INSTANCE_ID": f"watcher-{n}",
                "TRAINWATCH_REGISTRY_URL": registry_url, "TRAINWATCH_WATCHER_TOKEN": watcher_token,
                "TRAINWATCH_ALLOW_LOOPBACK_SERVERS": "true",  # the simulated clusters are on 127.0.0.1
            })
            for n in (1, 2)
        ],
        Child("dashboard", [*python, "trainwatch_dashboard"], {
            **common, "TRAINWATCH_HTTP_PORT": str(ports["dashboard"]),
            "TRAINWATCH_REGISTRY_URL": registry_url, "TRAINWATCH_QUERY_URL": query_url,
            "TRAINWATCH_NOTIFIER_URL": notifier_url, "TRAINWATCH_SILENCE_LINK_SECRET": silence_link_secret,
            "TRAINWATCH_DASHBOARD_API_TOKEN": viewer_token, "TRAINWATCH_DASHBOARD_ADMIN_TOKEN": admin_token,
        }),
    ]  # fmt: skip

    launcher = Launcher()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with asyncio.TaskGroup() as tasks:
            for child in children:
                await launcher.start(child, tasks)
            tasks.create_task(stop_when_any_exits(launcher, stop), name="watch-children")

            async def bring_up() -> None:
                await wait_http(f"{registry_url}/healthz")
                await register_clusters(registry_url, admin_token, await wait_files(kubeconfig_dir, clusters))
                await wait_http(f"{dashboard_url}/healthz")
                print(banner(dashboard_link, token_file, options.rules), flush=True)
                # Said again once jobs flow: by then start-up logging has pushed it off the screen.
                await jobs_flowing(query_url, viewer_token)
                print(banner(dashboard_link, token_file, options.rules), flush=True)

            async def bring_up_or_stop() -> None:
                try:
                    await bring_up()
                except Exception as exc:
                    print(f"start-up failed: {exc}", flush=True)
                    stop.set()

            up = tasks.create_task(bring_up_or_stop(), name="bring-up")
            await stop.wait()
            up.cancel()
            print("\nstopping...", flush=True)
            await launcher.stop_all()
    finally:
        await launcher.stop_all()
        redis.stop()
        nats.stop()
        print("all stopped", flush=True)


def parse_options(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(description="The whole Trainwatch system on simulated clusters.")
    parser.add_argument("--clusters", type=int, default=int(os.environ.get("TRAINWATCH_DEMO_CLUSTERS", "3")),
                        help="simulated clusters (default 3)")  # fmt: skip
    parser.add_argument("--rate", type=float, default=1.0, help="status writes per second per demo job")
    parser.add_argument("--lang", choices=["en", "zh-CN"], default="en", help="the dashboard's language")
    parser.add_argument("--rules", type=Path, default=Options.rules, help="the notifier's rules file")
    parser.add_argument("--feishu-demo", action="store_true",
                        help="send the simulated jobs' cards to TRAINWATCH_FEISHU_WEBHOOK")  # fmt: skip
    args = parser.parse_args(argv)
    if args.clusters < 1:
        parser.error("--clusters must be at least 1")
    if args.rate <= 0:
        parser.error("--rate must be positive")
    rules = args.rules.expanduser().resolve()
    if not rules.is_file():
        parser.error(f"no rules file at {rules}")
    return Options(args.clusters, args.rate, args.lang, rules, args.feishu_demo)


def main() -> None:
    asyncio.run(run(parse_options()))


if __name__ == "__main__":
    main()
