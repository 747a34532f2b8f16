"""Is a watch making progress? Checks a real apiserver makes necessary.

A real kube-apiserver v1.36 answers a watch from a resourceVersion ahead of its own (etcd wiped
or restored from a backup, a cluster re-created behind the same endpoint) with HTTP 200 and then
silence; it sends periodic bookmarks only when the resource changed (and none without the watch
cache); and a SIGTERMed one keeps its open HTTP/1.1 watch streams open, silent, until SIGKILL.
A silent stream is therefore normal and proves nothing, so we ask on a new connection:

- before resuming a watch from a resourceVersion: a ``LIST ?limit=1`` (a consistent read) gives
  the server's current resourceVersion; below ours, the server went back in time: relist;
- while a stream has been silent for ``silence_probe_interval``: the same LIST (failing: the
  server behind the stream is gone or stopping; below ours: went back in time), and, when the
  cluster has moved on since our resourceVersion, a short watch from ours: an event there that our
  stream did not bring means the stream is stale.

resourceVersions are opaque strings by the API's contract, but every apiserver backed by etcd
serves etcd revisions (decimal integers) and the watch cache compares them the same way; a value
that is not one disables the comparison instead of guessing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import orjson

from trainwatch_watcher import errors
from trainwatch_watcher.kube.client import KubeClient
from trainwatch_watcher.settings import WatchTimings

log = logging.getLogger(__name__)


def rv_number(resource_version: str | None) -> int | None:
    if resource_version and resource_version.isdigit():
        return int(resource_version)
    return None


async def server_resource_version(client: KubeClient, path: str) -> str:
    """The server's current resourceVersion: a one-item LIST, which reads from etcd (or from a
    watch cache proven current), so it is at least every resourceVersion a watch has delivered."""
    page = await client.get_json(path, {"limit": "1"})
    metadata = page.get("metadata")
    rv = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    return rv if isinstance(rv, str) else ""


def ahead_error(ours: str, theirs: str) -> errors.ResourceVersionAhead:
    return errors.ResourceVersionAhead(
        f"our resourceVersion {ours} is ahead of the server's {theirs} "
        "(etcd restored or the cluster re-created?): relisting"
    )


async def check_not_ahead(client: KubeClient, path: str, ours: str) -> None:
    """Raise ``ResourceVersionAhead`` when the server's resourceVersion is below ``ours``."""
    ours_n = rv_number(ours)
    if ours_n is None:
        return
    theirs = await server_resource_version(client, path)
    theirs_n = rv_number(theirs)
    if theirs_n is not None and theirs_n < ours_n:
        raise ahead_error(ours, theirs)


async def missed_event(client: KubeClient, path: str, ours: str, timings: WatchTimings) -> str | None:
    """A short watch from ``ours``: the type and resourceVersion of the first thing it brings that a
    stream at ``ours`` should have brought too (an event, or an ERROR such as 410 after a restart),
    or None when it brings nothing within ``probe_watch_seconds``."""
    params = {"watch": "1", "resourceVersion": ours, "timeoutSeconds": str(timings.probe_watch_seconds)}
    async with asyncio.timeout(timings.probe_watch_seconds + timings.request_timeout):
        async with client.stream_lines(
            path, params, read_timeout=timings.probe_watch_seconds + timings.request_timeout
        ) as lines:
            async for line in lines:
                try:
                    event = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(event, dict) and event.get("type") in ("ADDED", "MODIFIED", "DELETED", "ERROR"):
                    obj = event.get("object")
                    meta = obj.get("metadata") if isinstance(obj, dict) else None
                    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
                    return f"{event['type']} at {rv or '?'}"
    return None


class StreamState:
    """What the watchdog needs to know about the stream it guards; updated by the stream's reader."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        # When the reader began waiting for data that has not come (None: it is not waiting, it is
        # handing an event to its consumer: a slow consumer is not a silent server).
        self.waiting_since: float | None = clock()
        self.interrupt: errors.WatcherError | None = None

    def waiting(self) -> None:
        self.waiting_since = self._clock()

    def busy(self) -> None:
        self.waiting_since = None


class SilenceWatchdog:
    """Probes a watch stream silent for ``silence_probe_interval`` and interrupts its reader (by
    cancelling the reading task, which the reader turns into ``state.interrupt``) when the probe
    shows the stream can no longer be trusted. Run as its own task, one per open stream."""

    def __init__(
        self,
        *,
        client: KubeClient,
        path: str,
        timings: WatchTimings,
        state: StreamState,
        reader: asyncio.Task[object],
        resource_version: Callable[[], str | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._path = path
        self._timings = timings
        self._state = state
        self._reader = reader
        self._resource_version = resource_version
        self._clock = clock

    async def run(self) -> None:
        interval = self._timings.silence_probe_interval
        while True:
            since = self._state.waiting_since
            now = self._clock()
            if since is None or now - since < interval:
                await asyncio.sleep(interval if since is None else interval - (now - since))
                continue
            try:
                verdict = await self._probe()
            except Exception as exc:  # a bug or an odd answer must not leave the stream unguarded
                log.warning("silence probe failed", extra={"path": self._path, "error": repr(exc)})
                verdict = None
            if verdict is None:
                self._state.waiting()  # all well: the next probe after another quiet interval
                continue
            if self._state.waiting_since is None:
                continue  # data arrived while we probed: the stream is alive after all
            log.info("watch stream abandoned", extra={"path": self._path, "reason": str(verdict)})
            self._state.interrupt = verdict
            self._reader.cancel()
            return

    async def _probe(self) -> errors.WatcherError | None:
        ours = self._resource_version()
        try:
            theirs = await server_resource_version(self._client, self._path)
        except errors.ClusterError as exc:
            # New requests fail while the stream looks open: a SIGTERMed server (it stops listening
            # but keeps its streams), a partition, revoked credentials. The stream cannot be trusted.
            return errors.StreamAbandoned(
                f"watch stream given up: the server does not answer new requests ({exc})"
            )
        ours_n, theirs_n = rv_number(ours), rv_number(theirs)
        if ours is None or ours_n is None or theirs_n is None or theirs_n == ours_n:
            return None
        if theirs_n < ours_n:
            return ahead_error(ours, theirs)
        # The cluster moved on since our resourceVersion (maybe only other resources did).
        try:
            missed = await missed_event(self._client, self._path, ours, self._timings)
        except (errors.ClusterError, TimeoutError) as exc:
            return errors.StreamAbandoned(f"watch stream given up: probe watch failed ({exc})")
        if missed is None or self._resource_version() != ours:
            return None  # nothing missed, or our stream brought it meanwhile
        return errors.StreamAbandoned(
            f"watch stream given up: it is silent but a new watch from {ours} got {missed}"
        )
