from pathlib import Path

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
