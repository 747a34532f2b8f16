"""List and watch one kind in one cluster (optionally one namespace); yields raw events only.

Three nested loops, after kopf's ``infinite_watch`` / ``continuous_watch`` / ``watch_objs``:

- ``run_forever`` reconnects forever with jittered exponential backoff (reset after a stable
  period), relisting after a 410;
- ``sync_once`` gets the full state (a WatchList stream with ``sendInitialEvents`` where the
  server has it, else a paged LIST), marks its end with ``Synced``, then watches from there;
- ``stream_once`` is one HTTP watch stream, read with an inactivity timeout.

Nothing here knows what a job is: events are decoded dicts, and the caller decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from trainwatch_common.kinds import JobKind
from trainwatch_watcher import errors
from trainwatch_watcher.kube import progress
from trainwatch_watcher.kube.client import KubeClient, error_for_status
from trainwatch_watcher.settings import WatchTimings

log = logging.getLogger(__name__)

INITIAL_EVENTS_END = "k8s.io/initial-events-end"

RawEvent = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Synced:
    """Every object that exists was yielded (as ADDED) since the previous ``Synced``/start of a
    relist; ``uids`` are exactly those objects, so the caller can tell what was deleted meanwhile
    (empty from a ``Watcher(collect_uids=False)``)."""

    resource_version: str
    uids: frozenset[str]


@dataclass(frozen=True, slots=True)
class Progress:
    """The server confirmed the stream is alive and current up to ``resource_version`` (a bookmark)."""

    resource_version: str


WatchItem = RawEvent | Synced | Progress


class Backoff:
    """1 s growing x2 to 30 s with full jitter in [d/2, d]; reset after a stable period."""

    def __init__(self, timings: WatchTimings, *, rng: random.Random | None = None) -> None:
        self._timings = timings
        self._rng = rng or random.Random()
        self._attempt = 0

    def reset(self) -> None:
        self._attempt = 0

    def next_delay(self) -> float:
        base = min(self._timings.backoff_max, self._timings.backoff_initial * float(2**self._attempt))
        self._attempt = min(self._attempt + 1, 30)
        return base / 2 + self._rng.random() * base / 2


@dataclass(slots=True)
class WatchTarget:
    """What is watched; ``namespace`` None means cluster-wide."""

    kind: JobKind
    namespace: str | None = None
    # Server-side filters (the evidence watches: pods of training operators, Warning events).
    label_selector: str | None = None
    field_selector: str | None = None

    def selectors(self) -> dict[str, str]:
        params: dict[str, str] = {}
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        if self.field_selector:
            params["fieldSelector"] = self.field_selector
        return params

    def path(self) -> str:
        if self.namespace:
            return f"{self.kind.api_path}/namespaces/{self.namespace}/{self.kind.plural}"
        return f"{self.kind.api_path}/{self.kind.plural}"


class WatchHooks:
    """Callbacks for metrics and health; the defaults do nothing."""

    def on_relist(self, reason: str) -> None: ...
    def on_expired(self) -> None: ...
    def on_reconnect(self, error: BaseException) -> None: ...
    def on_connected(self) -> None: ...
    def on_resource_version_ahead(self, error: errors.ResourceVersionAhead) -> None: ...
    def on_waiting(self, error: errors.StorageInitializing) -> None: ...


class Watcher:
    """One (cluster, kind, namespace) list+watch; iterate ``run_forever()``."""

    def __init__(
        self,
        *,
        client: KubeClient,
        target: WatchTarget,
        timings: WatchTimings,
        resume_from: str | None = None,
        hooks: WatchHooks | None = None,
        clock: Callable[[], float] = time.monotonic,
        collect_uids: bool = True,
    ) -> None:
        self._client = client
        # A caller that tells deletions apart by other means (the evidence cache, by name) does
        # not need the uids of a 100k-pod listing held until it is synced.
        self._collect_uids = collect_uids
        self._target = target
        self._timings = timings
        self._hooks = hooks or WatchHooks()
        self._clock = clock
        self.resource_version: str | None = resume_from
        # True while the full state is being read (LIST pages or WatchList initial events).
        self.listing = False
        # None = not tried yet; flips to False after the server refuses sendInitialEvents.
        self._watch_list: bool | None = None if timings.use_watch_list else False
        # The resourceVersion last shown not to be ahead of the server's (by our own LIST, or by
        # a check): resuming from any other one is checked first (see ``progress``).
        self._verified_rv: str | None = None
        self._rng = random.Random()

    async def run_forever(self) -> AsyncIterator[WatchItem]:
        backoff = Backoff(self._timings)
        while True:
            healthy_since = self._clock()
            try:
                async for item in self.sync_once():
                    yield item
                # The server ended the stream (e.g. the kind was removed): go round again.
                log.debug("watch ended; re-watching", extra={"path": self._target.path()})
            except errors.ResourceVersionAhead as exc:
                # The server went back in time: what we hold describes objects it may no longer
                # have. Relist at once and let the caller diff (deleted, changed, new).
                log.warning(
                    "watch ahead of the server; relisting",
                    extra={"path": self._target.path(), "error": str(exc)},
                )
                self._hooks.on_resource_version_ahead(exc)
                self._hooks.on_relist("resource_version_ahead")
                self.resource_version = None
                backoff.reset()
                continue
            except errors.WatchExpired:
                # Rare, and it decides what can be seen: jobs that come and go before the list
                # is taken are never seen (a chaos report needs to know it happened).
                log.info("resourceVersion expired (410); relisting", extra={"path": self._target.path()})
                self._hooks.on_expired()
                self._hooks.on_relist("expired")
                self.resource_version = None  # relist at once: a 410 is not a failure of the server
                backoff.reset()
                continue
            except errors.StorageInitializing as exc:
                # A CRD's first requests and every kind after an apiserver restart get 429
                # "storage is (re)initializing": the expected wait, not a failure.
                self._hooks.on_waiting(exc)
                log.debug("storage initializing; waiting", extra={"path": self._target.path()})
                await asyncio.sleep(self._timings.busy_retry)
            except errors.ClusterError as exc:
                if self._clock() - healthy_since >= self._timings.backoff_reset_after:
                    backoff.reset()
                delay = backoff.next_delay()
                self._hooks.on_reconnect(exc)
                log.info(
                    "watch failed; retrying",
                    extra={"path": self._target.path(), "error": str(exc), "retry_in": round(delay, 2)},
                )
                await asyncio.sleep(delay)

    async def sync_once(self) -> AsyncIterator[WatchItem]:
        if self.resource_version is None:
            if self._watch_list is not False:
                async for item in self._watch_list_once():
                    yield item
                if self._watch_list_supported():
                    return  # the WatchList stream ended normally; the caller re-watches
            async for item in self._list():
                yield item
        while True:
            if self.resource_version and self.resource_version != self._verified_rv:
                await progress.check_not_ahead(self._client, self._target.path(), self.resource_version)
                self._verified_rv = self.resource_version
            async for item in self.stream_once():
                yield item

    def _watch_list_supported(self) -> bool:
        return self._watch_list is not False

    async def _list(self) -> AsyncIterator[WatchItem]:
        """A paged LIST; yields each item as ADDED, then ``Synced``."""
        uids: set[str] = set()
        self.listing = True
        params = {"limit": str(self._timings.list_page_size), **self._target.selectors()}
        resource_version = ""
        while True:
            page = await self._client.get_json(self._target.path(), params)
            metadata = page.get("metadata") or {}
            resource_version = resource_version or str(metadata.get("resourceVersion") or "")
            items = page.get("items") or []
            for item in items:
                uid = _uid(item) if self._collect_uids else None
                if uid:
                    uids.add(uid)
                yield {"type": "ADDED", "object": item}
            token = metadata.get("continue")
            if not token:
                break
            params = {
                "limit": str(self._timings.list_page_size),
                "continue": str(token),
                **self._target.selectors(),
            }
        self._hooks.on_connected()
        self.resource_version = self._verified_rv = resource_version
        self.listing = False
        yield Synced(resource_version, frozenset(uids))

    async def _watch_list_once(self) -> AsyncIterator[WatchItem]:
        """A WatchList stream: initial ADDED events, a bookmark marking their end, then changes."""
        params = self._watch_params()
        params.update(
            {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan", "resourceVersion": ""}
        )
        uids: set[str] | None = set()
        self.listing = True
        try:
            async with self._open_stream(params) as lines:
                async for line in lines:
                    event = _decode(line)
                    if event is None:
                        continue
                    kind = event.get("type")
                    obj = event.get("object")
                    if kind == "BOOKMARK":
                        rv = _rv(obj)
                        if uids is not None:
                            if not _is_initial_end(obj):
                                # A server without WatchList: its first bookmark has no end marker.
                                self._watch_list = False
                                return
                            self._watch_list = True
                            self.resource_version = self._verified_rv = rv
                            self.listing = False
                            self._hooks.on_connected()
                            yield Synced(rv, frozenset(uids))
                            uids = None
                        elif rv:
                            self.resource_version = rv
                            yield Progress(rv)
                        continue
                    if kind == "ERROR":
                        raise _error_event(obj)
                    if uids is not None:
                        uid = _uid(obj) if self._collect_uids else None
                        if uid:
                            uids.add(uid)
                    else:
                        rv = _rv(obj)
                        if rv:
                            self.resource_version = rv
                    yield event
        except errors.ApiError as exc:
            if exc.status in (400, 422):
                self._watch_list = False  # this server refuses sendInitialEvents: LIST from now on
                return
            raise
        if uids is not None and self._watch_list is None:
            self._watch_list = False  # the stream ended before the initial events did

    def _watch_params(self) -> dict[str, str]:
        # client-go's reflector: a random timeoutSeconds in [w, 2w], so that many informers
        # (and replicas) do not reconnect in step.
        minimum = self._timings.watch_timeout_seconds
        return {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(minimum + int(self._rng.random() * minimum)),
            **self._target.selectors(),
        }

    def _read_timeout(self, params: dict[str, str]) -> float:
        """Never shorter than the watch's own lifetime: an idle watch may hear nothing at all
        until the server ends it at timeoutSeconds. Silence beyond that means a dead stream."""
        return int(params["timeoutSeconds"]) + self._timings.read_timeout

    @contextlib.asynccontextmanager
    async def _open_stream(self, params: dict[str, str]) -> AsyncIterator[AsyncIterator[bytes]]:
        """A watch stream's lines, guarded by a ``SilenceWatchdog`` task that probes the server
        while the stream is silent and interrupts the read (by cancelling this task) when the
        stream can no longer be trusted; ``_guarded`` takes that cancellation back and raises
        the watchdog's verdict instead."""
        task = asyncio.current_task()
        assert task is not None
        state = progress.StreamState(self._clock)
        async with self._client.stream_lines(
            self._target.path(), params, read_timeout=self._read_timeout(params)
        ) as lines:
            watchdog = asyncio.create_task(
                progress.SilenceWatchdog(
                    client=self._client,
                    path=self._target.path(),
                    timings=self._timings,
                    state=state,
                    reader=task,
                    resource_version=lambda: self.resource_version,
                    clock=self._clock,
                ).run(),
                name=f"silence watchdog {self._target.path()}",
            )
            try:
                yield _guarded(lines, state, task)
            finally:
                watchdog.cancel()  # it holds nothing but a probe request, which this closes

    async def stream_once(self) -> AsyncIterator[WatchItem]:
        """One watch stream from ``resource_version``; returns when the server ends it."""
        params = self._watch_params()
        params["resourceVersion"] = self.resource_version or ""
        async with self._open_stream(params) as lines:
            self._hooks.on_connected()
            async for line in lines:
                event = _decode(line)
                if event is None:
                    continue
                kind = event.get("type")
                obj = event.get("object")
                if kind == "ERROR":
                    raise _error_event(obj)
                rv = _rv(obj)
                if kind == "BOOKMARK":
                    if rv:
                        self._check_bookmark(rv)
                        self.resource_version = rv
                        yield Progress(rv)
                    continue
                if rv:
                    self.resource_version = rv
                yield event

    def _check_bookmark(self, rv: str) -> None:
        """A bookmark below what we already have: the server went back in time."""
        ours, theirs = progress.rv_number(self.resource_version), progress.rv_number(rv)
        if ours is not None and theirs is not None and theirs < ours:
            raise progress.ahead_error(self.resource_version or "", rv)


