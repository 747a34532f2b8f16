"""Which job kinds (and which MPIJob version) a cluster serves, from API discovery.

``GET /apis`` names the served group versions; each candidate group version's resource list
then says whether the kind's plural is really there. A cluster serves MPIJob as v1
(training-operator) or v2beta1 (mpi-operator), never both; if a server lists both, the
group's preferred version wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from trainwatch_common.kinds import ALL_JOB_KINDS, JobKind
from trainwatch_watcher import errors
from trainwatch_watcher.kube.client import KubeClient


async def served_kinds(client: KubeClient, catalog: Iterable[JobKind] = ALL_JOB_KINDS) -> dict[str, JobKind]:
    """kind key → the served catalog entry. Raises ``ClusterError`` when discovery fails."""
    group_list = await client.get_json("/apis")
    served_versions: dict[str, list[str]] = {}
    preferred: dict[str, str] = {}
    for group in _items(group_list, "groups"):
        name = group.get("name")
        if not isinstance(name, str):
            continue
        served_versions[name] = [
            v["version"] for v in _items(group, "versions") if isinstance(v.get("version"), str)
        ]
        pref = group.get("preferredVersion")
        if isinstance(pref, Mapping) and isinstance(pref.get("version"), str):
            preferred[name] = pref["version"]

    resources: dict[tuple[str, str], set[str]] = {}
    found: dict[str, JobKind] = {}
    for kind in catalog:
        if kind.version not in served_versions.get(kind.group, ()):
            continue
        key = (kind.group, kind.version)
        if key not in resources:
            resources[key] = await _resource_names(client, kind)
        if kind.plural not in resources[key]:
            continue
        current = found.get(kind.key)
        if current is None or preferred.get(kind.group) == kind.version:
            found[kind.key] = kind
    return found


async def _resource_names(client: KubeClient, kind: JobKind) -> set[str]:
    try:
        listing = await client.get_json(kind.api_path)
    except errors.KindNotServed:
        return set()  # the group version went away between the two requests
    return {r["name"] for r in _items(listing, "resources") if isinstance(r.get("name"), str)}


def _items(parent: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = parent.get(key)
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, Mapping)]
