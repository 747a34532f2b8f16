"""What a job list asks for (pure: no SQL): its filters and its order.

``queries`` turns these into SQL; ``api.pagination`` puts them in page cursors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class SortField(StrEnum):
    UPDATED_AT = "updated_at"
    CREATED_AT = "created_at"
    NAME = "name"


class SortOrder(StrEnum):
    ASC = "asc"
    DESC = "desc"


@dataclass(frozen=True, slots=True)
class JobFilters:
    """Every list filter; a value list means "any of", different filters are combined with AND."""

    clusters: Sequence[str] = ()
    namespaces: Sequence[str] = ()
    kinds: Sequence[str] = ()
    phases: Sequence[str] = ()
    terminal: bool | None = None
    deleted: bool | None = None
    owner: str | None = None
    labels: Sequence[tuple[str, str]] = ()
    name_contains: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    updated_after: datetime | None = None
    updated_before: datetime | None = None
    diagnoses: Sequence[str] = ()  # current diagnosis category, any of
    blames: Sequence[str] = ()  # current diagnosis blame, any of
