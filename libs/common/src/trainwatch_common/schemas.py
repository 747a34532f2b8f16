"""Writes the published contracts for other teams: JSON Schemas and an AsyncAPI document.

    python -m trainwatch_common.schemas docs      # (make schemas)

A test regenerates them in memory and fails when the committed files are stale.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

from trainwatch_common.events.clusters import ClusterEvent, ClusterHealth
from trainwatch_common.events.envelope import (
    CLUSTER_EVENT_TYPE,
    CLUSTER_HEALTH_TYPE,
    CONTENT_TYPE,
    JOB_STATUS_TYPE,
    CloudEvent,
)
from trainwatch_common.events.jobs import JobStatusEvent
from trainwatch_common.streams import CLUSTER_HEALTH_STREAM, CLUSTERS_STREAM, JOBS_STREAM

SCHEMA_FILES: dict[str, type[BaseModel]] = {
    "job-status-event.json": CloudEvent[JobStatusEvent],
    "cluster-event.json": CloudEvent[ClusterEvent],
    "cluster-health.json": CloudEvent[ClusterHealth],
}


def json_schemas() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for filename, model in SCHEMA_FILES.items():
        schema = model.model_json_schema(mode="serialization")
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"https://trainwatch.dev/schemas/v1/{filename}"
        out[filename] = schema
    return out


# Where the events are: make run's server, and the deployment's (deploy/k8s, docs/deploy.md).
SERVERS: dict[str, dict[str, Any]] = {
    "local": {
        "host": "127.0.0.1:4222",
        "protocol": "nats",
        "description": "`make run`'s nats-server (no authentication; its URL is in .run/tokens.env).",
    },
    "production": {
        "host": "nats-0.nats-cluster.trainwatch.svc:4222",
        "protocol": "nats",
        "description": "The deployment's NATS cluster (deploy/k8s; list every node in the client's "
        "server URLs). Ask the operators for a NATS user of your own: it may subscribe to these "
        "subjects and publish on none of them (docs/contracts.md, 'Who may publish').",
        "security": [
            {"$ref": "#/components/securitySchemes/natsUser"},
            {"$ref": "#/components/securitySchemes/natsCredentials"},
            {"$ref": "#/components/securitySchemes/natsTls"},
        ],
    },
}

SECURITY_SCHEMES: dict[str, dict[str, Any]] = {
    "natsUser": {
        "type": "userPassword",
        "description": "A NATS user and password (TRAINWATCH_NATS_USER / TRAINWATCH_NATS_PASSWORD for "
        "Trainwatch's own services).",
    },
    "natsCredentials": {
        "type": "asymmetricEncryption",
        "description": "A NATS decentralized-auth user: a .creds file (JWT and NKey seed) or an NKey "
        "seed alone (TRAINWATCH_NATS_CREDS_FILE / TRAINWATCH_NATS_NKEY_SEED_FILE).",
    },
    "natsTls": {
        "type": "X509",
        "description": "TLS (tls:// URLs) with the deployment's CA, and a client certificate where the "
        "server requires one (TRAINWATCH_NATS_TLS_CA_FILE, _CERT_FILE, _KEY_FILE).",
    },
}


def _channel(address: str, description: str, message: str, params: dict[str, str]) -> dict[str, Any]:
    return {
        "address": address,
        "description": description,
        "servers": [{"$ref": f"#/servers/{name}"} for name in SERVERS],
        "parameters": {name: {"description": text} for name, text in params.items()},
        "messages": {message: {"$ref": f"#/components/messages/{message}"}},
    }


def asyncapi_document() -> dict[str, Any]:
    escaping = (
        "Tokens keep [A-Za-z0-9_-] and percent-encode every other UTF-8 byte (e.g. '.' -> %2E), "
        "so names with dots or wildcards never break a subject."
    )
    job_params = {
        "cluster_id": "Registry cluster id (escaped)",
        "namespace": "Kubernetes namespace (escaped)",
        "kind": "Kind key: job, pytorchjob, tfjob, mpijob, xgboostjob, paddlejob, jaxjob, trainjob, "
        "jobset, volcanojob, rayjob",
        "name": "Job name (escaped)",
    }
    cluster_params = {"cluster_id": "Registry cluster id"}
    schemas = json_schemas()
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "Trainwatch events",
            "version": "1.0.0",
            "description": "Normalized training-job status and cluster events on NATS JetStream. "
            "Every message is a CloudEvents 1.0 JSON document (structured mode). " + escaping,
        },
        "defaultContentType": CONTENT_TYPE,
        "servers": SERVERS,
        "channels": {
            "jobStatus": _channel(
                "jobs.v1.{cluster_id}.{namespace}.{kind}.{name}",
                f"One message per real job transition or diagnosis update (stream {JOBS_STREAM.name}); "
                "Nats-Msg-Id = the event id; de-duplicate on it.",
                "JobStatusEvent",
                job_params,
            ),
            "clusterChange": _channel(
                "clusters.v1.{event}.{cluster_id}",
                f"Cluster added / updated / removed (stream {CLUSTERS_STREAM.name}); never carries "
                "credentials.",
                "ClusterEvent",
                {"event": "added, updated or removed", **cluster_params},
            ),
            "clusterHealth": _channel(
                "clusters.v1.health.{cluster_id}",
                f"Health reported by the owning watcher replica (stream {CLUSTER_HEALTH_STREAM.name}).",
                "ClusterHealth",
                cluster_params,
            ),
        },
        "operations": {
            "receiveJobStatus": {"action": "receive", "channel": {"$ref": "#/channels/jobStatus"}},
            "receiveClusterChange": {"action": "receive", "channel": {"$ref": "#/channels/clusterChange"}},
            "receiveClusterHealth": {"action": "receive", "channel": {"$ref": "#/channels/clusterHealth"}},
        },
        "components": {
            "securitySchemes": SECURITY_SCHEMES,
            "messages": {
                "JobStatusEvent": {
                    "name": JOB_STATUS_TYPE,
                    "payload": schemas["job-status-event.json"],
                },
                "ClusterEvent": {
                    "name": CLUSTER_EVENT_TYPE.format(type="{added|updated|removed}"),
                    "payload": schemas["cluster-event.json"],
                },
                "ClusterHealth": {
                    "name": CLUSTER_HEALTH_TYPE,
                    "payload": schemas["cluster-health.json"],
                },
            },
        },
    }


def rendered_files() -> dict[str, bytes]:
    """Path (relative to docs/) -> content, exactly as committed."""
    options = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
    files = {
        f"schemas/{name}": orjson.dumps(schema, option=options) + b"\n"
        for name, schema in json_schemas().items()
    }
    files["asyncapi.json"] = orjson.dumps(asyncapi_document(), option=options) + b"\n"
    return files


def write(docs_dir: Path) -> list[Path]:
    written = []
    for relative, content in rendered_files().items():
        path = docs_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write(Path(sys.argv[1] if len(sys.argv) > 1 else "docs")):
        print(path)
