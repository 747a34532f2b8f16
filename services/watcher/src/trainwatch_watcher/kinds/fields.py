"""Safe readers for fields of Kubernetes objects decoded from JSON (plain dicts and lists).

The normalizers read objects written by controllers we do not control, at versions we may not
know. Two rules keep that safe:

- a *container* of the wrong JSON type (``status`` that is a list, ``conditions`` that is a
  string, a condition entry that is a number) means we cannot read the object at all:
  :class:`MalformedObject`;
- a *leaf* of the wrong type (``active: "3"``, ``lastTransitionTime: 12``) is treated as absent,
  so one odd field never hides the rest of a status.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from trainwatch_watcher.kinds.model import MalformedObject

MAX_MESSAGE_CHARS = 4096
# metav1.Condition caps reason at 1024 characters; nothing longer is a reason.
MAX_REASON_CHARS = 1024

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?([Zz]|[+-]\d{2}:?\d{2})?$"
)


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp as an aware UTC datetime; None for anything else.

    Accepts the ``Z`` suffix, numeric offsets and any number of fractional digits (the API server
    writes seconds, MicroTime writes microseconds, some controllers nanoseconds). A missing offset is
    read as UTC, which is what every Kubernetes serializer means.
    """
    if not isinstance(value, str):
        return None
    if len(value) > _CACHED_TIME_CHARS:
        return _parse_rfc3339(value)
    return _parse_rfc3339_cached(value)


def _parse_rfc3339(value: str) -> datetime | None:
    match = _RFC3339.match(value.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    tz = UTC
    if offset and offset not in ("Z", "z"):
        sign = 1 if offset[0] == "+" else -1
        digits = offset[1:].replace(":", "")
        try:
            tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
        except ValueError:
            return None
    try:
        # Leap seconds ("...:60Z") are legal RFC 3339; datetime cannot hold them, so clamp.
        parsed = datetime(
            int(year), int(month), int(day), int(hour), int(minute), min(int(second), 59), micros, tz
        )
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def mapping_field(parent: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    """``parent[key]`` as a mapping; absent or null reads as empty, any other type is malformed."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise MalformedObject(f"{where}.{key} is a {type(value).__name__}, expected an object")
    return value


def list_field(parent: Mapping[str, Any], key: str, where: str) -> Sequence[Any]:
    """``parent[key]`` as a JSON array; absent or null reads as empty, any other type is malformed."""
    value = parent.get(key)
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise MalformedObject(f"{where}.{key} is a {type(value).__name__}, expected an array")
    return value


def mapping_items(parent: Mapping[str, Any], key: str, where: str) -> list[Mapping[str, Any]]:
    """An array of objects (conditions, replicatedJobsStatus...); a non-object entry is malformed."""
    items = list_field(parent, key, where)
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise MalformedObject(f"{where}.{key}[{index}] is a {type(item).__name__}, expected an object")
    return list(items)


def count(parent: Mapping[str, Any], key: str) -> int:
    """A replica counter. Zero counters are omitted by the controllers (omitempty), so absent is 0."""
    value = optional_count(parent, key)
    return 0 if value is None else value


def optional_count(parent: Mapping[str, Any], key: str) -> int | None:
    """A counter whose absence means something (Job ``ready`` is nil when the feature is off)."""
    value = parent.get(key)
    # bool is an int in Python; JSON true is not a count.
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return max(value, 0)


def text(parent: Mapping[str, Any], key: str) -> str | None:
    """A string field; empty strings and other types read as None."""
    value = parent.get(key)
    return value if isinstance(value, str) and value else None


def enum_text(parent: Mapping[str, Any], key: str) -> str | None:
    """A field holding an enum value: "" when absent or empty, None when it is not a string.

    None lets the caller map a value it cannot read to Phase.Unknown instead of treating it as the
    empty (just created) state.
    """
    value = parent.get(key, "")
    if value is None:
        return ""
    return value if isinstance(value, str) else None


def flag(parent: Mapping[str, Any], key: str) -> bool:
    """A boolean spec field such as ``suspend``; only JSON true counts."""
    return parent.get(key) is True


def trim_message(message: str | None) -> str | None:
    """Cap a message so a controller's stack trace cannot bloat every event that carries it."""
    if message is None:
        return None
    message = message.strip()
    if not message:
        return None
    if len(message) > MAX_MESSAGE_CHARS:
        return message[: MAX_MESSAGE_CHARS - 1] + "…"
    return message


def trim_reason(reason: str | None) -> str | None:
    if reason is None:
        return None
    reason = reason.strip()
    return reason[:MAX_REASON_CHARS] or None


# Timestamps repeat across the updates of a job (its conditions' transition times, startTime) and
# across jobs; the cache makes those parses nearly free. Bounded in entries and in key length
# (a timestamp with nanoseconds and an offset is 35 characters), so at most ~1 MB.
_CACHED_TIME_CHARS = 64
_parse_rfc3339_cached = functools.lru_cache(maxsize=4096)(_parse_rfc3339)
