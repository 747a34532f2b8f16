"""``/version`` and legacy discovery (``/api``, ``/apis``, ``/apis/<group>[/<version>]``)."""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Any

from kubesim.kinds import KindSpec

__all__ = ["VERSION", "api_group", "api_group_list", "api_resource_list", "api_versions", "core_v1"]

VERSION: dict[str, str] = {
    "major": "1",
    "minor": "36",
    "emulationMajor": "1",
    "emulationMinor": "36",
    "minCompatibilityMajor": "1",
    "minCompatibilityMinor": "35",
    "gitVersion": "v1.36.2",
    "gitCommit": "kubesim",
    "gitTreeState": "clean",
    "buildDate": "2026-11-01T00:00:00Z",
    "goVersion": "go1.25.3",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_VERBS = ["delete", "get", "list", "patch", "create", "update", "watch"]
_SUBRESOURCE_VERBS = {"log": ["get"], "token": ["create"], "finalize": ["update"]}
_SUBRESOURCE_KINDS = {"token": "TokenRequest"}


def api_versions(address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def core_v1(kinds: Iterable[KindSpec] = ()) -> dict[str, Any]:
    """``/api/v1``: the core kinds served (pods, events)."""
    return {
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": _resources([k for k in kinds if k.group == ""]),
    }


# Kueue's visibility API (an aggregated APIService) comes with Kueue: served when Workloads are.
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSION = "v1beta1"


def serves_visibility(kinds: Iterable[KindSpec]) -> bool:
    return any(k.group == "kueue.x-k8s.io" and k.kind == "Workload" for k in kinds)


def _visibility_resources() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for plural, kind, namespaced in (
        ("clusterqueues", "ClusterQueue", False),
        ("localqueues", "LocalQueue", True),
    ):
        out.append(
            {"name": plural, "singularName": plural[:-1], "namespaced": namespaced, "kind": kind, "verbs": []}
        )
        out.append(
            {
                "name": f"{plural}/pendingworkloads",
                "singularName": "",
                "namespaced": namespaced,
                "kind": "PendingWorkloadsSummary",
                "verbs": ["get"],
            }
        )
    return out


def _groups(kinds: Iterable[KindSpec]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    kinds = list(kinds)
    for k in kinds:
        if not k.group:
            continue  # the core group is /api, not /apis
        versions = groups.setdefault(k.group, [])
        if k.version not in versions:
            versions.append(k.version)
    if serves_visibility(kinds):
        groups[VISIBILITY_GROUP] = [VISIBILITY_VERSION]
    return groups


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list(kinds: Iterable[KindSpec]) -> dict[str, Any]:
    groups = _groups(kinds)
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(name, versions) for name, versions in sorted(groups.items())],
    }


def api_group(kinds: Iterable[KindSpec], group: str) -> dict[str, Any] | None:
    versions = _groups(kinds).get(group)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(group, versions)}


def api_resource_list(kinds: Iterable[KindSpec], group: str, version: str) -> dict[str, Any] | None:
    kinds = list(kinds)
    if (group, version) == (VISIBILITY_GROUP, VISIBILITY_VERSION) and serves_visibility(kinds):
        resources = _visibility_resources()
    else:
        matching = [k for k in kinds if k.group == group and k.version == version and group]
        if not matching:
            return None
        resources = _resources(matching)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}",
        "resources": resources,
    }


def _resources(matching: list[KindSpec]) -> list[dict[str, Any]]:
    resources: list[dict[str, Any]] = []
    for k in sorted(matching, key=lambda s: s.plural):
        main: dict[str, Any] = {
            "name": k.plural,
            "singularName": k.singular,
            "namespaced": k.namespaced,
            "kind": k.kind,
            "verbs": list(_VERBS),
        }
        if k.short_names:
            main["shortNames"] = list(k.short_names)
        if k.categories:
            main["categories"] = list(k.categories)
        main["storageVersionHash"] = f"{zlib.crc32(k.resource.encode()):08x}"
        resources.append(main)
        for sub in sorted(k.subresources):
            resources.append(
                {
                    "name": f"{k.plural}/{sub}",
                    "singularName": "",
                    "namespaced": k.namespaced,
                    "kind": _SUBRESOURCE_KINDS.get(sub, k.kind),
                    "verbs": _SUBRESOURCE_VERBS.get(sub, ["get", "patch", "update"]),
                }
            )
    return resources
