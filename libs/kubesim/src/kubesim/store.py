"""Per-cluster object store: a resourceVersion counter, a bounded event history, compaction.

Objects are kept as compact JSON bytes (``StoredObject.data``), so a LIST or a watch event
is written without re-encoding. Every write takes the next value of one per-cluster counter
(the ``resourceVersion``) and appends an event to a bounded history; watches and exact
LISTs are served from that history, and anything older than it is answered with 410.

The mutating methods are synchronous so tests and scenarios can call them directly; the
HTTP layer (``server.py``) uses the same methods. Must be used from the event loop thread.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kubesim import errors, objects, selectable
from kubesim.history import History, HistoryEvent, Key, StoredObject, encode, storage_key
from kubesim.kinds import CRD, KindSpec, resolve_kind

__all__ = ["Backup", "HistoryEvent", "Store", "StoredObject", "storage_key"]


@dataclass(frozen=True, slots=True)
class Backup:
    """A snapshot of a store (``Store.backup``), for ``Store.restore``."""

    resource_version: int
    objects: dict[str, dict[Key, StoredObject]]


class Store:
    """The objects of one simulated cluster."""

    def __init__(
        self,
        kinds: Iterable[KindSpec] = (),
        *,
        history_limit: int = 10_000,
        seed: int | None = None,
        initial_rv: int = 1000,
    ) -> None:
        self._rng = random.Random(seed) if seed is not None else None
        self._rv = initial_rv
        self._history = History(history_limit, initial_rv)
        self._objects: dict[str, dict[Key, StoredObject]] = {}
        self._served: dict[str, KindSpec] = {}
        self._epochs: dict[str, int] = {}
        # The resourceVersion of each resource's newest write (its watch cache's version).
        self._resource_rv: dict[str, int] = {}
        self._changed = asyncio.Event()
        self._changed_by: dict[str, asyncio.Event] = {}
        self._spec_cache: dict[KindSpec | str, KindSpec] = {}
        self._objects[CRD.resource] = {}
        self._starting = True  # the CRDs of the kinds served from the start pre-exist: no events
        for spec in kinds:
            self.serve_kind(spec)
        self._starting = False

    # ----------------------------------------------------------------- kinds
    @property
    def kinds(self) -> tuple[KindSpec, ...]:
        return tuple(self._served.values())

    def serve_kind(self, spec: KindSpec, *, replace: bool = False) -> None:
        """Install a kind (like applying its CRD). Another version of the same resource
        (MPIJob v1 vs v2beta1) is refused unless ``replace``, which removes it first."""
        current = self._served.get(spec.resource)
        if current == spec:
            return
        if current is not None:
            if not replace:
                raise ValueError(f"{spec.resource} is already served as {current}")
            self.remove_kind(current)
        self._served[spec.resource] = spec
        self._spec_cache.clear()
        self._objects.setdefault(spec.bucket, {})
        self._epochs[spec.resource] = self._epochs.get(spec.resource, 0) + 1
        if not spec.builtin:
            self._write_crd(spec, "ADDED")
        self._notify()

    def remove_kind(self, kind: KindSpec | str) -> None:
        """Uninstall a kind (like deleting its CRD): its objects are deleted, with DELETED
        events, and its open watches end."""
        spec = self.spec(kind)
        shared = any(s.bucket == spec.bucket for s in self._served.values() if s != spec)
        for key in sorted(self._objects.get(spec.bucket, {})) if not shared else ():
            self.delete(spec, key[0], key[1], ignore_finalizers=True)
        del self._served[spec.resource]
        self._spec_cache.clear()
        self._epochs[spec.resource] += 1
        if not spec.builtin:
            self._write_crd(spec, "DELETED")
        self._notify()

    def _write_crd(self, spec: KindSpec, etype: str) -> None:
        """The kind's CustomResourceDefinition appears or goes, with a watch event (except for
        the kinds served from the start, whose CRDs pre-exist at the initial resourceVersion)."""
        bucket = self._objects[CRD.resource]
        key = ("", spec.resource)
        prev = bucket.get(key)
        if etype == "DELETED":
            if prev is not None:
                self._store(CRD, prev.decode(), "DELETED", prev)
            return
        body = objects.crd_object(
            spec, uid=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{spec.resource}/{spec.version}"))
        )
        if self._starting:
            body["metadata"]["resourceVersion"] = str(self._rv)
            bucket[key] = StoredObject("", spec.resource, body["metadata"]["uid"], self._rv, {}, encode(body))
            return
        self._store(CRD, body, "ADDED", prev)

    def spec(self, kind: KindSpec | str) -> KindSpec:
        """The served spec for ``kind`` (raises ``KeyError`` if not served)."""
        cached = self._spec_cache.get(kind)
        if cached is not None:
            return cached
        spec = resolve_kind(kind, self._served.values())
        if self._served.get(spec.resource) != spec:
            raise KeyError(f"{spec} is not served")
        self._spec_cache[kind] = spec
        return spec

    def serves(self, spec: KindSpec) -> bool:
        return self._served.get(spec.resource) == spec

    def epoch(self, spec: KindSpec) -> int:
        return self._epochs.get(spec.resource, 0)

    # ----------------------------------------------------- versions & history
    @property
    def history_limit(self) -> int:
        return self._history.limit

    @property
    def resource_version(self) -> int:
        return self._rv

    @property
    def compacted_rv(self) -> int:
        """The oldest resourceVersion a watch may start from (older ones get 410)."""
        return self._history.compacted_rv

    def changed(self, resource: str | None = None) -> asyncio.Event:
        """An event set at the next write (of ``resource``, e.g. ``pytorchjobs.kubeflow.org``,
        or of anything) and by :meth:`wake`. Take it *before* reading the history."""
        if resource is None:
            return self._changed
        event = self._changed_by.get(resource)
        if event is None:
            event = self._changed_by[resource] = asyncio.Event()
        return event

    def wake(self) -> None:
        """Wake every waiter (watches re-check drops, stalls and removed kinds)."""
        self._notify(None)

    def _notify(self, resource: str | None = None) -> None:
        old, self._changed = self._changed, asyncio.Event()
        old.set()
        if resource is None:
            waiting, self._changed_by = self._changed_by, {}
            for event in waiting.values():
                event.set()
        else:
            one = self._changed_by.pop(resource, None)
            if one is not None:
                one.set()

    def resource_rv(self, resource: str) -> int:
        """The resourceVersion of the newest write of ``resource`` (0 if never written)."""
        return self._resource_rv.get(resource, 0)

    def backup(self) -> Backup:
        """A copy of the current state, as an etcd snapshot would keep it."""
        return Backup(self._rv, {resource: dict(bucket) for resource, bucket in self._objects.items()})

    def restore(self, backup: Backup) -> None:
        """Replace the state by ``backup`` (etcd restored from a snapshot): the resourceVersion
        goes back to the backup's, objects created since are gone, deleted ones are back, and the
        history starts at the backup (older resourceVersions get 410, newer ones wait)."""
        self._rv = backup.resource_version
        self._history = History(self._history.limit, backup.resource_version)
        self._objects = {bucket: {} for bucket in [*(s.bucket for s in self._served.values()), CRD.resource]}
        for resource, bucket in backup.objects.items():
            if resource in self._objects:
                self._objects[resource] = dict(bucket)
        self._resource_rv = {
            resource: max((o.rv for o in bucket.values()), default=0)
            for resource, bucket in self._objects.items()
        }
        self._notify(None)

    def compact(self, rv: int | None = None) -> int:
        """Forget history up to ``rv`` (default: everything). Returns the compacted rv."""
        self._history.compact(self._rv if rv is None else min(rv, self._rv))
        return self._history.compacted_rv

    def history_after(self, rv: int, limit: int) -> list[HistoryEvent]:
        """Up to ``limit`` events with resourceVersion > ``rv``; 410 if ``rv`` was compacted."""
        if rv >= self._rv:
            return []
        return self._history.after(rv, limit)

    def _commit(self, spec: KindSpec, etype: str, obj: StoredObject, prev: StoredObject | None) -> None:
        self._history.append(HistoryEvent(obj.rv, etype, spec.bucket, obj, prev))
        self._resource_rv[spec.bucket] = obj.rv
        self._notify(spec.bucket)

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _new_uid(self) -> str:
        if self._rng is None:
            return str(uuid.uuid4())
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    # ----------------------------------------------------------------- reads
    def _bucket(self, spec: KindSpec) -> dict[Key, StoredObject]:
        return self._objects[spec.bucket]

    def stored(self, kind: KindSpec | str, namespace: str, name: str) -> StoredObject:
        spec = self.spec(kind)
        found = self._bucket(spec).get((namespace if spec.namespaced else "", name))
        if found is None:
            raise errors.not_found(spec, name)
        return found

    def get(self, kind: KindSpec | str, namespace: str, name: str) -> dict[str, Any]:
        """The object as a dict (a fresh copy); raises a 404 ``ApiError``."""
        return self.stored(kind, namespace, name).decode()

    def list_objects(self, kind: KindSpec | str, namespace: str | None = None) -> list[dict[str, Any]]:
        spec = self.spec(kind)
        return [o.decode() for o in self.snapshot(spec, namespace=namespace)[1]]

    def snapshot(
        self, spec: KindSpec, rv: int | None = None, namespace: str | None = None
    ) -> tuple[int, list[StoredObject]]:
        """The objects of ``spec`` at ``rv`` (default: now), in key order."""
        objs = dict(self._bucket(spec))
        at = self._rv
        if rv is not None and rv < self._rv:
            if rv < self._history.compacted_rv:
                raise errors.gone("The resourceVersion for the provided list is too old.")
            for ev in self._history.newest_first(rv):
                if ev.resource != spec.bucket:
                    continue
                key = (ev.obj.namespace, ev.obj.name)
                if ev.prev is None:
                    objs.pop(key, None)
                else:
                    objs[key] = ev.prev
            at = rv
        keys = sorted(objs, key=storage_key)
        items = [objs[k] for k in keys if namespace is None or k[0] == namespace]
        return at, items

    # ---------------------------------------------------------------- writes
    def _store(
        self, spec: KindSpec, body: dict[str, Any], etype: str, prev: StoredObject | None
    ) -> StoredObject:
        rv = self._next_rv()
        meta = body.setdefault("metadata", {})
        meta["resourceVersion"] = str(rv)
        ns = meta.get("namespace", "") if spec.namespaced else ""
        labels = meta.get("labels") or {}
        obj = StoredObject(
            ns,
            meta["name"],
            str(meta.get("uid", "")),
            rv,
            labels if isinstance(labels, dict) else {},
            encode(body),
            selectable.extract(spec, body),
        )
        bucket = self._bucket(spec)
        if etype == "DELETED":
            bucket.pop((ns, obj.name), None)
        else:
            bucket[(ns, obj.name)] = obj
        self._commit(spec, etype, obj, prev)
        return obj

    def create(
        self,
        kind: KindSpec | str,
        obj: dict[str, Any],
        *,
        namespace: str | None = None,
        drop_status: bool = False,
    ) -> dict[str, Any]:
        """Create like a POST: fills uid, creationTimestamp, generation, resourceVersion,
        apiVersion/kind (``generateName`` too). ``drop_status`` as the API does for kinds
        with a status subresource; the Python default keeps a given status."""
        spec = self.spec(kind)
        body = objects.prepare_create(
            spec,
            obj,
            namespace=namespace,
            uid=self._new_uid(),
            rand=self._rng or random.Random(),
            drop_status=drop_status,
        )
        meta = body["metadata"]
        key = (meta.get("namespace", "") if spec.namespaced else "", meta["name"])
        if key in self._bucket(spec):
            raise errors.already_exists(spec, meta["name"])
        return self._store(spec, body, "ADDED", None).decode()

    def put_raw(
        self,
        kind: KindSpec | str,
        obj: dict[str, Any],
        *,
        namespace: str | None = None,
        name: str | None = None,
    ) -> dict[str, Any]:
        """Store ``obj`` as given (even malformed); only ``metadata.resourceVersion`` is set.
        ``namespace``/``name`` override the key when metadata is unusable. ADDED or MODIFIED."""
        spec = self.spec(kind)
        body = dict(obj)
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            meta = {}
        meta = dict(meta)
        ns = namespace if namespace is not None else str(meta.get("namespace", "default"))
        nm = name if name is not None else str(meta.get("name", ""))
        if not nm:
            raise ValueError("put_raw needs a name")
        prev = self._bucket(spec).get((ns if spec.namespaced else "", nm))
        rv = self._next_rv()
        meta["resourceVersion"] = str(rv)
        body["metadata"] = meta
        labels = meta.get("labels")
        stored = StoredObject(
            ns if spec.namespaced else "",
            nm,
            str(meta.get("uid", "")),
            rv,
            labels if isinstance(labels, dict) else {},
            encode(body),
            selectable.extract(spec, body),
        )
        self._bucket(spec)[(stored.namespace, nm)] = stored
        self._commit(spec, "MODIFIED" if prev else "ADDED", stored, prev)
        return body

    def update(
        self,
        kind: KindSpec | str,
        obj: dict[str, Any],
        *,
        subresource: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        require_rv: bool = False,
    ) -> dict[str, Any]:
        """Replace like a PUT (of the object, or of its ``status`` subresource)."""
        spec = self.spec(kind)
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        nm = name or str(meta.get("name", ""))
        ns = namespace if namespace is not None else str(meta.get("namespace", ""))
        prev = self.stored(spec, ns, nm)
        old = prev.decode()
        body = objects.prepare_update(spec, old, obj, subresource=subresource, require_rv=require_rv)
        return self._write_update(spec, prev, old, body)

    def _write_update(
        self, spec: KindSpec, prev: StoredObject, old: dict[str, Any], body: dict[str, Any]
    ) -> dict[str, Any]:
        meta = body["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._store(spec, body, "DELETED", prev).decode()
        if body == old:
            return old  # a no-op write does not change resourceVersion
        return self._store(spec, body, "MODIFIED", prev).decode()

    def patch(
        self,
        kind: KindSpec | str,
        namespace: str,
        name: str,
        patch: Any,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """PATCH (``merge`` or ``json``) the object or its ``status`` subresource."""
        spec = self.spec(kind)
        prev = self.stored(spec, namespace, name)
        old = prev.decode()
        patched = objects.apply_patch(spec, old, patch, patch_type)
        body = objects.prepare_update(spec, old, patched, subresource=subresource, require_rv=False)
        return self._write_update(spec, prev, old, body)

    def patch_status(self, kind: KindSpec | str, namespace: str, name: str, patch: Any) -> dict[str, Any]:
        """Merge-patch ``{"status": patch}`` through the status subresource."""
        return self.patch(kind, namespace, name, {"status": patch}, subresource="status")

    def replace_status(self, kind: KindSpec | str, namespace: str, name: str, status: Any) -> dict[str, Any]:
        """Replace the whole status (as controllers do with UpdateStatus)."""
        spec = self.spec(kind)
        current = self.get(spec, namespace, name)
        current["status"] = status
        return self.update(spec, current, subresource="status", namespace=namespace, name=name)

    def delete(
        self,
        kind: KindSpec | str,
        namespace: str,
        name: str,
        *,
        preconditions: dict[str, Any] | None = None,
        ignore_finalizers: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        """DELETE. Returns ``(object, gone)``; with finalizers the object only gets a
        ``deletionTimestamp`` (``gone`` False) until an update removes them."""
        spec = self.spec(kind)
        prev = self.stored(spec, namespace, name)
        old = prev.decode()
        pre = preconditions or {}
        if pre.get("uid") and pre["uid"] != prev.uid:
            raise errors.conflict(
                spec,
                name,
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {prev.uid}",
            )
        if pre.get("resourceVersion") and str(pre["resourceVersion"]) != str(prev.rv):
            raise errors.conflict(
                spec,
                name,
                f"Precondition failed: ResourceVersion in precondition: "
                f"{pre['resourceVersion']}, ResourceVersion in object meta: {prev.rv}",
            )
        meta = old.setdefault("metadata", {})
        if meta.get("finalizers") and not ignore_finalizers:
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = objects.now()
                meta["deletionGracePeriodSeconds"] = 0
                meta["generation"] = int(meta.get("generation", 1)) + 1
                return self._store(spec, old, "MODIFIED", prev).decode(), False
            return old, False
        return self._store(spec, old, "DELETED", prev).decode(), True
