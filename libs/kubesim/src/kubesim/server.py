"""The HTTP side of one simulated cluster: auth, routing, CRUD, ``Status`` errors.

Built on aiohttp's low-level ``web.Server`` so the cluster can stop and restart
listening (the "unreachable" fault) and drop connections without tearing down state.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from kubesim import discovery, errors, kueue, podlogs, views
from kubesim.accounts import NAMESPACE
from kubesim.kinds import CRD, KindSpec
from kubesim.listing import ListRequest, serve_list
from kubesim.selectable import V1_EVENT_ALIASES
from kubesim.selectors import parse_field_selector, parse_label_selector
from kubesim.watch import WatchHandle, WatchRequest, serve_watch

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

__all__ = ["handle_request"]

log = logging.getLogger("kubesim")

_PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
}
_PUBLIC = {"/version", "/healthz", "/readyz", "/livez"}


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def _error(err: errors.ApiError) -> web.Response:
    resp = _json(err.status(), err.code)
    resp.headers.update(err.headers)
    return resp


def _user(cluster: Cluster, request: web.BaseRequest) -> tuple[str, bool]:
    """(user, allowed); raises 401 for a bad token."""
    auth = request.headers.get("Authorization", "")
    if not auth:
        return "system:anonymous", False
    scheme, _, token = auth.partition(" ")
    if scheme.lower() != "bearer":
        raise errors.unauthorized()
    grant = cluster.tokens.get(token.strip())
    if grant is None:
        return cluster.accounts.authenticate(token.strip())  # a ServiceAccount's, or 401
    return grant


def _authorized(
    cluster: Cluster, user: str, allowed: bool, verb: str, group: str, resource: str, name: str | None
) -> bool:
    """A superuser token (``allowed``) may do anything; others what their ClusterRoles grant."""
    return allowed or cluster.accounts.authorize(user, verb, group, resource, name)


async def handle_request(cluster: Cluster, request: web.BaseRequest) -> web.StreamResponse:
    try:
        delay = cluster.faults.current_delay()
        if delay:
            await asyncio.sleep(delay)
        user, allowed = _user(cluster, request)
        injected = cluster.faults.check_error(request.method, request.path, request.query)
        if injected is not None:
            raise injected
        resp = await _route(cluster, request, user, allowed)
    except errors.ApiError as err:
        resp = _error(err)
    except (ConnectionError, asyncio.CancelledError):
        raise
    except Exception as exc:  # a bug in kubesim: answer like an apiserver would, and say so
        log.exception("kubesim %s: %s %s failed", cluster.name, request.method, request.path_qs)
        resp = _error(errors.ApiError(500, f"Internal error occurred: {type(exc).__name__}: {exc}"))
    cluster.log_request(request.method, request.path_qs, resp.status)
    return resp


async def _route(cluster: Cluster, request: web.BaseRequest, user: str, allowed: bool) -> web.StreamResponse:
    path = request.path.rstrip("/") or "/"
    kinds = cluster.store.kinds
    if path == "/version":
        return _json(discovery.VERSION)
    if path in ("/healthz", "/readyz", "/livez"):
        return web.Response(text="ok", content_type="text/plain")
    if user == "system:anonymous":
        raise errors.forbidden(user, "get", None, None, path)
    if path == "/api":
        return _json(discovery.api_versions(cluster.address))
    if path == "/api/v1":
        return _json(discovery.core_v1(kinds))
    if path == "/apis":
        return _json(discovery.api_group_list(kinds))
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) >= 3 and parts[1] == "v1":
        group_name, version, rest = "", "v1", parts[2:]
    elif parts[0] == "apis" and len(parts) >= 2:
        if len(parts) == 2:
            group = discovery.api_group(kinds, parts[1])
            if group is None:
                raise errors.ApiError(404, "the server could not find the requested resource", details={})
            return _json(group)
        group_name, version = parts[1], parts[2]
        if len(parts) == 3:
            rl = discovery.api_resource_list(kinds, group_name, version)
            if rl is None:
                raise errors.ApiError(404, "the server could not find the requested resource", details={})
            return _json(rl)
        rest = parts[3:]
    else:
        raise errors.ApiError(404, "the server could not find the requested resource", details={})
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    if group_name == discovery.VISIBILITY_GROUP and discovery.serves_visibility(kinds):
        resource = f"{rest[0]}/{rest[2]}" if len(rest) == 3 else rest[0]
        name = rest[1] if len(rest) >= 2 else None
        if not _authorized(cluster, user, allowed, "get", group_name, resource, name):
            raise errors.forbidden(user, "get", None, namespace, path)
        return _json(kueue.serve_visibility(cluster, user, version, namespace, rest, request.query))
    spec = next(
        (k for k in kinds if k.group == group_name and k.version == version and k.plural == rest[0]), None
    )
    if (group_name, version, rest[0]) == (CRD.group, CRD.version, CRD.plural):
        spec = CRD  # readable only: list and watch
        if request.method != "GET" or len(rest) > 1:
            raise errors.ApiError(405, "the server does not allow this method on the requested resource")
    if spec is None or len(rest) > 3 or (len(rest) == 3 and rest[2] not in spec.subresources):
        raise errors.ApiError(404, "the server could not find the requested resource", details={})
    name = rest[1] if len(rest) >= 2 else None
    sub = rest[2] if len(rest) == 3 else None
    verb = _verb(request, name)
    resource = f"{spec.plural}/{sub}" if sub else spec.plural
    if (
        not _authorized(cluster, user, allowed, verb, spec.group, resource, name)
        or (spec is CRD and not cluster.crds_readable)
        or cluster.is_forbidden(spec, sub)
    ):
        raise errors.forbidden(user, verb, spec, namespace, path, name=name, subresource=sub)
    cluster.check_storage(spec)  # after authorization, as the storage layer answers it
    if sub == "log":
        if request.method != "GET":
            raise errors.ApiError(405, "the server does not allow this method on the requested resource")
        return podlogs.serve(cluster, namespace or "", str(name), request.query)
    if spec.view_of:
        return await _view(cluster, request, spec, namespace, name, verb)
    if name is None:
        if verb in ("list", "watch"):
            return await _list_or_watch(cluster, request, spec, namespace, verb == "watch")
        if verb == "create":
            if namespace is None and spec.namespaced:
                raise errors.ApiError(405, "the server does not allow this method on the requested resource")
            body = await _body(request)
            obj = cluster.store.create(spec, body, namespace=namespace, drop_status=True)
            cluster.accounts.after_create(spec, obj)
            return _json(obj, 201)
        raise errors.ApiError(405, "the server does not allow this method on the requested resource")
    if namespace is None and spec.namespaced:
        raise errors.ApiError(404, "the server could not find the requested resource", details={})
    ns = namespace or ""
    return await _object(cluster, request, spec, ns, name, sub, verb)


async def _view(
    cluster: Cluster,
    request: web.BaseRequest,
    spec: KindSpec,
    namespace: str | None,
    name: str | None,
    verb: str,
) -> web.StreamResponse:
    """A kind that is another's storage seen differently (events.k8s.io/v1 Events): reads and
    create/delete convert; other writes are left to the stored kind's API."""
    store = cluster.store
    base = next(k for k in store.kinds if k.resource == spec.view_of)
    if name is None and verb in ("list", "watch"):
        return await _list_or_watch(cluster, request, spec, namespace, verb == "watch")
    if name is None and verb == "create" and namespace is not None:
        body = views.inward(spec, await _body(request))
        if isinstance(body, dict) and isinstance(body.get("metadata"), dict):
            body["metadata"].pop("resourceVersion", None)
        obj = store.create(base, body, namespace=namespace)
        return _json(views.outward(spec, obj), 201)
    if name is not None and namespace is not None and verb in ("get", "delete"):
        if verb == "get":
            return _json(views.outward(spec, store.get(base, namespace, name)))
        obj, _ = store.delete(base, namespace, name)
        return _json(views.outward(spec, obj))
    raise errors.ApiError(405, "the server does not allow this method on the requested resource")


