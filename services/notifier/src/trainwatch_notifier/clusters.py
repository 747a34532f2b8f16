"""Cluster names and labels for routing, from the registry's KV bucket (watched for changes)."""

from __future__ import annotations

import asyncio
import logging

from nats.js import JetStreamContext
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue
from pydantic import ValidationError

from trainwatch_common import ClusterSpec
from trainwatch_common.streams import ensure_clusters_bucket

log = logging.getLogger(__name__)


class ClusterDirectory:
    def __init__(self) -> None:
        self._specs: dict[str, ClusterSpec] = {}
        self.loaded = asyncio.Event()

    def labels(self, cluster_id: str) -> dict[str, str]:
        spec = self._specs.get(cluster_id)
        return dict(spec.labels) if spec else {}

    def name(self, cluster_id: str) -> str:
        spec = self._specs.get(cluster_id)
        return spec.name if spec else cluster_id

    def apply(self, key: str, value: bytes | None, operation: str | None) -> None:
        if operation in (KV_DEL, KV_PURGE) or not value:
            self._specs.pop(key, None)
            return
        try:
            spec = ClusterSpec.model_validate_json(value)
        except ValidationError as exc:
            log.warning("ignoring a malformed cluster spec", extra={"key": key, "error": str(exc)[:300]})
            return
        self._specs[spec.id] = spec

    async def watch(self, js: JetStreamContext) -> None:
        """Load the bucket, set ``loaded``, then follow its changes until cancelled."""
        bucket: KeyValue = await ensure_clusters_bucket(js)
        watcher = await bucket.watchall()
        try:
            async for entry in watcher:
                if entry is None:  # the initial values have all been delivered
                    self.loaded.set()
                    continue
                self.apply(entry.key, entry.value, entry.operation)
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]
