"""/v1/clusters: register, list, read, change, remove, test and import clusters."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Header, HTTPException, Path, Query, Request, Response, status
from prometheus_client import Counter
from redis.exceptions import RedisError

from trainwatch_common import ClusterConnection
from trainwatch_common.events.clusters import CLUSTER_ID_PATTERN
from trainwatch_common.leases import LEASE_PROOF_HEADER
from trainwatch_registry.api.deps import Actor, ActorDep, AdminDep, ServicesDep, ViewerDep, WatcherDep
from trainwatch_registry.api.errors import ERROR_RESPONSES
from trainwatch_registry.importer import import_directory
from trainwatch_registry.models import (
    ClusterCreate,
    ClusterPublic,
    ClustersPublic,
    ClusterUpdate,
    ConnectivityReport,
    DryRunResult,
    ErrorBody,
    HealthPublic,
    ImportReport,
)
from trainwatch_registry.registrations import MAX_PAGE

log = logging.getLogger(__name__)
audit = logging.getLogger("trainwatch_registry.audit")

CONNECTION_READS = Counter(
    "trainwatch_registry_connection_reads_total", "Connection configs served", ["role"]
)

router = APIRouter(prefix="/v1", tags=["clusters"], responses=ERROR_RESPONSES)

ClusterIdPath = Annotated[
    str, Path(pattern=CLUSTER_ID_PATTERN, max_length=63, description="The cluster's id")
]
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorBody, "description": "No such cluster"}}
Force = Annotated[
    bool,
    Query(
        description="Go ahead even when the kubeconfig's API server is registered already (as "
        "another cluster, or, for a rotation, when it is not this cluster's)"
    ),
]
_REFUSED: dict[int | str, dict[str, Any]] = {
    422: {"model": ErrorBody, "description": "Invalid input; each item names one problem"}
}


def _labels(selectors: list[str]) -> dict[str, str]:
    wanted: dict[str, str] = {}
    for selector in selectors:
        key, sep, value = selector.partition("=")
        if not sep or not key:
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT, f"label selector {selector!r} is not key=value"
            )
        wanted[key] = value
    return wanted


@router.post(
    "/clusters",
    status_code=status.HTTP_201_CREATED,
    response_model=ClusterPublic | DryRunResult,
    responses={
        409: {
            "model": ErrorBody,
            "description": "The id is taken, or (type cluster.duplicate_server) another cluster is "
            "registered at the same API server: pass force=true to register it anyway",
        },
        **_REFUSED,
    },
    summary="Register a cluster (or, with dry_run, validate it and test connectivity, storing nothing)",
)
async def create_cluster(
    body: ClusterCreate,
    services: ServicesDep,
    _: AdminDep,
    actor: ActorDep,
    response: Response,
    dry_run: Annotated[bool, Query(description="Validate and test connectivity; store nothing")] = False,
    force: Force = False,
) -> ClusterPublic | DryRunResult:
    if dry_run:
        sanitized, preview = await services.registry.preview(body, force=force)
        response.status_code = status.HTTP_200_OK
        return DryRunResult(cluster=preview, connectivity=await services.check_connectivity(sanitized))
    created = await services.registry.create(body, force=force)
    _audit_change(actor, "create", created.id, created.revision)
    return created


@router.get("/clusters", response_model=ClustersPublic, responses=_REFUSED)
async def list_clusters(
    services: ServicesDep,
    _: ViewerDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    cursor: Annotated[
        str | None,
        Query(pattern=CLUSTER_ID_PATTERN, max_length=63, description="next_cursor of the previous page"),
    ] = None,
    label: Annotated[list[str], Query(description="key=value; repeat to require several")] = [],  # noqa: B006
) -> ClustersPublic:
    return await services.registry.list(limit=limit, cursor=cursor, labels=_labels(label))


@router.get("/clusters/{cluster_id}", response_model=ClusterPublic, responses=_NOT_FOUND)
async def get_cluster(cluster_id: ClusterIdPath, services: ServicesDep, _: ViewerDep) -> ClusterPublic:
    return await services.registry.get(cluster_id)


@router.patch(
    "/clusters/{cluster_id}",
    response_model=ClusterPublic,
    responses={
        **_NOT_FOUND,
        **_REFUSED,
        409: {
            "model": ErrorBody,
            "description": "Revision conflict, or (type cluster.server_changed) the new kubeconfig "
            "names another API server: pass force=true if the cluster really moved",
        },
    },
    summary="Change a cluster; a kubeconfig here rotates its credentials",
)
async def update_cluster(
    cluster_id: ClusterIdPath,
    body: ClusterUpdate,
    services: ServicesDep,
    _: AdminDep,
    actor: ActorDep,
    force: Force = False,
) -> ClusterPublic:
    updated = await services.registry.update(cluster_id, body, force=force)
    action = "rotate" if body.kubeconfig is not None else "update"
    _audit_change(actor, action, cluster_id, updated.revision)
    return updated


@router.delete("/clusters/{cluster_id}", status_code=status.HTTP_204_NO_CONTENT, responses=_NOT_FOUND)
async def delete_cluster(
    cluster_id: ClusterIdPath, services: ServicesDep, _: AdminDep, actor: ActorDep
) -> Response:
    await services.registry.delete(cluster_id)
    _audit_change(actor, "remove", cluster_id, None)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


def _audit_change(actor: Actor, action: str, cluster_id: str, revision: int | None) -> None:
    """One line per admin change, whoever made it (dashboard, CLI, a script)."""
    audit.info(
        "cluster changed by an admin",
        extra={
            "action": action,
            "cluster_id": cluster_id,
            "revision": revision,
            "actor": actor.token,
            "client": actor.client,
        },
    )


@router.post(
    "/clusters/{cluster_id}/test",
    name="test_cluster",
    response_model=ConnectivityReport,
    responses=_NOT_FOUND,
    summary="Connect to the cluster with its stored kubeconfig; report version and job kinds served",
)
async def run_connectivity_test(
    cluster_id: ClusterIdPath, services: ServicesDep, _: AdminDep
) -> ConnectivityReport:
    registry = services.registry
    row, kubeconfig = await registry.stored_kubeconfig(cluster_id)
    # Re-run intake: the operator's policy may have tightened since the cluster was registered.
    sanitized = registry.intake(kubeconfig, row.context)
    return await services.check_connectivity(sanitized)


@router.get("/clusters/{cluster_id}/health", response_model=HealthPublic | None, responses=_NOT_FOUND)
async def cluster_health(
    cluster_id: ClusterIdPath, services: ServicesDep, _: ViewerDep
) -> HealthPublic | None:
    return await services.registry.health(cluster_id)


@router.get(
    "/clusters/{cluster_id}/connection",
    response_model=ClusterConnection,
    responses={
        **_NOT_FOUND,
        403: {"model": ErrorBody, "description": "The watcher does not hold the cluster's lease"},
        503: {"model": ErrorBody, "description": "The lease cannot be checked (Redis unavailable)"},
    },
    summary="The sanitized kubeconfig, for the watcher holding the cluster's lease (every read is logged, "
    "without the secret)",
)
async def cluster_connection(
    cluster_id: ClusterIdPath,
    request: Request,
    services: ServicesDep,
    role: WatcherDep,
    lease: Annotated[
        str | None,
        Header(
            alias=LEASE_PROOF_HEADER,
            description="The value of the caller's Redis lease on the cluster (holder|epoch)",
            max_length=512,
        ),
    ] = None,
) -> ClusterConnection:
    client = request.client.host if request.client else None
    if services.lease_proofs is not None:
        try:
            proven = await services.lease_proofs.proven(cluster_id, lease)
        except (RedisError, OSError):
            raise HTTPException(
                status.HTTP_503_SERVICE_UNAVAILABLE, "cannot check the watcher's lease: Redis is unavailable"
            ) from None
        if not proven:
            # Before looking the cluster up: a refused caller learns nothing, not even whether it exists.
            audit.warning(
                "connection config refused: the caller does not hold the lease",
                extra={"cluster_id": cluster_id, "caller_role": role.value, "client": client},
            )
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"a watcher reads only the clusters whose lease it holds (send it in {LEASE_PROOF_HEADER})",
            )
    connection = await services.registry.connection(cluster_id)
    CONNECTION_READS.labels(role.value).inc()
    audit.info(
        "connection config read",
        extra={
            "cluster_id": cluster_id,
            "caller_role": role.value,
            "connection_fingerprint": connection.connection_fingerprint,
            "revision": connection.revision,
            "client": client,
        },
    )
    return connection


@router.post(
    "/clusters:import",
    response_model=ImportReport,
    responses={409: {"model": ErrorBody, "description": "No import folder is configured"}},
    summary="Register every kubeconfig file of the configured folder (idempotent)",
)
async def import_clusters(services: ServicesDep, _: AdminDep) -> ImportReport:
    directory = services.settings.registry_import_dir
    if directory is None:
        raise HTTPException(status.HTTP_409_CONFLICT, "no import folder: set TRAINWATCH_REGISTRY_IMPORT_DIR")
    try:
        return await import_directory(services.registry, directory)
    except FileNotFoundError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