def _verb(request: web.BaseRequest, name: str | None) -> str:
    method = request.method
    if method == "GET":
        if name is not None:
            return "get"
        return "watch" if request.query.get("watch", "") in ("1", "true", "True") else "list"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, method.lower()
    )


async def _body(request: web.BaseRequest) -> Any:
    raw = await request.read()
    if not raw:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise errors.bad_request(f"json: cannot parse request body: {exc}") from None


async def _object(
    cluster: Cluster, request: web.BaseRequest, spec: KindSpec, ns: str, name: str, sub: str | None, verb: str
) -> web.StreamResponse:
    store = cluster.store
    if sub == "token" and verb == "create":
        return _json(cluster.accounts.token_request(ns, name, await _body(request)), 201)
    if spec is NAMESPACE and verb == "delete" and sub is None:
        store.get(spec, "", name)  # 404 first
        cluster.accounts.delete_namespace(name)
    if verb == "get":
        return web.Response(body=store.stored(spec, ns, name).data, content_type="application/json")
    if verb == "update":
        body = await _body(request)
        return _json(store.update(spec, body, subresource=sub, namespace=ns, name=name, require_rv=True))
    if verb == "patch":
        ctype = request.content_type
        ptype = _PATCH_TYPES.get(ctype)
        if ptype is None or (ptype == "strategic" and not spec.builtin):
            raise errors.ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types "
                f"include: application/json-patch+json, application/merge-patch+json"
                f"{', application/strategic-merge-patch+json' if spec.builtin else ''}",
            )
        body = await _body(request)
        return _json(store.patch(spec, ns, name, body, patch_type=ptype, subresource=sub))
    if verb == "delete" and sub is None:
        opts = await _body(request)
        pre = opts.get("preconditions") if isinstance(opts, dict) else None
        obj, gone = store.delete(spec, ns, name, preconditions=pre if isinstance(pre, dict) else None)
        return _json(obj, 200 if gone else 202)
    raise errors.ApiError(405, "the server does not allow this method on the requested resource")


