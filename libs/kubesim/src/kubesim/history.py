"""Stored objects and the bounded, compactable event history of one cluster."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from kubesim import errors

__all__ = ["History", "HistoryEvent", "Key", "StoredObject", "encode", "storage_key"]

Key = tuple[str, str]


@dataclass(slots=True)
class StoredObject:
    """One version of an object: its key, uid, resourceVersion, labels and JSON bytes."""

    namespace: str
    name: str
    uid: str
    rv: int
    labels: dict[str, str]
    data: bytes
    # The selectable fields of built-in kinds that have more than metadata.name/namespace.
    fields: dict[str, str] | None = None

    def decode(self) -> dict[str, Any]:
        value: dict[str, Any] = orjson.loads(self.data)
        return value


@dataclass(slots=True)
class HistoryEvent:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    resource: str
    obj: StoredObject
    prev: StoredObject | None


def encode(body: Any) -> bytes:
    """JSON bytes of exactly the right size (orjson's result keeps its growth buffer)."""
    return bytes(memoryview(orjson.dumps(body)))


def storage_key(key: Key) -> str:
    """The etcd key order: ``namespace/name`` (``name`` for cluster-scoped objects)."""
    return f"{key[0]}/{key[1]}" if key[0] else key[1]


def _rv_of(ev: HistoryEvent) -> int:
    return ev.rv


class History:
    """Events in resourceVersion order; at most ``limit`` kept. ``compacted_rv`` is the
    oldest resourceVersion a watch may resume from."""

    def __init__(self, limit: int, initial_rv: int) -> None:
        self.limit = limit
        self.compacted_rv = initial_rv
        self._events: list[HistoryEvent] = []
        self._start = 0

    def __len__(self) -> int:
        return len(self._events) - self._start

    def append(self, event: HistoryEvent) -> None:
        self._events.append(event)
        live = len(self._events) - self._start
        if live > self.limit:
            self._start += live - self.limit
            self.compacted_rv = self._events[self._start - 1].rv
            self._trim()

    def compact(self, target: int) -> None:
        if target <= self.compacted_rv:
            return
        self._start = bisect.bisect_right(self._events, target, lo=self._start, key=_rv_of)
        self.compacted_rv = target
        self._trim()

    def _trim(self) -> None:
        if self._start > max(1024, len(self._events) // 2):
            del self._events[: self._start]
            self._start = 0

    def after(self, rv: int, limit: int) -> list[HistoryEvent]:
        """Up to ``limit`` events newer than ``rv``; 410 if ``rv`` was compacted."""
        if rv < self.compacted_rv:
            raise errors.expired(rv, self.compacted_rv + 1)
        i = bisect.bisect_right(self._events, rv, lo=self._start, key=_rv_of)
        return self._events[i : i + limit]

    def newest_first(self, down_to: int) -> Iterator[HistoryEvent]:
        """Events newer than ``down_to``, newest first (for rebuilding an older state)."""
        for ev in reversed(self._events[self._start :]):
            if ev.rv <= down_to:
                return
            yield ev
