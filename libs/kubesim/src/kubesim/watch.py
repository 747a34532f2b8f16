"""Serving one watch stream: initial events, history replay, fan-out, bookmarks, 410.

Every watch reads the cluster's shared event history from its own cursor (a
resourceVersion) and writes whole batches of pre-encoded objects, so fan-out costs no
per-watcher queues and no re-encoding. A watch wakes on the store's ``changed`` event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import orjson

from kubesim import errors, views
from kubesim.faults import Faults
from kubesim.kinds import KindSpec
from kubesim.selectors import FieldSelector, LabelSelector
from kubesim.store import HistoryEvent, Store, StoredObject

__all__ = ["WatchHandle", "WatchHub", "WatchRequest", "serve_watch"]

_PREFIX = {
    "ADDED": b'{"type":"ADDED","object":',
    "MODIFIED": b'{"type":"MODIFIED","object":',
    "DELETED": b'{"type":"DELETED","object":',
}
_SUFFIX = b"}\n"
BATCH = 128  # events per write: smaller batches measured cheaper (cache-friendly) than huge ones
FINAL_BOOKMARK_LEAD = 1.0

Write = Callable[[bytes], Awaitable[None]]


@dataclass(slots=True)
class WatchRequest:
    spec: KindSpec
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    resource_version: str | None
    bookmarks: bool
    send_initial_events: bool
    timeout: float


@dataclass(eq=False)
class WatchHandle:
    """A live watch; ``drop`` closes its connection abruptly."""

    request: WatchRequest
    close_transport: Callable[[], None]
    dropped: bool = False
    sent: int = field(default=0)
    # Set when the server was SIGTERMed: the stream stays open but sends nothing more (a real
    # apiserver stops listening at once and keeps its HTTP/1.1 watch streams open until SIGKILL).
    frozen: bool = False

    def drop(self) -> None:
        self.dropped = True
        self.close_transport()


class WatchHub:
    """The live watches of one cluster."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.active: set[WatchHandle] = set()

    def drop_all(self) -> int:
        handles = list(self.active)
        for h in handles:
            h.drop()
        self.store.wake()
        return len(handles)

    @property
    def count(self) -> int:
        return len(self.active)


def _bookmark(spec: KindSpec, rv: int, *, initial_end: bool = False) -> bytes:
    meta: dict[str, object] = {"resourceVersion": str(rv)}
    if initial_end:
        meta = {"annotations": {"k8s.io/initial-events-end": "true"}, "resourceVersion": str(rv)}
    obj = {"kind": spec.kind, "apiVersion": spec.api_version, "metadata": meta}
    return orjson.dumps({"type": "BOOKMARK", "object": obj}) + b"\n"


def error_event(err: errors.ApiError) -> bytes:
    return orjson.dumps({"type": "ERROR", "object": err.status()}) + b"\n"


def _matcher(req: WatchRequest) -> Callable[[StoredObject], bool] | None:
    if req.labels.empty and req.fields.empty:
        return None
    labels, fields = req.labels, req.fields
    return lambda o: labels.matches(o.labels) and fields.matches(o.namespace, o.name, o.fields)


def _encode(req: WatchRequest, events: list[HistoryEvent], pieces: list[bytes]) -> int:
    """Append the wire form of the events this watch should see; returns how many."""
    resource, ns = req.spec.bucket, req.namespace
    match = _matcher(req)
    view = bool(req.spec.view_of)
    n = 0
    append = pieces.append
    for ev in events:
        if ev.resource != resource or (ns is not None and ev.obj.namespace != ns):
            continue
        etype = ev.type
        if match is not None:
            now_in = match(ev.obj) if etype != "DELETED" else False
            was_in = ev.prev is not None and match(ev.prev)
            if etype == "DELETED":
                if not was_in:
                    continue
            elif now_in and not was_in:
                etype = "ADDED"
            elif was_in and not now_in:
                etype = "DELETED"
            elif not now_in:
                continue
        append(_PREFIX[etype])
        append(ev.obj.data if not view else views.outward_bytes(req.spec, ev.obj.data))
        append(_SUFFIX)
        n += 1
    return n


