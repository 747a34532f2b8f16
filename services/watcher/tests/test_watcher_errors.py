"""The exception tree drawn in ``errors``' docstring is the one the module defines."""

from __future__ import annotations

import inspect
import re

from trainwatch_watcher import errors


def _drawn_tree() -> dict[str, str]:
    """Each class of the drawing and its parent, read from the indentation of the lines."""
    doc = errors.__doc__ or ""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in doc.splitlines():
        found = re.match(r"^(\s*(?:[│ ]\s*)*(?:├── |└── )?)([A-Z]\w+)\b", line)
        if found is None or not isinstance(getattr(errors, found.group(2), None), type):
            continue
        depth, name = len(found.group(1)), found.group(2)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            parents[name] = stack[-1][1]
        stack.append((depth, name))
    return parents


def test_every_exception_is_drawn_under_its_parent() -> None:
    defined = {
        name: cls.__bases__[0].__name__
        for name, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.WatcherError) and cls is not errors.WatcherError
    }
    assert _drawn_tree() == defined
