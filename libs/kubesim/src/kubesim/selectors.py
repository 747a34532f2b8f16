"""Label and field selectors, parsed the way the API server parses them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kubesim.errors import ApiError, bad_request

__all__ = ["FieldSelector", "LabelSelector", "parse_field_selector", "parse_label_selector"]

_SET_RE = re.compile(r"^\s*(!?)([A-Za-z0-9./_-]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")
_EQ_RE = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s*(==|=|!=)\s*([A-Za-z0-9._-]*)\s*$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")

Requirement = Callable[[Mapping[str, str]], bool]


def _split_top(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    cur = ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def _check_key(key: str, raw: str) -> None:
    if not _LABEL_KEY.match(key) or len(key.rsplit("/", 1)[-1]) > 63:
        raise bad_request(f'unable to parse requirement: invalid label key "{key}": in selector "{raw}"')


@dataclass(frozen=True, slots=True)
class LabelSelector:
    raw: str
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(req(labels) for req in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def _requirement(part: str, raw: str) -> Requirement:
    m = _EQ_RE.match(part)
    if m:
        key, op, value = m.groups()
        _check_key(key, raw)
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    m = _SET_RE.match(part)
    if m:
        neg, key, op, values = m.groups()
        _check_key(key, raw)
        if op is None:
            if neg:
                return lambda labels: key not in labels
            return lambda labels: key in labels
        if neg:
            raise bad_request(f"unable to parse requirement: found '{op}', expected: ',' or 'end of string'")
        vals = frozenset(v.strip() for v in values.split(",") if v.strip())
        if not vals:
            raise bad_request(
                f"unable to parse requirement: for 'in', 'notin' operators, values set can't be empty"
                f' in selector "{raw}"'
            )
        if op == "in":
            return lambda labels: labels.get(key) in vals
        return lambda labels: labels.get(key) not in vals
    raise bad_request(f'unable to parse requirement: found unexpected token in selector "{raw}"')


def parse_label_selector(raw: str | None) -> LabelSelector:
    """Parse ``labelSelector``; raises a 400 ``ApiError`` on syntax errors."""
    if not raw or not raw.strip():
        return LabelSelector("", ())
    return LabelSelector(raw, tuple(_requirement(p, raw) for p in _split_top(raw)))


@dataclass(frozen=True, slots=True)
class FieldSelector:
    raw: str
    name_eq: str | None = None
    name_ne: tuple[str, ...] = ()
    namespace_eq: str | None = None
    namespace_ne: tuple[str, ...] = ()
    impossible: bool = False
    # Other selectable fields of built-in kinds: (field, value, negated).
    extra: tuple[tuple[str, str, bool], ...] = ()

    def matches(self, namespace: str, name: str, fields: Mapping[str, str] | None = None) -> bool:
        if self.impossible:
            return False
        if self.name_eq is not None and name != self.name_eq:
            return False
        if self.namespace_eq is not None and namespace != self.namespace_eq:
            return False
        if name in self.name_ne or namespace in self.namespace_ne:
            return False
        if self.extra:
            got = fields or {}
            return all((got.get(f, "") == v) != neg for f, v, neg in self.extra)
        return True

    @property
    def empty(self) -> bool:
        return not self.raw


def parse_field_selector(
    raw: str | None,
    kind_label: str = "",
    allowed: tuple[str, ...] = (),
    aliases: Mapping[str, str] | None = None,
) -> FieldSelector:
    """Parse ``fieldSelector``. Custom resources support only ``metadata.name`` and
    ``metadata.namespace``; anything else is a 400, as on a real server. Built-in kinds add
    their own fields (``allowed``; ``aliases`` renames a view's fields to the stored ones) and
    answer an unknown one with ``field label not supported``."""
    if not raw or not raw.strip():
        return FieldSelector("")
    name_eq: str | None = None
    ns_eq: str | None = None
    name_ne: list[str] = []
    ns_ne: list[str] = []
    extra: list[tuple[str, str, bool]] = []
    impossible = False
    for part in raw.split(","):
        part = part.strip()
        for op in ("!=", "==", "="):
            if op in part:
                field, value = (s.strip() for s in part.split(op, 1))
                break
        else:
            raise bad_request(f"invalid selector: '{raw}'; can't understand '{part}'")
        if field in allowed:
            extra.append(((aliases or {}).get(field, field), value, op == "!="))
            continue
        if allowed and field not in ("metadata.name", "metadata.namespace"):
            raise bad_request(f"field label not supported: {field}")
        if field not in ("metadata.name", "metadata.namespace"):
            label = f'"{field}" is not a known field selector: only "metadata.name", "metadata.namespace"'
            raise ApiError(400, label if not kind_label else f"{kind_label}: {label}")
        if op == "!=":
            (name_ne if field == "metadata.name" else ns_ne).append(value)
        elif field == "metadata.name":
            impossible = impossible or (name_eq is not None and name_eq != value)
            name_eq = value
        else:
            impossible = impossible or (ns_eq is not None and ns_eq != value)
            ns_eq = value
    return FieldSelector(raw, name_eq, tuple(name_ne), ns_eq, tuple(ns_ne), impossible, tuple(extra))