def _parse_rv(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise errors.bad_request(f"invalid resource version: {raw!r}") from None
    if value < 0:
        raise errors.bad_request(f"invalid resource version: {raw!r}")
    return value


async def serve_watch(
    req: WatchRequest,
    store: Store,
    faults: Faults,
    handle: WatchHandle,
    write: Write,
    *,
    bookmark_interval: float,
    watch_cache: bool = True,
) -> None:
    """Write the whole watch stream. Returns when it ends normally (timeout, kind removed,
    fell behind the history); raises ``ConnectionError`` when the client went away.

    Bookmarks as observed on v1.36: a periodic one only when the resource has changed since the
    previous one (an idle resource gets none), none at all without the watch cache, and none
    while the requested resourceVersion is ahead of the server's (etcd restored from a backup:
    the real server answers 200 and stays silent until its revision passes the requested one)."""
    spec = req.spec
    started = time.monotonic()
    deadline = started + req.timeout
    epoch = store.epoch(spec)
    rv_raw = req.resource_version or ""
    initial = req.send_initial_events or rv_raw in ("", "0")
    while (stall := faults.stalled_for()) > 0 and not handle.dropped and time.monotonic() < deadline:
        await _wait(
            store.changed(spec.bucket), min(stall, deadline - time.monotonic())
        )  # silent from the start
    if handle.dropped or time.monotonic() >= deadline:
        return
    if initial:
        cursor, objs = store.snapshot(spec, namespace=req.namespace)
        match = _matcher(req)
        pieces: list[bytes] = []
        for o in objs:
            if match is None or match(o):
                pieces += (_PREFIX["ADDED"], views.outward_bytes(spec, o.data), _SUFFIX)
                if len(pieces) >= BATCH * 3:
                    await write(b"".join(pieces))
                    pieces = []
        if req.bookmarks and (req.send_initial_events or rv_raw == ""):
            pieces.append(_bookmark(spec, cursor, initial_end=True))
        if pieces:
            await write(b"".join(pieces))
    else:
        cursor = _parse_rv(rv_raw)
        if cursor < store.compacted_rv:
            await write(error_event(errors.expired(cursor, store.compacted_rv + 1)))
            return
    # A watch from the future is silent until the server's revision passes the requested one.
    silent_until = cursor if cursor > store.resource_version else 0
    bookmarked = store.resource_rv(spec.bucket)
    next_bookmark = started + bookmark_interval
    final_bookmark = deadline - FINAL_BOOKMARK_LEAD if req.timeout > 2 * FINAL_BOOKMARK_LEAD else None
    while True:
        now = time.monotonic()
        if handle.dropped or now >= deadline:
            return
        changed = store.changed(spec.bucket)
        if handle.frozen:
            await _wait(changed, deadline - now)
            continue
        stall = faults.stalled_for()
        if stall > 0:
            await _wait(changed, min(stall, deadline - now))
            continue
        try:
            events = store.history_after(cursor, BATCH)
        except errors.ApiError:
            return  # fell behind the history: a real server closes a watcher that is too slow
        if events:
            pieces = []
            n = _encode(req, events, pieces)
            cursor = events[-1].rv
            if n:
                handle.sent += n
                await write(b"".join(pieces))
            continue
        if store.epoch(spec) != epoch:
            return  # the kind was removed (its DELETED events are sent above)
        cursor = max(cursor, store.resource_version)
        if req.bookmarks and watch_cache and store.resource_version > silent_until:
            due = next_bookmark if final_bookmark is None else min(next_bookmark, final_bookmark)
            if now >= due:
                final = final_bookmark is not None and now >= final_bookmark
                resource_rv = store.resource_rv(spec.bucket)
                # Periodic bookmarks only when the resource changed; the one before the timeout always.
                if final or resource_rv > bookmarked:
                    await write(_bookmark(spec, cursor))
                    bookmarked = resource_rv
                next_bookmark = now + bookmark_interval
                if final:
                    final_bookmark = None
                continue
            wake = min(due, deadline)
        else:
            wake = deadline
        await _wait(changed, wake - now)


async def _wait(event: asyncio.Event, seconds: float) -> None:
    if seconds <= 0:
        await asyncio.sleep(0)
        return
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        pass
