"""One simulated cluster: a store, an HTTP(S) listener on its own port, tokens, faults."""

from __future__ import annotations

import asyncio
import base64
import collections
import random
import secrets
import ssl
import time
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from kubesim import errors
from kubesim import tls as tlsmod
from kubesim.accounts import ACCOUNT_KINDS, Accounts
from kubesim.faults import Faults
from kubesim.kinds import (
    ALL_KINDS,
    CORE_KINDS,
    COSCHEDULING_PODGROUP,
    KUEUE_KINDS,
    VOLCANO_PODGROUP,
    KindSpec,
)
from kubesim.podlogs import PodLogs
from kubesim.server import handle_request
from kubesim.store import Backup, Store
from kubesim.watch import WatchHub

__all__ = ["Cluster"]

Spawn = Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]]


class Cluster:
    """A simulated Kubernetes API server. Create it with ``Simulator.add_cluster``."""

    def __init__(
        self,
        name: str,
        *,
        workdir: Path,
        spawn: Spawn,
        kinds: Iterable[KindSpec] = ALL_KINDS,
        tls: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        history_limit: int = 10_000,
        bookmark_interval: float = 60.0,
        watch_timeout: float | None = None,
        seed: int | None = None,
        watch_cache: bool = True,
        storage_init_seconds: float = 0.0,
        core: bool = True,
        kueue: bool = False,
        volcano_podgroups: bool = False,
        coscheduling: bool = False,
        forbidden: Iterable[str] = (),
    ) -> None:
        self.name = name
        self.tls = tls
        self.host = host
        self.port = port
        self.bookmark_interval = bookmark_interval
        # Without the watch cache (--watch-cache=false) a real server sends no periodic bookmarks.
        self.watch_cache = watch_cache
        # How long a kind's storage answers 429 "storage is (re)initializing" after its first
        # request (a CRD kind) or a restart (every kind); 0 turns the behaviour off.
        self.storage_init_seconds = storage_init_seconds
        # RBAC on CustomResourceDefinitions: a watcher is often not allowed to read them (403).
        self.crds_readable = True
        self._storage_ready_at: dict[str, float] = {}  # resource -> when its 429s end
        self._uninitialized_builtins: set[str] = set()  # built-in kinds re-initializing after a restart
        self._watch_timeout = watch_timeout
        self._workdir = workdir
        self._rand = random.Random(seed)
        served = [*kinds, *((*CORE_KINDS, *ACCOUNT_KINDS) if core else ())]
        served += [*(KUEUE_KINDS if kueue else ())]
        served += [VOLCANO_PODGROUP] if volcano_podgroups else []
        served += [COSCHEDULING_PODGROUP] if coscheduling else []
        self.store = Store(served, history_limit=history_limit, seed=seed)
        # Container logs by containerID (what the kubelets of the simulated nodes hold).
        self.logs = PodLogs()
        # RBAC denials per resource, e.g. {("", "pods"), ("", "pods/log"), ("events.k8s.io", "events")}.
        self.forbidden_resources: set[tuple[str, str]] = set()
        for resource in forbidden:
            self.forbid(resource)
        self.hub = WatchHub(self.store)
        self.token = token or secrets.token_urlsafe(24)
        self.tokens: dict[str, tuple[str, bool]] = {self.token: ("kubesim-admin", True)}
        # ServiceAccounts' tokens (TokenRequest, token Secrets) and RBAC by ClusterRoles.
        self.accounts = Accounts(
            self.store, issuer="https://kubernetes.default.svc.cluster.local", ca_pem=lambda: self.ca_pem
        )
        self.faults = Faults(
            self.hub, stop_listening=self._stop_listening, start_listening=self._start_listening, spawn=spawn
        )
        self.requests: collections.deque[tuple[str, str, int]] = collections.deque(maxlen=2000)
        self._certs = tlsmod.generate(name) if tls else None
        self._ssl: ssl.SSLContext | None = None
        self._web = web.Server(self._handle, access_log=None)
        self._listener: asyncio.Server | None = None
        self._stopped = False
        self._terminated = False

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._certs is not None:
            self._ssl = tlsmod.server_context(self._certs, self._workdir / self.name)
        await self._start_listening()

    async def stop(self) -> None:
        """Stop for good: close the listener and every connection."""
        self._stopped = True
        await self._stop_listening()

    async def _start_listening(self) -> None:
        if self._stopped or self._terminated:
            return
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(
            self._web, self.host, self.port, ssl=self._ssl, reuse_address=True
        )
        self.port = self._listener.sockets[0].getsockname()[1]

    async def _stop_listening(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        await self._close_connections()

    async def _close_connections(self) -> None:
        """Close every connection now (TLS ones without waiting for close_notify)."""
        self.hub.drop_all()
        handlers = self._web.connections
        transports = [h.transport for h in handlers if h.transport is not None]
        for handler in handlers:
            handler.force_close()  # idle keep-alive connections would otherwise wait out the timeout
        await self._web.shutdown(0.5)
        for transport in transports:
            transport.abort()

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        return await handle_request(self, request)

    # ------------------------------------------- restarts, SIGTERM, etcd restore
    def check_storage(self, spec: KindSpec) -> None:
        """Raise the 429 a real apiserver answers while the kind's watch cache initializes.
        A kind never asked for (a CRD just created, or any kind after a restart) starts
        initializing at its first request."""
        if self.storage_init_seconds <= 0:
            return
        now = time.monotonic()
        ready_at = self._storage_ready_at.get(spec.resource)
        if ready_at is None:
            if spec.builtin and spec.resource not in self._uninitialized_builtins:
                return  # built-in kinds are initialized before a server reports ready
            self._uninitialized_builtins.discard(spec.resource)
            ready_at = self._storage_ready_at[spec.resource] = now + self.storage_init_seconds
        if now < ready_at:
            raise errors.storage_initializing()

    def _uninitialize_storage(self, resources: Iterable[str], *, builtins: bool = False) -> None:
        for resource in resources:
            self._storage_ready_at.pop(resource, None)
            if builtins:
                self._uninitialized_builtins.add(resource)

    async def terminate(self) -> None:
        """SIGTERM, as a real apiserver takes it: it stops listening at once and closes idle
        connections, but keeps its open HTTP/1.1 watch streams open, silent, until it is
        killed (``restart``, ``kill_streams``)."""
        self._terminated = True
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        for handle in self.hub.active:
            handle.frozen = True
        for handler in self._web.connections:
            handler.close()  # idle keep-alive connections close now; busy ones after their response
        self.store.wake()

    async def kill_streams(self) -> None:
        """SIGKILL of a terminated server: its remaining connections are gone."""
        frozen = [h for h in self.hub.active if h.frozen]
        for handle in frozen:
            handle.drop()
        self.store.wake()

    async def restart(self, *, kill_old: bool = True) -> None:
        """An apiserver restart: a new process on the same port with a new watch cache, so
        watches from a resourceVersion before now get 410, and every kind answers 429 "storage
        is (re)initializing" for ``storage_init_seconds``. ``kill_old=False`` leaves a
        ``terminate``d predecessor's streams open (it is still in its grace period)."""
        if not self._terminated:
            await self._close_connections()
        elif kill_old:
            await self.kill_streams()
        self._terminated = False
        self.store.compact()
        self._uninitialize_storage([k.resource for k in self.store.kinds], builtins=True)
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        await self._start_listening()

    def backup(self) -> Backup:
        """An etcd snapshot of this cluster's objects (for ``restore``)."""
        return self.store.backup()

    async def restore(self, backup: Backup, *, restart: bool = True) -> None:
        """etcd restored from ``backup``: lower resourceVersions, different objects. With
        ``restart`` (the usual procedure) the apiserver restarts too, so open watches drop; without
        it they stay open and silent until the server's revision passes theirs, as on a real
        server whose etcd was swapped under it."""
        self.store.restore(backup)
        if restart:
            await self.restart()

    # ---------------------------------------------------------- addressing
    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.address}"

    @property
    def ca_pem(self) -> bytes | None:
        """The PEM of the CA that signs the serving certificate (``None`` over plain HTTP)."""
        return self._certs.ca_pem if self._certs else None

    def watch_timeout(self) -> float:
        """A watch's lifetime when the client sets no ``timeoutSeconds`` (1800-3600 s, as
        ``--min-request-timeout`` does, unless configured)."""
        if self._watch_timeout is not None:
            return self._watch_timeout
        return 1800.0 * (1 + self._rand.random())

    def log_request(self, method: str, path_qs: str, status: int) -> None:
        self.requests.append((method, path_qs, status))

    # ---------------------------------------------------------- kubeconfig
    def kubeconfig(self, *, token: str | None = None, namespace: str = "default") -> dict[str, Any]:
        """A ready kubeconfig (inline ``certificate-authority-data`` and bearer token)."""
        cluster: dict[str, Any] = {"server": self.url}
        if self._certs is not None:
            cluster["certificate-authority-data"] = base64.b64encode(self._certs.ca_pem).decode()
        user = f"{self.name}-admin"
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.name, "cluster": cluster}],
            "users": [{"name": user, "user": {"token": token or self.token}}],
            "contexts": [
                {"name": self.name, "context": {"cluster": self.name, "user": user, "namespace": namespace}}
            ],
            "current-context": self.name,
            "preferences": {},
        }

    def kubeconfig_yaml(self, **kwargs: Any) -> str:
        return yaml.safe_dump(self.kubeconfig(**kwargs), sort_keys=False)

    def write_kubeconfig(self, path: str | Path | None = None, **kwargs: Any) -> Path:
        """Write the kubeconfig (mode 0600); default ``<workdir>/<name>.kubeconfig``."""
        target = Path(path) if path is not None else self._workdir / f"{self.name}.kubeconfig"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.kubeconfig_yaml(**kwargs))
        target.chmod(0o600)
        return target

    # ------------------------------------------------------ tokens and CA
    def rotate_token(self) -> str:
        """Issue a new token; the old one gets 401 from now on. Returns the new token."""
        self.tokens.pop(self.token, None)
        self.token = secrets.token_urlsafe(24)
        self.tokens[self.token] = ("kubesim-admin", True)
        return self.token

    def add_token(self, token: str | None = None, *, allowed: bool = True, user: str | None = None) -> str:
        """Another valid token. ``allowed=False`` is a token without RBAC bindings: it can
        read discovery but gets 403 on every resource."""
        token = token or secrets.token_urlsafe(24)
        self.tokens[token] = (
            user or f"system:serviceaccount:kubesim:{'admin' if allowed else 'noperm'}",
            allowed,
        )
        return token

    def revoke_token(self, token: str) -> None:
        self.tokens.pop(token, None)

    async def replace_ca(self) -> None:
        """New CA and serving certificate (like a re-provisioned control plane). Open
        connections are closed; clients holding the old CA fail verification."""
        if self._certs is None or self._ssl is None:
            raise RuntimeError("replace_ca() needs a TLS cluster")
        self._certs = tlsmod.generate(self.name)
        tlsmod.load(self._ssl, self._certs, self._workdir / self.name)
        await self._close_connections()

    # ----------------------------------------------------------------- RBAC
    def forbid(self, resource: str) -> None:
        """Answer 403 Forbidden for ``resource`` to every token, as RBAC does for a role without
        it: ``"pods"``, ``"pods/log"``, ``"events"`` (core/v1), ``"events.events.k8s.io"``,
        ``"workloads.kueue.x-k8s.io"``, ``"clusterqueues/pendingworkloads.visibility.kueue.x-k8s.io"``
        (kubectl's ``resource[/subresource].group`` notation)."""
        self.forbidden_resources.add(_split_resource(resource))

    def allow(self, resource: str) -> None:
        """Undo :meth:`forbid`."""
        self.forbidden_resources.discard(_split_resource(resource))

    def is_forbidden(self, spec: KindSpec, subresource: str | None = None) -> bool:
        if not self.forbidden_resources:
            return False
        plural = f"{spec.plural}/{subresource}" if subresource else spec.plural
        return (spec.group, plural) in self.forbidden_resources

    # --------------------------------------------------------------- kinds
    @property
    def kinds(self) -> tuple[KindSpec, ...]:
        """The job kinds served (what scenarios and watchers of jobs care about)."""
        return tuple(k for k in self.store.kinds if k.job)

    @property
    def served(self) -> tuple[KindSpec, ...]:
        """Every kind served: the job kinds and the evidence kinds (pods, Events, Kueue, PodGroups)."""
        return self.store.kinds

    def serve_kind(self, kind: KindSpec, *, replace: bool = False) -> None:
        """Install a kind at run time (``replace`` swaps MPIJob v1 <-> v2beta1)."""
        self.store.serve_kind(kind, replace=replace)

    def remove_kind(self, kind: KindSpec | str) -> None:
        """Uninstall a kind: its objects are deleted and its watches end; then 404. Installed
        again, its first requests get 429 "storage is (re)initializing" (``storage_init_seconds``)."""
        spec = self.store.spec(kind)
        self.store.remove_kind(spec)
        self._uninitialize_storage([spec.resource])

    def compact(self, rv: int | None = None) -> int:
        """Forget the event history up to ``rv`` (default: all): older watches/lists get 410."""
        return self.store.compact(rv)

    def __repr__(self) -> str:
        return f"<Cluster {self.name} {self.url}>"


def _split_resource(resource: str) -> tuple[str, str]:
    """``"pods/log"`` -> ``("", "pods/log")``;
    ``"events.events.k8s.io"`` -> ``("events.k8s.io", "events")``."""
    plural, _, group = resource.partition(".")
    return group, plural
