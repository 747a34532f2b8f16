"""Where a cluster's connection config (its kubeconfig) comes from: an injected ``ConnectionSource``.

- ``RegistryConnections``: the registry's authenticated endpoint
  ``GET {registry}/v1/clusters/{id}/connection`` with a watcher-role bearer token (production);
- ``KubeconfigFolder``: ``<folder>/<cluster-id>.yaml`` files (single-cluster use, the demo);
- ``StaticConnections``: an in-memory mapping (tests).

Secrets are never logged: ``ClusterConnection``'s repr shows only the fingerprint.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import aiohttp
from pydantic import SecretStr, ValidationError

from trainwatch_common.events.clusters import ClusterConnection
from trainwatch_common.events.ids import fingerprint
from trainwatch_common.leases import LEASE_PROOF_HEADER
from trainwatch_watcher import errors

KUBECONFIG_SUFFIXES = (".yaml", ".yml", ".kubeconfig", ".json")


class ConnectionSource(Protocol):
    async def fetch(self, cluster_id: str) -> ClusterConnection:
        """The current connection of a cluster; ``ConnectionUnavailable`` when there is none."""
        ...


class RegistryConnections:
    """The registry gives a watcher a cluster's kubeconfig only while it holds the cluster's lease:
    ``lease_proof(cluster_id)`` (the claim loop's ``connection_proof``) supplies the proof."""

    def __init__(
        self,
        base_url: str,
        token: SecretStr | None,
        *,
        timeout: float = 10.0,
        lease_proof: Callable[[str], str | None] | None = None,
    ) -> None:
        self._base_url = base_url.rstrip("/")
        self._token = token
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self.lease_proof = lease_proof

    async def fetch(self, cluster_id: str) -> ClusterConnection:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        headers = {"Accept": "application/json"}
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token.get_secret_value()}"
        proof = self.lease_proof(cluster_id) if self.lease_proof is not None else None
        if proof is not None:
            headers[LEASE_PROOF_HEADER] = proof  # a secret: never logged
        url = f"{self._base_url}/v1/clusters/{cluster_id}/connection"
        try:
            async with self._session.get(url, headers=headers) as response:
                if response.status != 200:
                    raise errors.ConnectionUnavailable(
                        f"registry answered HTTP {response.status} for cluster {cluster_id}'s connection"
                    )
                body = await response.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise errors.ConnectionUnavailable(f"registry unreachable: {type(exc).__name__}") from None
        try:
            return ClusterConnection.model_validate_json(body)
        except ValidationError:
            raise errors.ConnectionUnavailable("registry sent a malformed connection") from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class KubeconfigFolder:
    """``<folder>/<cluster-id><suffix>``; the fingerprint is that of the file's bytes."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path_for(self, cluster_id: str) -> Path | None:
        for suffix in (*KUBECONFIG_SUFFIXES, ""):
            candidate = self.folder / f"{cluster_id}{suffix}"
            if candidate.is_file():
                return candidate
        return None

    def cluster_ids(self) -> list[str]:
        if not self.folder.is_dir():
            return []
        return sorted(
            p.stem for p in self.folder.iterdir() if p.is_file() and p.suffix in KUBECONFIG_SUFFIXES
        )

    async def fetch(self, cluster_id: str) -> ClusterConnection:
        path = self.path_for(cluster_id)
        if path is None:
            raise errors.ConnectionUnavailable(f"no kubeconfig for cluster {cluster_id} in {self.folder}")
        data = path.read_bytes()
        return ClusterConnection(
            cluster_id=cluster_id,
            revision=1,
            connection_fingerprint=fingerprint(data),
            kubeconfig=data.decode(),
        )


class StaticConnections:
    """A mutable in-memory mapping of cluster id → kubeconfig text."""

    def __init__(self, kubeconfigs: dict[str, str] | None = None) -> None:
        self._kubeconfigs = dict(kubeconfigs or {})
        self.fetches = 0

    def set(self, cluster_id: str, kubeconfig: str) -> str:
        """Store a kubeconfig; returns its fingerprint (what a registry would announce)."""
        self._kubeconfigs[cluster_id] = kubeconfig
        return fingerprint(kubeconfig.encode())

    def remove(self, cluster_id: str) -> None:
        self._kubeconfigs.pop(cluster_id, None)

    async def fetch(self, cluster_id: str) -> ClusterConnection:
        self.fetches += 1
        kubeconfig = self._kubeconfigs.get(cluster_id)
        if kubeconfig is None:
            raise errors.ConnectionUnavailable(f"no connection for cluster {cluster_id}")
        return ClusterConnection(
            cluster_id=cluster_id,
            revision=1,
            connection_fingerprint=fingerprint(kubeconfig.encode()),
            kubeconfig=kubeconfig,
        )
