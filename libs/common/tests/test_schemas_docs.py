from pathlib import Path

import orjson

from trainwatch_common.schemas import asyncapi_document, rendered_files

DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_committed_schemas_are_current() -> None:
    stale = [
        relative
        for relative, content in rendered_files().items()
        if not (DOCS / relative).exists() or (DOCS / relative).read_bytes() != content
    ]
    assert not stale, f"docs/ is stale for {stale}: run `make schemas` and commit the result"


def test_asyncapi_names_servers_and_how_to_authenticate() -> None:
    document = asyncapi_document()
    servers = document["servers"]
    assert {server["protocol"] for server in servers.values()} == {"nats"}
    assert servers["local"]["host"] == "127.0.0.1:4222"
    schemes = document["components"]["securitySchemes"]
    assert {scheme["type"] for scheme in schemes.values()} >= {"userPassword", "X509"}
    production = servers["production"]
    refs = {item["$ref"].rsplit("/", 1)[-1] for item in production["security"]}
    assert refs <= schemes.keys()
    assert refs >= {"natsUser", "natsTls"}
    assert all(scheme.get("description") for scheme in schemes.values())
    for operation in document["operations"].values():  # every operation runs on the declared servers
        channel = document["channels"][operation["channel"]["$ref"].rsplit("/", 1)[-1]]
        assert {ref["$ref"] for ref in channel["servers"]} == {f"#/servers/{name}" for name in servers}


def _undescribed(node: object, path: str) -> list[str]:
    """Every property (at any depth, $defs included) whose schema has no non-empty description."""
    missing: list[str] = []
    if isinstance(node, dict):
        properties = node.get("properties")
        if isinstance(properties, dict):
            for name, schema in properties.items():
                if not (isinstance(schema, dict) and str(schema.get("description", "")).strip()):
                    missing.append(f"{path}.properties.{name}")
        for key, value in node.items():
            missing += _undescribed(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            missing += _undescribed(value, f"{path}[{index}]")
    return missing


def test_every_published_field_has_a_description() -> None:
    # Issue 20: other teams read the schemas, not our code; a field without a description is a
    # field they have to guess at. The AsyncAPI document embeds the same schemas as payloads.
    documents = {name: orjson.loads(content) for name, content in rendered_files().items()}
    missing = [item for name, document in documents.items() for item in _undescribed(document, name)]
    assert not missing, f"{len(missing)} published fields have no description: {missing}"
