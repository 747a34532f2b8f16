"""Log tails of failing containers (off by default: ``DIAGNOSIS_LOG_TAILS``), fetched beside the
informers, never in their way.

A job's diagnosis asks for the tail its ``log_request`` names; the first ask queues a fetch and
answers None, and the diagnosis goes out without it. One long-lived task per cluster (owned by the
evidence feed's ``TaskMap``) runs at most ``concurrency`` fetches at a time, each bounded in time
and bytes (``tailLines``, ``limitBytes``, ``previous``); the text is redacted into a ``LogTail``
and kept, and the pod's jobs are told (through the evidence cache), so their next diagnosis carries
it. A full queue drops the ask (the next diagnosis asks again); a failed fetch is kept as "no tail"
until the pod changes.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable

from trainwatch_common.events.diagnosis import MAX_LOG_BYTES, MAX_LOG_LINES, LogTail
from trainwatch_watcher import errors
from trainwatch_watcher.diagnosis import LogRequest, log_tail
from trainwatch_watcher.kube.client import KubeClient

log = logging.getLogger(__name__)

Key = tuple[str, str, str, bool]  # namespace, pod, container, previous
MAX_KEPT = 2048  # tails kept per cluster (least recently asked for go first)


class LogTails:
    def __init__(
        self,
        client: KubeClient,
        *,
        touched: Callable[[str, str], None],
        timeout: float = 5.0,
        concurrency: int = 4,
        queue_size: int = 256,
    ) -> None:
        self._client = client
        self._touched = touched  # (namespace, pod): the pod's jobs should diagnose again
        self._timeout = timeout
        self._concurrency = concurrency
        self._queue: asyncio.Queue[Key] = asyncio.Queue(maxsize=queue_size)
        self._kept: OrderedDict[Key, LogTail | None] = OrderedDict()
        self._asked: set[Key] = set()
        self.dropped = 0
        self.forbidden = False  # the last fetch got 403: reported in the cluster's health

    def tail(self, namespace: str, request: LogRequest) -> LogTail | None:
        """The tail if fetched; else None, and a fetch is queued (once)."""
        key = (namespace, request.pod, request.container, request.previous)
        if key in self._kept:
            self._kept.move_to_end(key)
            return self._kept[key]
        if key not in self._asked:
            try:
                self._queue.put_nowait(key)
                self._asked.add(key)
            except asyncio.QueueFull:
                self.dropped += 1
        return None

    def forget_pod(self, namespace: str, pod: str) -> None:
        for key in [k for k in self._kept if k[0] == namespace and k[1] == pod]:
            del self._kept[key]

    async def run(self) -> None:
        """Fetch what is asked, ``concurrency`` at a time, until cancelled."""
        async with asyncio.TaskGroup() as group:
            for i in range(self._concurrency):
                group.create_task(self._worker(), name=f"log tails worker {i}")

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            try:
                tail = await self._fetch(key)
            except Exception:  # a bug or an unreadable answer: this tail only, the fetcher goes on
                log.exception("log tail failed", extra={"pod": f"{key[0]}/{key[1]}"})
                tail = None
            finally:
                self._asked.discard(key)
            self._kept[key] = tail
            while len(self._kept) > MAX_KEPT:
                self._kept.popitem(last=False)
            if tail is not None:
                self._touched(key[0], key[1])

    async def _fetch(self, key: Key) -> LogTail | None:
        namespace, pod, container, previous = key
        params = {
            "container": container,
            "tailLines": str(MAX_LOG_LINES),
            "limitBytes": str(4 * MAX_LOG_BYTES),  # redaction and the line bound cut it further
        }
        if previous:
            params["previous"] = "true"
        try:
            text = await self._client.get_text(
                f"/api/v1/namespaces/{namespace}/pods/{pod}/log",
                params,
                limit=16 * MAX_LOG_BYTES,
                timeout=self._timeout,
            )
        except errors.WatcherError as exc:  # forbidden, gone, not started: no tail
            self.forbidden = isinstance(exc, errors.Unauthorized) and exc.status == 403
            log.info("log tail not fetched", extra={"pod": f"{namespace}/{pod}", "error": str(exc)[:200]})
            return None
        self.forbidden = False
        return log_tail(text, container=container, previous=previous) if text.strip() else None
