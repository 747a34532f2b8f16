"""``GET /api/v1/namespaces/{ns}/pods/{name}/log``: container logs, as kubelet serves them.

Logs are kept per ``containerID`` (``cluster.logs``), so ``previous=true`` reads the container
named by ``lastState.terminated.containerID`` and a restarted container starts a fresh log, as
on a node. The checks follow the apiserver (``validateContainer``: 400 when a pod has several
containers and none is named, or the name is unknown; ``PodLogOptions`` validation: 422) and the
kubelet (``validateContainerLogStatus``: 400 ``previous terminated container "c" in pod "p" not
found``, ``... is waiting to start: trying and failing to pull image``). A pod without a node
answers 204 with no body (the apiserver has no kubelet to ask). ``follow`` returns what is there
and ends.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kubesim import errors
from kubesim.kinds import POD

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

__all__ = ["PodLogs", "format_timestamp", "serve"]


def format_timestamp(at: float) -> str:
    """RFC 3339 with nanoseconds, as kubelet's ``timestamps=true`` prefix."""
    dt = datetime.fromtimestamp(at, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond:06d}000Z"


class PodLogs:
    """Log lines per containerID: ``write(cid, lines)``, ``lines(cid)``."""

    def __init__(self) -> None:
        self._lines: dict[str, list[tuple[float, str]]] = {}

    def write(self, container_id: str, lines: Iterable[str], *, at: float | None = None) -> None:
        """Append lines (without newlines) to a container's log, stamped ``at`` (default now)."""
        when = time.time() if at is None else at
        self._lines.setdefault(container_id, []).extend((when, line) for line in lines)

    def lines(self, container_id: str) -> list[tuple[float, str]]:
        return list(self._lines.get(container_id, ()))

    def text(self, container_id: str) -> str:
        return "".join(f"{line}\n" for _, line in self._lines.get(container_id, ()))

    def forget(self, container_id: str) -> None:
        self._lines.pop(container_id, None)


def _bool(value: str | None) -> bool:
    return value in ("1", "true", "True")


def _int(query: Mapping[str, str], key: str) -> int | None:
    raw = query.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise errors.bad_request(f'strconv.ParseInt: parsing "{raw}": invalid syntax') from None


def _invalid(name: str, field: str, value: Any, why: str) -> errors.ApiError:
    cause = {"reason": "FieldValueInvalid", "message": f"Invalid value: {value}: {why}", "field": field}
    return errors.ApiError(
        422,
        f'PodLogOptions "{name}" is invalid: {field}: Invalid value: {value}: {why}',
        reason="Invalid",
        details={"name": name, "kind": "PodLogOptions", "causes": [cause]},
    )


def _names(spec: Mapping[str, Any], key: str) -> list[str]:
    return [str(c.get("name")) for c in spec.get(key) or () if isinstance(c, dict)]


def _container(pod: Mapping[str, Any], name: str, wanted: str | None) -> str:
    spec = pod.get("spec") or {}
    containers, inits = _names(spec, "containers"), _names(spec, "initContainers")
    if not wanted:
        if len(containers) == 1:
            return containers[0]
        if not containers:
            raise errors.bad_request(f"a container name must be specified for pod {name}")
        listed = "[" + " ".join(containers + inits) + "]"
        raise errors.bad_request(
            f"a container name must be specified for pod {name}, choose one of: {listed}"
        )
    if wanted not in containers and wanted not in inits:
        raise errors.bad_request(f"container {wanted} is not valid for pod {name}")
    return wanted


def _container_id(pod: Mapping[str, Any], pod_name: str, container: str, previous: bool) -> str:
    """kubelet's ``validateContainerLogStatus``: which container instance's log to read."""
    status = pod.get("status") or {}
    found = None
    for key in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(key) or ():
            if isinstance(cs, dict) and cs.get("name") == container:
                found = cs
    where = f'container "{container}" in pod "{pod_name}"'
    if found is None:
        raise errors.bad_request(f"{where} is not available")
    state, last = found.get("state") or {}, found.get("lastState") or {}
    running, terminated, waiting = state.get("running"), state.get("terminated"), state.get("waiting")
    last_term = last.get("terminated")
    if previous:
        if not last_term or not last_term.get("containerID"):
            raise errors.bad_request(
                f'previous terminated container "{container}" in pod "{pod_name}" not found'
            )
        return str(last_term["containerID"])
    if running is not None:
        return str(found.get("containerID", ""))
    if terminated is not None:
        if terminated.get("containerID"):
            return str(terminated["containerID"])
        if last_term and last_term.get("containerID"):
            return str(last_term["containerID"])
        raise errors.bad_request(f"{where} is terminated")
    if last_term is not None:
        if not last_term.get("containerID"):
            raise errors.bad_request(f"{where} is terminated")
        return str(last_term["containerID"])
    if waiting is not None:
        reason = waiting.get("reason", "")
        if reason == "ErrImagePull":
            raise errors.bad_request(f"{where} is waiting to start: image can't be pulled")
        if reason == "ImagePullBackOff":
            raise errors.bad_request(f"{where} is waiting to start: trying and failing to pull image")
        raise errors.bad_request(f"{where} is waiting to start: {reason}")
    raise errors.bad_request(f"{where} is waiting to start - no logs yet")


def _since(query: Mapping[str, str], name: str) -> float | None:
    seconds = _int(query, "sinceSeconds")
    since_time = query.get("sinceTime")
    if seconds is not None and since_time:
        raise errors.ApiError(
            422,
            f'PodLogOptions "{name}" is invalid: : Forbidden: at most one of `sinceTime` or '
            "`sinceSeconds` may be specified",
            reason="Invalid",
        )
    if seconds is not None:
        if seconds < 1:
            raise _invalid(name, "sinceSeconds", seconds, "must be greater than 0")
        return time.time() - seconds
    if since_time:
        try:
            return datetime.fromisoformat(since_time.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise errors.bad_request(f'parsing time "{since_time}" as RFC3339: cannot parse') from None
    return None


def render(
    lines: list[tuple[float, str]],
    *,
    tail: int | None = None,
    limit_bytes: int | None = None,
    timestamps: bool = False,
    since: float | None = None,
) -> bytes:
    if since is not None:
        lines = [(t, s) for t, s in lines if t >= since]
    if tail is not None:
        lines = lines[-tail:] if tail else []
    text = "".join(f"{format_timestamp(t)} {s}\n" if timestamps else f"{s}\n" for t, s in lines)
    data = text.encode()
    return data[:limit_bytes] if limit_bytes is not None else data


def serve(cluster: Cluster, namespace: str, name: str, query: Mapping[str, str]) -> web.StreamResponse:
    pod = cluster.store.get(POD, namespace, name)
    tail, limit = _int(query, "tailLines"), _int(query, "limitBytes")
    if tail is not None and tail < 0:
        raise _invalid(name, "tailLines", tail, "must be greater than or equal to 0")
    if limit is not None and limit < 1:
        raise _invalid(name, "limitBytes", limit, "must be greater than 0")
    since = _since(query, name)
    container = _container(pod, name, query.get("container"))
    if not (pod.get("spec") or {}).get("nodeName"):
        return web.Response(status=204)
    cid = _container_id(pod, name, container, _bool(query.get("previous")))
    body = render(
        cluster.logs.lines(cid),
        tail=tail,
        limit_bytes=limit,
        timestamps=_bool(query.get("timestamps")),
        since=since,
    )
    return web.Response(body=body, content_type="text/plain")