def _bool(value: str | None) -> bool:
    return value in ("1", "true", "True")


async def _list_or_watch(
    cluster: Cluster, request: web.BaseRequest, spec: KindSpec, namespace: str | None, watch: bool
) -> web.StreamResponse:
    q = request.query
    labels = parse_label_selector(q.get("labelSelector"))
    aliases = V1_EVENT_ALIASES if spec.view_of else None
    fields = parse_field_selector(q.get("fieldSelector"), spec.kind, spec.fields, aliases)
    rv = q.get("resourceVersion")
    match = q.get("resourceVersionMatch")
    if not watch:
        try:
            limit = int(q.get("limit", "0") or 0)
        except ValueError:
            raise errors.bad_request(f"limit: Invalid value: {q.get('limit')!r}") from None
        req = ListRequest(spec, namespace, labels, fields, rv, match, limit, q.get("continue") or None)
        return web.Response(body=await serve_list(req, cluster.store), content_type="application/json")
    send_initial = _bool(q.get("sendInitialEvents"))
    bookmarks = _bool(q.get("allowWatchBookmarks"))
    if "sendInitialEvents" in q:
        if match != "NotOlderThan":
            raise errors.ApiError(
                422,
                "resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
                "resourceVersionMatch to NotOlderThan",
                reason="Invalid",
            )
        if send_initial and not bookmarks:
            raise errors.ApiError(
                422,
                "allowWatchBookmarks: Forbidden: sendInitialEvents requires "
                "setting allowWatchBookmarks to true",
                reason="Invalid",
            )
    elif match:
        raise errors.ApiError(
            422,
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for "
            "watch unless sendInitialEvents is provided",
            reason="Invalid",
        )
    timeout_raw = q.get("timeoutSeconds")
    try:
        timeout = float(timeout_raw) if timeout_raw else 0.0
        if timeout <= 0:  # 0 means "the server's default", as in the real handler
            timeout = cluster.watch_timeout()
    except ValueError:
        raise errors.bad_request(f"timeoutSeconds: Invalid value: {timeout_raw!r}") from None
    if rv not in (None, "") and not rv.isdigit():
        raise errors.bad_request(f"invalid resource version: {rv!r}")
    wreq = WatchRequest(spec, namespace, labels, fields, rv, bookmarks, send_initial, timeout)
    if send_initial and rv not in (None, "", "0"):
        await serve_list(
            ListRequest(spec, namespace, labels, fields, rv, "NotOlderThan", 1, None), cluster.store
        )
    resp = web.StreamResponse(
        status=200, headers={"Content-Type": "application/json", "Cache-Control": "no-cache, private"}
    )
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    protocol = request.protocol
    handle = WatchHandle(wreq, protocol.force_close)
    cluster.hub.active.add(handle)
    try:
        await serve_watch(
            wreq,
            cluster.store,
            cluster.faults,
            handle,
            resp.write,
            bookmark_interval=cluster.bookmark_interval,
            watch_cache=cluster.watch_cache,
        )
        if not handle.dropped:
            await resp.write_eof()
    except ConnectionError:
        pass
    finally:
        cluster.hub.active.discard(handle)
    return resp
