"""Per-kind health: is each job kind of a cluster watched, forbidden, not installed...?

A cluster's discovery can succeed while every LIST and WATCH of a job kind gets 403 (a token
without RBAC bindings, as a real apiserver does): "reachable" alone says nothing about whether
anything is watched, so the health report says it per kind.
"""

from __future__ import annotations

from collections.abc import Iterable

from trainwatch_common.events.clusters import KindHealth, KindState
from trainwatch_common.kinds import KIND_KEYS
from trainwatch_watcher import errors
from trainwatch_watcher.informer import InformerStatus

# When one kind has several informers (one per namespace), the worst of their states is its own.
_SEVERITY: dict[KindState, int] = {
    "watching": 0,
    "starting": 1,
    "not_installed": 2,
    "failing": 3,
    "forbidden": 4,
}


def informer_state(status: InformerStatus) -> KindState:
    error = status.error
    if isinstance(error, errors.Unauthorized) and error.status == 403:
        return "forbidden"
    if isinstance(error, errors.KindNotServed):
        return "not_installed"
    if error is not None:
        return "failing"
    if status.waiting or not status.synced:
        return "starting"
    return "watching"


def kinds_health(
    served: Iterable[str], informers: Iterable[tuple[str, InformerStatus]]
) -> dict[str, KindHealth]:
    """``informers``: (kind key, status) of every running informer. Kinds of the catalog the
    cluster does not serve are ``not_installed``; served kinds the options leave out are omitted."""
    served = set(served)
    by_kind: dict[str, list[InformerStatus]] = {}
    for key, status in informers:
        by_kind.setdefault(key, []).append(status)
    health: dict[str, KindHealth] = {}
    for key in sorted(KIND_KEYS):
        if key not in served:
            health[key] = KindHealth(state="not_installed")
            continue
        statuses = by_kind.get(key)
        if not statuses:
            continue  # served, but the cluster's watch options leave it out
        worst = max(statuses, key=lambda s: _SEVERITY[informer_state(s)])
        recovered = max(
            (s for s in statuses if s.recovered_at is not None),
            key=lambda s: s.recovered_at,  # type: ignore[arg-type, return-value]
            default=None,
        )
        health[key] = KindHealth(
            state=informer_state(worst),
            error=worst.last_error if worst.error is not None else None,
            recovered=recovered.recovered if recovered is not None else None,
            recovered_at=recovered.recovered_at if recovered is not None else None,
        )
    return health
