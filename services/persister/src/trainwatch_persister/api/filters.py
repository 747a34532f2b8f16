"""The jobs filters as query parameters, shared by the list, the export and the aggregates."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from fastapi import Depends, HTTPException, Query, status

from trainwatch_common import Phase
from trainwatch_common.events.diagnosis import Blame, DiagnosisCategory
from trainwatch_persister.filters import JobFilters

# A Kubernetes label key: an optional DNS-subdomain prefix and '/', then a name.
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def parse_labels(raw: list[str]) -> list[tuple[str, str]]:
    labels: list[tuple[str, str]] = []
    for item in raw:
        key, sep, value = item.partition("=")
        if not sep or not _LABEL_KEY.match(key) or len(key) > 317:
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                f"label filter {item!r} is not key=value with a Kubernetes label key",
            )
        labels.append((key, value))
    return labels


def job_filters(
    cluster: Annotated[list[str], Query(description="Cluster id (repeat for any of several)")] = [],  # noqa: B006
    namespace: Annotated[list[str], Query(description="Namespace (repeatable)")] = [],  # noqa: B006
    kind: Annotated[list[str], Query(description="Kind key, e.g. pytorchjob (repeatable)")] = [],  # noqa: B006
    phase: Annotated[list[Phase], Query(description="Phase (repeatable)")] = [],  # noqa: B006
    terminal: Annotated[
        bool | None, Query(description="Only finished (true) or unfinished (false) jobs")
    ] = None,
    deleted: Annotated[bool | None, Query(description="Only deleted (true) or live (false) jobs")] = None,
    owner: Annotated[str | None, Query(description="Owner, exactly")] = None,
    label: Annotated[list[str], Query(description="key=value; repeat for all of several")] = [],  # noqa: B006
    name: Annotated[str | None, Query(description="Substring of the job name, case-insensitive")] = None,
    created_after: Annotated[
        datetime | None, Query(description="created_at >= this (UTC if no zone)")
    ] = None,
    created_before: Annotated[datetime | None, Query(description="created_at < this")] = None,
    updated_after: Annotated[datetime | None, Query(description="updated_at >= this")] = None,
    updated_before: Annotated[datetime | None, Query(description="updated_at < this")] = None,
    diagnosis: Annotated[
        list[DiagnosisCategory],
        Query(description="Category of the current diagnosis, e.g. OOMKilled (repeatable = any of)"),
    ] = [],  # noqa: B006
    blame: Annotated[
        list[Blame], Query(description="Blame of the current diagnosis, e.g. infrastructure (repeatable)")
    ] = [],  # noqa: B006
) -> JobFilters:
    return JobFilters(
        clusters=tuple(cluster),
        namespaces=tuple(namespace),
        kinds=tuple(kind),
        phases=tuple(p.value for p in phase),
        terminal=terminal,
        deleted=deleted,
        owner=owner,
        labels=tuple(parse_labels(label)),
        name_contains=name or None,
        created_after=created_after,
        created_before=created_before,
        updated_after=updated_after,
        updated_before=updated_before,
        diagnoses=tuple(c.value for c in diagnosis),
        blames=tuple(b.value for b in blame),
    )


FiltersDep = Annotated[JobFilters, Depends(job_filters)]
