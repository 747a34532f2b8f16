"""Opaque keyset cursors (pure).

A cursor is base64url JSON holding the sort, the order, the keyset position of the last row
returned and a fingerprint of the filters: replaying it with another sort or other filters is
refused (400) rather than silently returning a page of some other list.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import astuple
from datetime import datetime
from typing import Any

import orjson

from trainwatch_persister.filters import JobFilters, SortField, SortOrder

CURSOR_VERSION = 1


class InvalidCursor(ValueError):
    """The cursor is malformed, or belongs to another sort or other filters."""


def filters_fingerprint(filters: JobFilters) -> str:
    canonical = orjson.dumps([_plain(v) for v in astuple(filters)])
    return hashlib.sha256(canonical).hexdigest()[:16]


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def encode_cursor(
    *, sort: SortField, order: SortOrder, filters: JobFilters, position: tuple[Any, str, str]
) -> str:
    value, cluster_id, uid = position
    body = {
        "v": CURSOR_VERSION,
        "s": sort.value,
        "o": order.value,
        "f": filters_fingerprint(filters),
        "k": [value.isoformat() if isinstance(value, datetime) else value, cluster_id, uid],
    }
    return base64.urlsafe_b64encode(orjson.dumps(body)).decode().rstrip("=")


def decode_cursor(
    cursor: str, *, sort: SortField, order: SortOrder, filters: JobFilters
) -> tuple[Any, str, str]:
    try:
        body = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        value, cluster_id, uid = body["k"]
        matches = (body["v"], body["s"], body["o"], body["f"]) == (
            CURSOR_VERSION, sort.value, order.value, filters_fingerprint(filters),
        )  # fmt: skip
    except (binascii.Error, orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise InvalidCursor("malformed cursor") from exc
    if not matches:
        raise InvalidCursor("the cursor belongs to another sort or other filters; start again without it")
    if not (isinstance(value, str) and isinstance(cluster_id, str) and isinstance(uid, str)):
        raise InvalidCursor("malformed cursor")
    if sort is SortField.NAME:
        return value, cluster_id, uid
    try:
        return datetime.fromisoformat(value), cluster_id, uid
    except ValueError as exc:
        raise InvalidCursor("malformed cursor") from exc
