"""HTTP clients for the registry API (clusters), the persister's query API (jobs) and the
notifier's admin API (silences).

The dashboard never imports those services: it talks to them over HTTP with its own viewer
token, and forwards an admin's token for the calls that change clusters. Responses are kept
as plain JSON mappings, so a field added upstream shows up without a change here.

Errors form a small tree so a page can say plainly what went wrong::

    BackendError
     ├── BackendUnavailable   the service did not answer (connection refused, timeout)
     └── BackendRefused       it answered with 4xx/5xx; .status and .problems say why
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

Json = dict[str, Any]


class BackendError(Exception):
    def __init__(self, service: str, message: str) -> None:
        super().__init__(f"{service}: {message}")
        self.service = service
        self.message = message


class BackendUnavailable(BackendError):
    pass


class BackendRefused(BackendError):
    def __init__(
        self, service: str, status: int, problems: list[str], *, overridable: str | None = None
    ) -> None:
        super().__init__(service, "; ".join(problems) or f"HTTP {status}")
        self.status = status
        self.problems = problems
        # The registry's refusal that force=true overrides (cluster.duplicate_server,
        # cluster.server_changed), so a form can offer "register anyway"; None otherwise.
        self.overridable = overridable


# The registry's 409 types that its force=true query parameter overrides.
OVERRIDABLE_CONFLICTS = frozenset({"cluster.duplicate_server", "cluster.server_changed"})


def overridable_conflict(status: int, body: Any) -> str | None:
    """The type of a registry refusal that force=true would override, else None."""
    detail = body.get("detail") if status == 409 and isinstance(body, Mapping) else None
    for item in detail if isinstance(detail, list) else []:
        if isinstance(item, Mapping) and item.get("type") in OVERRIDABLE_CONFLICTS:
            return str(item["type"])
    return None


def problems_of(body: Any) -> list[str]:
    """Readable reasons from an error body: FastAPI's {"detail": str | [{loc, msg}]} and friends."""
    if isinstance(body, Mapping):
        detail = body.get("detail", body.get("errors", body.get("message", body.get("error"))))
    else:
        detail = body
    if detail is None:
        return []
    if isinstance(detail, str):
        return [detail]
    if isinstance(detail, Mapping):
        return problems_of(detail) or [f"{k}: {v}" for k, v in detail.items()]
    if isinstance(detail, list):
        out: list[str] = []
        for item in detail:
            if isinstance(item, Mapping) and "msg" in item:
                loc = [str(p) for p in item.get("loc", []) if p not in ("body", "query", "path")]
                out.append(f"{'.'.join(loc)}: {item['msg']}" if loc else str(item["msg"]))
            elif isinstance(item, Mapping):
                out.extend(problems_of(item))
            else:
                out.append(str(item))
        return out
    return [str(detail)]


