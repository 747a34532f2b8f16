"""Can these credentials watch each job kind? A LIST per served kind, as the watcher will do.

Discovery (``/apis``) is allowed to any authenticated user on a real apiserver, so a token
without RBAC bindings passes a discovery-only check and then gets 403 on every LIST and WATCH.
A ``LIST ?limit=1`` of each served kind is the watcher's own first request, so its answer is
the real permission (a SelfSubjectAccessReview would need its own RBAC and says nothing about
what the server then does):

- 200: ``allowed``;
- 429 ``storage is (re)initializing``: ``allowed`` too (authorization runs before storage);
- 403: ``forbidden``; 404: ``not_installed`` (the CRD went away since discovery);
- anything else: ``error`` (with the status), which does not fail the test on its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpx

from trainwatch_common.kinds import ALL_JOB_KINDS, JobKind
from trainwatch_registry.models import KindAccess


def served_job_kinds(resources: dict[str, set[str]]) -> list[JobKind]:
    """The catalog kinds whose plural the discovery documents list (one per kind key)."""
    kinds: dict[str, JobKind] = {}
    for kind in ALL_JOB_KINDS:
        if kind.plural in resources.get(kind.api_version, set()):
            kinds.setdefault(kind.key, kind)
    return [kinds[key] for key in sorted(kinds)]


async def kind_access(
    client: httpx.AsyncClient, kinds: Iterable[JobKind], *, extensions: dict[str, Any] | None
) -> dict[str, KindAccess]:
    access: dict[str, KindAccess] = {}
    for kind in kinds:
        path = f"{kind.api_path}/{kind.plural}"
        async with client.stream("GET", path, params={"limit": "1"}, extensions=extensions) as response:
            # Only the status matters: the body (a page of one object) is never read.
            access[kind.key] = _access(response.status_code)
    return access


def _access(status: int) -> KindAccess:
    if status == 200 or status == 429:
        return "allowed"
    if status == 403:
        return "forbidden"
    if status == 404:
        return "not_installed"
    return "error"


def forbidden_summary(access: dict[str, KindAccess]) -> str | None:
    """The error of a test where the credentials may not list some served kinds."""
    forbidden = sorted(key for key, value in access.items() if value == "forbidden")
    if not forbidden:
        return None
    return (
        f"the credentials may not list {', '.join(forbidden)} (403 Forbidden): grant list and watch on them"
    )
