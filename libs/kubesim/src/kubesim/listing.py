"""LIST: resourceVersion semantics, selectors, ``limit``/``continue`` paging.

The continue token has the real format: base64url (no padding) of
``{"v":"meta.k8s.io/v1","rv":<rv>,"start":"<key>\\u0000"}``.
"""

from __future__ import annotations

import asyncio
import base64
import time
from dataclasses import dataclass

import orjson

from kubesim import errors, views
from kubesim.kinds import KindSpec
from kubesim.selectors import FieldSelector, LabelSelector
from kubesim.store import Store, StoredObject

__all__ = ["ListRequest", "decode_continue", "encode_continue", "serve_list"]

TOO_LARGE_WAIT = 3.0

_CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - "
    "objects that were created, modified, or deleted between the time the first chunk was returned and "
    "now may show up in the list."
)


@dataclass(slots=True)
class ListRequest:
    spec: KindSpec
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    resource_version: str | None
    match: str | None
    limit: int
    continue_token: str | None


def encode_continue(rv: int, start: str) -> str:
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start})
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_continue(token: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = orjson.loads(raw)
        if data.get("v") != "meta.k8s.io/v1":
            raise ValueError
        return int(data["rv"]), str(data["start"])
    except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
        raise errors.bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        ) from None


def _int_rv(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise errors.ApiError(
            422,
            f"resourceVersion: Invalid value: {raw!r}: must be a valid resource version",
            reason="Invalid",
        ) from None
    return value


async def _wait_for_rv(store: Store, rv: int) -> None:
    deadline = time.monotonic() + TOO_LARGE_WAIT
    while store.resource_version < rv:
        left = deadline - time.monotonic()
        if left <= 0:
            raise errors.ApiError(
                504,
                f"Too large resource version: {rv}, current: {store.resource_version}",
                reason="Timeout",
                details={
                    "causes": [
                        {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
                    ],
                    "retryAfterSeconds": 1,
                },
            )
        try:
            async with asyncio.timeout(left):
                await store.changed().wait()
        except TimeoutError:
            pass


def _strip_type(data: bytes) -> bytes:
    obj = orjson.loads(data)
    if isinstance(obj, dict):
        obj.pop("apiVersion", None)
        obj.pop("kind", None)
    return orjson.dumps(obj)


async def serve_list(req: ListRequest, store: Store) -> bytes:
    """The JSON body of a LIST answer."""
    spec = req.spec
    rv_raw = req.resource_version or ""
    if req.match and req.match not in ("Exact", "NotOlderThan"):
        raise errors.ApiError(
            422,
            f'resourceVersionMatch: Unsupported value: "{req.match}": supported values: '
            '"Exact", "NotOlderThan"',
            reason="Invalid",
        )
    if req.match and not rv_raw:
        raise errors.ApiError(
            422,
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
            "resourceVersion is provided",
            reason="Invalid",
        )
    start = ""
    at: int | None = None
    if req.continue_token:
        if rv_raw and rv_raw != "0":
            raise errors.bad_request("specifying resource version is not allowed when using continue")
        at, start = decode_continue(req.continue_token)
        if at < store.compacted_rv:
            token = encode_continue(-1, start)
            raise errors.ApiError(
                410,
                _CONTINUE_TOO_OLD,
                reason="Expired",
                details={"causes": [{"reason": "ResourceVersionTooOld", "message": token}]},
            )
    elif req.match == "Exact":
        at = _int_rv(rv_raw)
        if at > store.resource_version:
            await _wait_for_rv(store, at)
    elif rv_raw not in ("", "0"):
        await _wait_for_rv(store, _int_rv(rv_raw))
    snap_rv, objs = store.snapshot(spec, at, namespace=req.namespace)
    if not req.labels.empty or not req.fields.empty:
        objs = [
            o
            for o in objs
            if req.labels.matches(o.labels) and req.fields.matches(o.namespace, o.name, o.fields)
        ]
    if start:
        key_start = start.rstrip("\x00")
        objs = [o for o in objs if _key(o) > key_start]
    meta: dict[str, object] = {"resourceVersion": str(snap_rv)}
    if req.limit > 0 and len(objs) > req.limit:
        rest = len(objs) - req.limit
        objs = objs[: req.limit]
        meta["continue"] = encode_continue(snap_rv, _key(objs[-1]) + "\x00")
        if req.labels.empty and req.fields.empty:
            meta["remainingItemCount"] = rest
    head = orjson.dumps({"apiVersion": spec.api_version, "kind": spec.list_kind, "metadata": meta})
    datas = [views.outward_bytes(spec, o.data) for o in objs]
    if spec.builtin:
        datas = [_strip_type(d) for d in datas]
    return b"".join((head[:-1], b',"items":[', b",".join(datas), b"]}"))


def _key(o: StoredObject) -> str:
    return f"{o.namespace}/{o.name}" if o.namespace else o.name