def _segment(value: str) -> str:
    """One path segment of a backend URL from a value a browser sent: percent-encoded whole, so
    "../" or "?" cannot reach another endpoint and a control character is not an invalid URL."""
    return quote(value, safe="")


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a keyset-paginated list."""

    items: list[Json]
    total: int | None = None
    next_cursor: str | None = None
    prev_cursor: str | None = None
    extra: Json = field(default_factory=dict)

    @classmethod
    def from_body(cls, body: Any) -> Page:
        if isinstance(body, list):
            return cls(items=[i for i in body if isinstance(i, dict)], total=len(body))
        if not isinstance(body, dict):
            return cls(items=[])
        items = body.get("data", body.get("items", body.get("jobs", body.get("clusters", []))))
        total = body.get("total", body.get("count"))
        return cls(
            items=[i for i in items if isinstance(i, dict)] if isinstance(items, list) else [],
            total=total if isinstance(total, int) else None,
            next_cursor=body.get("next_cursor") or None,
            prev_cursor=body.get("prev_cursor") or None,
            extra={k: v for k, v in body.items() if k not in ("data", "items", "total", "next_cursor")},
        )


class _Backend:
    service = "backend"

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        token: str | None = None,
    ) -> Any:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        clean = {k: v for k, v in (params or {}).items() if v not in (None, "", [])}
        try:
            response = await self._client.request(method, path, params=clean, json=json, headers=headers)
        except httpx.TransportError as exc:  # connection refused, timeout, reset
            raise BackendUnavailable(self.service, type(exc).__name__) from exc
        if response.status_code >= 400:
            try:
                body: Any = response.json()
            except ValueError:
                body = response.text[:500] or response.reason_phrase
            raise BackendRefused(
                self.service,
                response.status_code,
                problems_of(body),
                overridable=overridable_conflict(response.status_code, body),
            )
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise BackendRefused(self.service, response.status_code, ["the answer was not JSON"]) from None


class RegistryClient(_Backend):
    """Clusters: list, get, create (with dry-run), update, rotate, test, remove."""

    service = "registry"

    async def list_clusters(self) -> list[Json]:
        items: list[Json] = []
        cursor: str | None = None
        for _ in range(100):  # a fleet of up to 100 pages; the registry pages by 100 or more
            page = Page.from_body(await self._request("GET", "/v1/clusters", params={"cursor": cursor}))
            items.extend(page.items)
            cursor = page.next_cursor
            if not cursor:
                break
        return items

    async def accepts(self, token: str) -> bool:
        """Whether the registry takes ``token`` for reading (viewer or admin): the sign-in check.

        A refusal (401, 403: unknown token or a role that may not read, such as a watcher's) is
        False; the registry not answering raises BackendUnavailable, so nobody is let in unchecked.
        """
        try:
            await self._request("GET", "/v1/clusters", params={"limit": 1}, token=token)
        except BackendRefused as exc:
            if exc.status in (401, 403):
                return False
            raise
        return True

    async def get_cluster(self, cluster_id: str) -> Json:
        body = await self._request("GET", f"/v1/clusters/{_segment(cluster_id)}")
        return body if isinstance(body, dict) else {}

    async def create_cluster(
        self, spec: Json, *, token: str, dry_run: bool = False, force: bool = False
    ) -> Json:
        """``force``: register even when another cluster has the same API server."""
        params = {"dry_run": "true" if dry_run else None, "force": "true" if force else None}
        body = await self._request("POST", "/v1/clusters", params=params, json=spec, token=token)
        return body if isinstance(body, dict) else {}

    async def update_cluster(
        self, cluster_id: str, changes: Json, *, token: str, force: bool = False
    ) -> Json:
        """``force``: accept a kubeconfig for another API server (the cluster moved)."""
        params = {"force": "true"} if force else None
        body = await self._request(
            "PATCH", f"/v1/clusters/{_segment(cluster_id)}", params=params, json=changes, token=token
        )
        return body if isinstance(body, dict) else {}

    async def test_cluster(self, cluster_id: str, *, token: str) -> Json:
        body = await self._request("POST", f"/v1/clusters/{_segment(cluster_id)}/test", token=token)
        return body if isinstance(body, dict) else {}

    async def delete_cluster(self, cluster_id: str, *, token: str) -> None:
        await self._request("DELETE", f"/v1/clusters/{_segment(cluster_id)}", token=token)


class QueryClient(_Backend):
    """Jobs: a filtered, keyset-paginated list; one job with its transitions; counts."""

    service = "query"

    async def list_jobs(self, filters: Mapping[str, Any]) -> Page:
        return Page.from_body(await self._request("GET", "/v1/jobs", params=filters))

    async def get_job(self, cluster_id: str, uid: str) -> Json:
        body = await self._request("GET", f"/v1/jobs/{_segment(cluster_id)}/{_segment(uid)}")
        return body if isinstance(body, dict) else {}

    async def stats(self) -> Json:
        body = await self._request("GET", "/v1/stats")
        return body if isinstance(body, dict) else {}

    async def aggregate(self, name: str, params: Mapping[str, Any]) -> Json:
        """One of the overview's aggregates: breakdown, activity, durations, failure-reasons."""
        body = await self._request("GET", f"/v1/stats/{_segment(name)}", params=params)
        return body if isinstance(body, dict) else {}

    @contextlib.asynccontextmanager
    async def export(self, params: Mapping[str, Any]) -> AsyncIterator[httpx.Response]:
        """The export's streamed response (CSV or JSON), open for the duration of the block."""
        clean = {k: v for k, v in params.items() if v not in (None, "", [])}
        try:
            async with self._client.stream("GET", "/v1/jobs/export", params=clean) as response:
                if response.status_code >= 400:
                    await response.aread()
                    try:
                        body: Any = response.json()
                    except ValueError:
                        body = response.text[:500]
                    raise BackendRefused(self.service, response.status_code, problems_of(body))
                yield response
        except httpx.TransportError as exc:
            raise BackendUnavailable(self.service, type(exc).__name__) from exc


class NotifierClient(_Backend):
    """Silences: list, create, expire; and the suppressions they recorded (issue 18)."""

    service = "notifier"

    async def list_silences(self, state: str = "all") -> list[Json]:
        return Page.from_body(await self._request("GET", "/v1/silences", params={"state": state})).items

    async def suppressions(self, *, silence_id: str | None = None, limit: int = 100) -> list[Json]:
        params = {"silence_id": silence_id, "limit": limit}
        return Page.from_body(await self._request("GET", "/v1/suppressions", params=params)).items

    async def create_silence(self, spec: Json, *, token: str) -> Json:
        body = await self._request("POST", "/v1/silences", json=spec, token=token)
        return body if isinstance(body, dict) else {}

    async def expire_silence(self, silence_id: str, *, token: str) -> Json:
        body = await self._request("POST", f"/v1/silences/{_segment(silence_id)}/expire", token=token)
        return body if isinstance(body, dict) else {}

    async def dead_letters(self, *, after: int = 0, limit: int = 100) -> tuple[list[Json], int | None]:
        """The notifier's dead letters, oldest first, and the ``after`` of the next page."""
        body = await self._request("GET", "/v1/dead-letters", params={"after": after, "limit": limit})
        next_after = body.get("next_after") if isinstance(body, dict) else None
        return Page.from_body(body).items, next_after if isinstance(next_after, int) else None

    async def digest(self, digest_id: str) -> Json:
        """One digest's jobs, in the order it listed them."""
        body = await self._request("GET", f"/v1/digests/{_segment(digest_id)}")
        return body if isinstance(body, dict) else {}

    async def replay_dead_letter(self, seq: int, *, token: str) -> Json:
        body = await self._request("POST", f"/v1/dead-letters/{int(seq)}/replay", token=token)
        return body if isinstance(body, dict) else {}


@dataclass(slots=True)
class Backends:
    registry: RegistryClient
    query: QueryClient
    clients: list[httpx.AsyncClient]
    notifier: NotifierClient | None = None

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()


def build_backends(
    *,
    registry_url: str,
    query_url: str,
    viewer_token: str,
    timeout: float,
    transport: httpx.AsyncBaseTransport | None = None,
    notifier_url: str = "http://127.0.0.1:8083",
) -> Backends:
    """Clients that present the viewer token unless a call passes an admin token."""

    def client(base_url: str) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {viewer_token}"} if viewer_token else {}
        return httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout, transport=transport)

    registry_client, query_client, notifier_client = (
        client(registry_url),
        client(query_url),
        client(notifier_url),
    )
    return Backends(
        registry=RegistryClient(registry_client),
        query=QueryClient(query_client),
        clients=[registry_client, query_client, notifier_client],
        notifier=NotifierClient(notifier_client),
    )
