"""The OpenAPI document of the query API, committed as docs/openapi/persister.json.

Regenerate it with ``uv run python -m trainwatch_persister openapi`` (from the repository root);
a test fails when the committed file differs from what the code generates.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainwatch_common.auth import ApiTokens
from trainwatch_persister.settings import PersisterSettings

DEFAULT_PATH = Path("docs/openapi/persister.json")


def openapi_document() -> dict[str, Any]:
    from trainwatch_persister.app import create_app  # the app pulls in NATS and uvicorn; only load on use

    settings = PersisterSettings(consume=False, migrate_on_start=False)
    return create_app(settings, tokens=ApiTokens()).openapi()


def render() -> str:
    return json.dumps(openapi_document(), indent=2, ensure_ascii=False) + "\n"


def write(path: Path = DEFAULT_PATH) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(), encoding="utf-8")
    return path
