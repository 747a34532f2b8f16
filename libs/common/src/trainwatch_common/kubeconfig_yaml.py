"""Safe reading of a kubeconfig document, YAML or JSON, before anything looks at its meaning.

This is THE kubeconfig parser: every service that reads a kubeconfig an operator typed (the
registry's intake, the dashboard's context picker) calls ``load_mapping`` and nothing else, so a
document one of them refuses is refused by all of them.

Limits come first: the size is checked before parsing; YAML aliases are refused outright (a
kubeconfig needs none, and aliases are how a "billion laughs" document explodes in memory);
nesting depth and node count are bounded; duplicate keys are refused rather than silently
resolved (two ``token:`` lines mean someone is confused, or something is being smuggled).
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

MAX_DOCUMENT_BYTES = 1024 * 1024
MAX_DEPTH = 32
MAX_NODES = 50_000


class DocumentRefused(ValueError):
    """The text is not one safe YAML/JSON mapping; ``code`` names the problem for API clients."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# libyaml's parser when available (several times faster); the constructor stays Python's SafeConstructor.
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictSafeLoader(_BaseLoader):  # type: ignore[valid-type, misc]
    """SafeLoader that refuses duplicate keys (aliases and size are refused before composing)."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError as exc:  # an unhashable key, e.g. a mapping used as a key
                raise ConstructorError(
                    None, None, "a mapping key must be a scalar", key_node.start_mark
                ) from exc
            if duplicate:
                raise ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def _check_events(text: str) -> None:
    """Walk the YAML event stream: no aliases, bounded depth and size, exactly one document."""
    depth = nodes = documents = 0
    for event in yaml.parse(text, Loader=_BaseLoader):
        # An anchor alone expands nothing, but a kubeconfig needs neither: one simple rule.
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise DocumentRefused(
                "yaml_alias", "YAML anchors (&name) and aliases (*name) are not accepted in a kubeconfig"
            )
        if isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise DocumentRefused("multiple_documents", "expected one YAML document, found several")
        elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            nodes += 1
            if depth > MAX_DEPTH:
                raise DocumentRefused("too_deep", f"the document nests deeper than {MAX_DEPTH} levels")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(event, yaml.ScalarEvent):
            nodes += 1
        if nodes > MAX_NODES:
            raise DocumentRefused("too_many_nodes", f"the document has more than {MAX_NODES} nodes")


def _load_json(text: str) -> Any:
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in pairs:
            if key in result:
                raise DocumentRefused("duplicate_key", f"invalid JSON: duplicate key {key!r}")
            result[key] = value
        return result

    def no_constants(name: str) -> Any:
        raise DocumentRefused("invalid_json", f"invalid JSON: {name} is not a JSON value")

    try:
        return json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constants)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # a second document after the first (JSON lines, or "---")
            raise DocumentRefused(
                "multiple_documents",
                f"expected one JSON document, found more after it (line {exc.lineno})",
            ) from None
        raise DocumentRefused("invalid_json", f"invalid JSON: {exc.msg} at line {exc.lineno}") from None
    except RecursionError:
        raise DocumentRefused("too_deep", f"the document nests deeper than {MAX_DEPTH} levels") from None
    except DocumentRefused:  # from the hooks above (it is a ValueError too)
        raise
    except ValueError as exc:  # a value Python will not build, e.g. an integer of 5,000 digits
        raise DocumentRefused("invalid_json", f"invalid JSON: {_value_problem(exc)}") from None


def _load_yaml(text: str) -> Any:
    try:
        _check_events(text)
        return yaml.load(text, Loader=_StrictSafeLoader)
    except DocumentRefused:
        raise
    except ConstructorError as exc:
        problem = exc.problem or "unsupported content"
        code = "duplicate_key" if "duplicate key" in problem else "yaml_tag"
        raise DocumentRefused(code, f"invalid YAML: {problem}{_where(exc)}") from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if "nesting depth" in problem:  # libyaml's own limit, met while scanning ahead
            raise DocumentRefused("too_deep", f"the document nests deeper than {MAX_DEPTH} levels") from None
        raise DocumentRefused("invalid_yaml", f"invalid YAML: {problem}{_where(exc)}") from None
    except ValueError as exc:  # a scalar the constructor cannot build: 5,000 digits, 2001-02-30
        raise DocumentRefused("invalid_yaml", f"invalid YAML: {_value_problem(exc)}") from None


def _value_problem(exc: ValueError) -> str:
    """A short reason naming no value (the value may be a secret)."""
    if "integer string conversion" in str(exc):
        return "a number has too many digits"
    return f"a value cannot be read ({str(exc).splitlines()[0][:100]})"


def _where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


def _check_tree(value: Any, level: int = 0) -> None:
    """Bounded depth, and string keys at every level (YAML reads ``7:``, ``~:`` or ``true:`` as
    an int, None or bool key, which no kubeconfig field is and which code sorting keys trips on)."""
    if level > MAX_DEPTH:
        raise DocumentRefused("too_deep", f"the document nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise DocumentRefused(
                    "non_string_key",
                    f"every key of a kubeconfig is a string; found a {type(key).__name__} key",
                )
            _check_tree(item, level + 1)
    elif isinstance(value, list):
        for item in value:
            _check_tree(item, level + 1)


def load_mapping(text: str) -> dict[str, Any]:
    """Parse a kubeconfig given as YAML or JSON into a mapping, or raise ``DocumentRefused``."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_DOCUMENT_BYTES:
        raise DocumentRefused("too_large", f"the kubeconfig is {size} bytes; the limit is 1 MiB")
    if not text.strip():
        raise DocumentRefused("empty", "the kubeconfig is empty")
    if "\x00" in text:
        raise DocumentRefused("binary", "the kubeconfig contains NUL bytes (binary data?)")
    stripped = text.lstrip("\ufeff \t\r\n")
    value = _load_json(stripped) if stripped.startswith(("{", "[")) else _load_yaml(text)
    if not isinstance(value, dict):
        kind = "a list" if isinstance(value, list) else f"a {type(value).__name__}"
        raise DocumentRefused("not_a_mapping", f"a kubeconfig is a single mapping, not {kind}")
    _check_tree(value)
    return value