async def _guarded(
    lines: AsyncIterator[bytes], state: progress.StreamState, task: asyncio.Task[Any]
) -> AsyncIterator[bytes]:
    """``lines``, telling ``state`` when we wait for the server (the watchdog may interrupt only
    then: a consumer slow to take an event is not a silent server)."""
    try:
        async for line in lines:
            state.busy()
            yield line
            state.waiting()
    except asyncio.CancelledError:
        # The watchdog's cancellation: its verdict. Anyone else's: a real cancellation.
        if state.interrupt is not None and task.uncancel() == 0:
            raise state.interrupt from None
        raise


def _decode(line: bytes) -> RawEvent | None:
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError:
        log.warning("undecodable watch line skipped", extra={"bytes": len(line)})
        return None
    if not isinstance(event, dict):
        return None
    return event


def _uid(obj: Any) -> str | None:
    if isinstance(obj, dict):
        metadata = obj.get("metadata")
        if isinstance(metadata, dict):
            uid = metadata.get("uid")
            if isinstance(uid, str) and uid:
                return uid
    return None


def _rv(obj: Any) -> str:
    if isinstance(obj, dict):
        metadata = obj.get("metadata")
        if isinstance(metadata, dict):
            rv = metadata.get("resourceVersion")
            if isinstance(rv, str):
                return rv
    return ""


def _is_initial_end(obj: Any) -> bool:
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    return isinstance(annotations, dict) and annotations.get(INITIAL_EVENTS_END) == "true"


def _error_event(obj: Any) -> errors.WatcherError:
    """A watch ERROR event carries a Status: 410 means relist; others map like HTTP statuses."""
    code = obj.get("code") if isinstance(obj, dict) else None
    message = obj.get("message") if isinstance(obj, dict) else None
    status = code if isinstance(code, int) else 500
    if _too_large_resource_version(obj):
        # Older apiservers end a watch from the future with "Too large resource version".
        return errors.ResourceVersionAhead(f"watch ERROR event: {message or status}")
    return error_for_status(status, f"watch ERROR event: {message or status}")


def _too_large_resource_version(obj: Any) -> bool:
    details = obj.get("details") if isinstance(obj, dict) else None
    causes = details.get("causes") if isinstance(details, dict) else None
    return isinstance(causes, list) and any(
        isinstance(c, dict) and c.get("reason") == "ResourceVersionTooLarge" for c in causes
    )
