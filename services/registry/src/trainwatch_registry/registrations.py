"""The registry's use cases: register, change, remove and read clusters.

Every change is one transaction that writes the cluster row *and* its event into the outbox;
the relay publishes the event after the commit (``outbox.py``). Nothing is written when the
kubeconfig is refused, and a change that changes nothing writes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from trainwatch_common import (
    ClusterConnection,
    ClusterEvent,
    ClusterEventType,
    ClusterSpec,
    WatchOptions,
    cluster_event_id,
    cluster_subject,
    wrap_cluster_event,
)
from trainwatch_registry import repository
from trainwatch_registry.addresses import AddressRefused, checked_addresses, server_key
from trainwatch_registry.crypto import Encryptor
from trainwatch_registry.kubeconfig import (
    IntakePolicy,
    KubeconfigRefused,
    Refusal,
    SanitizedKubeconfig,
    sanitize,
)
from trainwatch_registry.models import (
    ClusterCreate,
    ClusterPublic,
    ClustersPublic,
    ClusterUpdate,
    CredentialsState,
    HealthPublic,
)
from trainwatch_registry.repository import ClusterRow

MAX_PAGE = 1000
# How long intake waits for DNS before accepting a name it cannot resolve (the watcher checks
# the resolved address again at every connect, so an unresolved name is not a way around it).
RESOLVE_TIMEOUT_SECONDS = 5.0


class ClusterNotFound(LookupError):
    def __init__(self, cluster_id: str) -> None:
        super().__init__(f"cluster {cluster_id!r} is not registered")


class ClusterConflict(RuntimeError):
    """The id is taken, or the cluster changed since the revision the caller expected."""


class ServerConflict(ClusterConflict):
    """A registration that would watch an API server twice, or a rotation that would turn a
    cluster into another one: refused unless the caller passes ``force``.

    ``code`` tells the two apart for clients that offer the override (the CLI's ``--force``, the
    dashboard's "register anyway"); ``clusters`` are the ids already registered at ``server``.
    """

    def __init__(self, code: str, reason: str, *, undone: str, server: str, clusters: list[str]) -> None:
        super().__init__(f"{reason}; {undone} (force=true to go ahead anyway)")
        self.code = code
        self.reason = reason  # without the API's hint: the CLI words its own (--force)
        self.server = server
        self.clusters = clusters


DUPLICATE_SERVER = "cluster.duplicate_server"
SERVER_CHANGED = "cluster.server_changed"


def duplicate_server(server: str, cluster_id: str, others: list[str]) -> ServerConflict:
    return ServerConflict(
        DUPLICATE_SERVER,
        f"{server} is already registered as {', '.join(others)}: a second registration watches the "
        "same cluster again and publishes each of its jobs twice, under two cluster ids",
        undone="nothing registered",
        server=server,
        clusters=others,
    )


def server_changed(cluster_id: str, old: str, new: str, others: list[str]) -> ServerConflict:
    also = f" (already registered as {', '.join(others)})" if others else ""
    return ServerConflict(
        SERVER_CHANGED,
        f"the new kubeconfig points at {new}{also}, but {cluster_id} is registered at {old}: "
        f"rotating would make {cluster_id} another cluster (its jobs published as {cluster_id}'s)",
        undone="nothing changed",
        server=new,
        clusters=others,
    )


async def _others_at(conn: AsyncConnection, server: str, cluster_id: str) -> list[str]:
    """Ids of the other live clusters registered at the same API server as ``server``."""
    key = server_key(server)
    candidates = await repository.live_servers(conn, host=key[1])
    return sorted(other for other, at in candidates if other != cluster_id and server_key(at) == key)


class _LostRace(Exception):
    """Another writer changed the row between our read and our compare-and-set."""


_UPDATE_ATTEMPTS = 5


def _now() -> datetime:
    return datetime.now(UTC)


def spec_of(row: ClusterRow) -> ClusterSpec:
    return ClusterSpec(
        id=row.id,
        name=row.name,
        labels=row.labels,
        description=row.description,
        watch=WatchOptions.model_validate(row.watch),
        revision=row.revision,
        connection_fingerprint=row.connection_fingerprint or "",
    )


# The default of TRAINWATCH_REGISTRY_CREDENTIALS_WARNING_DAYS.
DEFAULT_CREDENTIALS_WARNING = timedelta(days=14)


def credentials_state(
    expire_at: datetime | None, *, now: datetime, warning: timedelta
) -> CredentialsState | None:
    """``expired``, ``expiring`` (within ``warning``: the rule of the credentials_expiring gauge)
    or ``ok``; None when the credentials have no known expiry."""
    if expire_at is None:
        return None
    if expire_at <= now:
        return "expired"
    if expire_at < now + warning:
        return "expiring"
    return "ok"


def public_of(
    row: ClusterRow,
    health: dict[str, Any] | None = None,
    *,
    credentials_warning: timedelta = DEFAULT_CREDENTIALS_WARNING,
) -> ClusterPublic:
    return ClusterPublic(
        id=row.id,
        name=row.name,
        description=row.description,
        labels=row.labels,
        watch=WatchOptions.model_validate(row.watch),
        context=row.context or "",
        server=row.server or "",
        auth_method=row.auth_method or "",
        connection_fingerprint=row.connection_fingerprint or "",
        credentials_expire_at=row.credentials_expire_at,
        credentials_state=credentials_state(
            row.credentials_expire_at, now=_now(), warning=credentials_warning
        ),
        revision=row.revision,
        source=row.source,
        created_at=row.created_at,
        updated_at=row.updated_at,
        health=HealthPublic.model_validate(health) if health else None,
    )


def outbox_entry(
    row: ClusterRow, event_type: ClusterEventType, *, connection_changed: bool
) -> dict[str, Any]:
    """The outbox row announcing ``row`` at its current revision."""
    spec = spec_of(row)
    event = ClusterEvent(
        type=event_type, cluster=spec, connection_changed=connection_changed, occurred_at=row.updated_at
    )
    msg_id = cluster_event_id(row.id, row.revision)
    return {
        "cluster_id": row.id,
        "revision": row.revision,
        "event_type": event_type,
        "subject": cluster_subject(event_type, row.id),
        "msg_id": msg_id,
        "payload": wrap_cluster_event(event, event_id=msg_id).to_json(),
        "kv_value": None if event_type == "removed" else spec.model_dump_json().encode(),
        "created_at": row.updated_at,
    }


class Registry:
    def __init__(
        self,
        *,
        engine: AsyncEngine,
        encryptor: Encryptor,
        policy: IntakePolicy,
        on_commit: Callable[[], None] = lambda: None,
        credentials_warning: timedelta = DEFAULT_CREDENTIALS_WARNING,
    ) -> None:
        self._engine = engine
        self._encryptor = encryptor
        self.policy = policy
        self._on_commit = on_commit  # wakes the outbox relay
        self._credentials_warning = credentials_warning

    def _public_of(self, row: ClusterRow, health: dict[str, Any] | None = None) -> ClusterPublic:
        return public_of(row, health, credentials_warning=self._credentials_warning)

    def intake(self, kubeconfig: str, context: str | None) -> SanitizedKubeconfig:
        """Validate and reduce a kubeconfig; raises KubeconfigRefused. Pure: touches nothing."""
        return sanitize(kubeconfig, context=context, policy=self.policy)

    async def check_resolved(self, sanitized: SanitizedKubeconfig) -> None:
        """Refuse a server whose name resolves to a refused address (``vm`` -> 127.0.0.1).

        A name that does not resolve from here is accepted: the API server may be reachable
        only from the watchers' network, and they check every address they connect to.
        """
        parts = urlsplit(sanitized.server)
        try:
            async with asyncio.timeout(RESOLVE_TIMEOUT_SECONDS):
                await checked_addresses(parts.hostname or "", parts.port or 443, self.policy.addresses)
        except AddressRefused as exc:
            problem = exc.problem
            raise KubeconfigRefused([Refusal(problem.code, f"cluster server: {problem.message}")]) from None
        except (OSError, TimeoutError, UnicodeError):
            return

    async def preview(
        self, body: ClusterCreate, *, force: bool = False
    ) -> tuple[SanitizedKubeconfig, ClusterPublic]:
        """What ``create`` would store, without storing it (the dry run): refused as ``create``
        would refuse it, the same API server registered already included."""
        sanitized = self.intake(body.kubeconfig.get_secret_value(), body.context)
        if not force:
            async with self._engine.connect() as conn:
                others = await _others_at(conn, sanitized.server, body.id)
            if others:
                raise duplicate_server(sanitized.server, body.id, others)
        now = _now()
        row = self._new_row(body, sanitized, revision=1, source="api", now=now)
        return sanitized, self._public_of(row)

    def _new_row(
        self,
        body: ClusterCreate,
        sanitized: SanitizedKubeconfig,
        *,
        revision: int,
        source: str,
        now: datetime,
    ) -> ClusterRow:
        return ClusterRow(
            id=body.id,
            name=body.name,
            description=body.description,
            labels=dict(body.labels),
            watch=body.watch.model_dump(mode="json"),
            context=sanitized.context,
            server=sanitized.server,
            auth_method=sanitized.auth_method,
            kubeconfig_encrypted=None,
            connection_fingerprint=sanitized.connection_fingerprint,
            credentials_expire_at=sanitized.credentials_expire_at,
            revision=revision,
            source=source,
            created_at=now,
            updated_at=now,
            deleted_at=None,
        )

    async def create(self, body: ClusterCreate, *, source: str = "api", force: bool = False) -> ClusterPublic:
        """Register a cluster; refused (ServerConflict) when another cluster is registered at the
        same API server, unless ``force``: both would be watched, each job published twice."""
        sanitized = self.intake(body.kubeconfig.get_secret_value(), body.context)
        await self.check_resolved(sanitized)
        blob = self._encryptor.encrypt(sanitized.to_yaml())
        try:
            async with self._engine.begin() as conn:
                existing = await repository.get_cluster(conn, body.id, include_deleted=True)
                if existing is not None and existing.deleted_at is None:
                    raise ClusterConflict(f"cluster {body.id!r} is already registered")
                if not force and (others := await _others_at(conn, sanitized.server, body.id)):
                    raise duplicate_server(sanitized.server, body.id, others)
                now = _now()
                # A removed id keeps counting revisions: event ids must never repeat.
                revision = existing.revision + 1 if existing is not None else 1
                row = self._new_row(body, sanitized, revision=revision, source=source, now=now)
                row.kubeconfig_encrypted = blob
                if existing is None:
                    await repository.insert_cluster(conn, row)
                elif not await repository.replace_cluster(conn, row, previous_revision=existing.revision):
                    raise ClusterConflict(f"cluster {body.id!r} changed concurrently; retry")
                await repository.add_outbox(conn, row=outbox_entry(row, "added", connection_changed=True))
        except IntegrityError:
            raise ClusterConflict(f"cluster {body.id!r} is already registered") from None
        self._on_commit()
        return self._public_of(row)

    async def update(self, cluster_id: str, body: ClusterUpdate, *, force: bool = False) -> ClusterPublic:
        """Apply a partial update; a write that loses a race is retried on the newer revision,
        unless the caller pinned ``expected_revision``. New credentials for another API server
        are refused (ServerConflict) unless ``force``: that is another cluster under this id."""
        for _ in range(_UPDATE_ATTEMPTS):
            try:
                return await self._update_once(cluster_id, body, force=force)
            except _LostRace:
                if body.expected_revision is not None:
                    break
        raise ClusterConflict(f"cluster {cluster_id!r} changed concurrently; retry")

    async def _update_once(self, cluster_id: str, body: ClusterUpdate, *, force: bool) -> ClusterPublic:
        sanitized: SanitizedKubeconfig | None = None
        async with self._engine.connect() as conn:
            current = await repository.get_cluster(conn, cluster_id)
        if current is None:
            raise ClusterNotFound(cluster_id)
        if body.kubeconfig is not None:
            sanitized = self.intake(body.kubeconfig.get_secret_value(), body.context)
        elif body.context is not None and body.context != current.context:
            # A new context alone: re-read the stored (already reduced) kubeconfig with it.
            stored = self._encryptor.decrypt(current.kubeconfig_encrypted or b"")
            sanitized = self.intake(stored, body.context)
        if sanitized is not None:
            await self.check_resolved(sanitized)
        async with self._engine.begin() as conn:
            current = await repository.get_cluster(conn, cluster_id)
            if current is None:
                raise ClusterNotFound(cluster_id)
            if body.expected_revision is not None and body.expected_revision != current.revision:
                raise ClusterConflict(
                    f"cluster {cluster_id!r} is at revision {current.revision}, not {body.expected_revision}"
                )
            changed = replace(current)
            if body.name is not None:
                changed.name = body.name
            if body.description is not None:
                changed.description = body.description
            if body.labels is not None:
                changed.labels = dict(body.labels)
            if body.watch is not None:
                changed.watch = body.watch.model_dump(mode="json")
            connection_changed = False
            if sanitized is not None:
                moved = server_key(sanitized.server) != server_key(current.server or "")
                if moved and not force:
                    others = await _others_at(conn, sanitized.server, cluster_id)
                    raise server_changed(cluster_id, current.server or "", sanitized.server, others)
                connection_changed = sanitized.connection_fingerprint != current.connection_fingerprint
                same_secret = not connection_changed and sanitized.context == current.context
                if not same_secret:
                    changed.kubeconfig_encrypted = self._encryptor.encrypt(sanitized.to_yaml())
                changed.context = sanitized.context
                changed.server = sanitized.server
                changed.auth_method = sanitized.auth_method
                changed.connection_fingerprint = sanitized.connection_fingerprint
                changed.credentials_expire_at = sanitized.credentials_expire_at
            if changed == current:
                return await self._public(current)  # nothing to change: no revision, no event
            changed.revision = current.revision + 1
            changed.updated_at = _now()
            if not await repository.replace_cluster(conn, changed, previous_revision=current.revision):
                raise _LostRace
            entry = outbox_entry(changed, "updated", connection_changed=connection_changed)
            await repository.add_outbox(conn, row=entry)
        self._on_commit()
        return await self._public(changed)

    async def delete(self, cluster_id: str) -> None:
        async with self._engine.begin() as conn:
            current = await repository.get_cluster(conn, cluster_id)
            if current is None:
                raise ClusterNotFound(cluster_id)
            now = _now()
            tombstone = replace(current, revision=current.revision + 1, updated_at=now, deleted_at=now)
            tombstone.kubeconfig_encrypted = None  # the secret goes with the registration
            if not await repository.replace_cluster(conn, tombstone, previous_revision=current.revision):
                raise ClusterConflict(f"cluster {cluster_id!r} changed concurrently; retry")
            await repository.add_outbox(conn, row=outbox_entry(tombstone, "removed", connection_changed=True))
        self._on_commit()

    async def get(self, cluster_id: str) -> ClusterPublic:
        async with self._engine.connect() as conn:
            row = await repository.get_cluster(conn, cluster_id)
            if row is None:
                raise ClusterNotFound(cluster_id)
            health = await repository.health_of(conn, [row.id])
        return self._public_of(row, health.get(row.id))

    async def row(self, cluster_id: str, *, include_deleted: bool = False) -> ClusterRow | None:
        async with self._engine.connect() as conn:
            return await repository.get_cluster(conn, cluster_id, include_deleted=include_deleted)

    async def _public(self, row: ClusterRow) -> ClusterPublic:
        async with self._engine.connect() as conn:
            health = await repository.health_of(conn, [row.id])
        return self._public_of(row, health.get(row.id))

    async def list(self, *, limit: int, cursor: str | None, labels: dict[str, str]) -> ClustersPublic:
        async with self._engine.connect() as conn:
            if labels:
                # Label selection is rare and the fleet is small: filter in Python, portable SQL.
                everything = await repository.all_live_clusters(conn)
                matching = [r for r in everything if all(r.labels.get(k) == v for k, v in labels.items())]
                total = len(matching)
                page = [r for r in matching if cursor is None or r.id > cursor][:limit]
            else:
                page, total = await repository.list_clusters(conn, limit=limit, after_id=cursor)
            health = await repository.health_of(conn, [row.id for row in page])
        next_cursor = page[-1].id if len(page) == limit and page else None
        return ClustersPublic(
            data=[self._public_of(row, health.get(row.id)) for row in page],
            total=total,
            next_cursor=next_cursor,
        )

    async def health(self, cluster_id: str) -> HealthPublic | None:
        return (await self.get(cluster_id)).health

    async def stored_kubeconfig(self, cluster_id: str) -> tuple[ClusterRow, str]:
        """The decrypted, sanitized kubeconfig (for watchers and connectivity tests only)."""
        async with self._engine.connect() as conn:
            row = await repository.get_cluster(conn, cluster_id)
        if row is None or row.kubeconfig_encrypted is None:
            raise ClusterNotFound(cluster_id)
        return row, self._encryptor.decrypt(row.kubeconfig_encrypted)

    async def connection(self, cluster_id: str) -> ClusterConnection:
        row, kubeconfig = await self.stored_kubeconfig(cluster_id)
        return ClusterConnection(
            cluster_id=row.id,
            revision=row.revision,
            connection_fingerprint=row.connection_fingerprint or "",
            kubeconfig=kubeconfig,
        )

    async def rotate_key(self) -> int:
        """Re-encrypt every stored kubeconfig with the primary key; returns how many rows."""
        async with self._engine.begin() as conn:
            rows = await repository.encrypted_kubeconfigs(conn)
            for cluster_id, blob in rows:
                await repository.set_encrypted_kubeconfig(conn, cluster_id, self._encryptor.rotate(blob))
        return len(rows)
