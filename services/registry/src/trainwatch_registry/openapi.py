"""The published OpenAPI document (docs/openapi/registry.json), generated from the app itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainwatch_registry.app import create_app
from trainwatch_registry.settings import RegistrySettings

# services/registry/src/trainwatch_registry/openapi.py -> the repository root
REPO_ROOT = Path(__file__).resolve().parents[4]
PUBLISHED = REPO_ROOT / "docs" / "openapi" / "registry.json"


def openapi_document() -> dict[str, Any]:
    # Building the app reads no secret and connects to nothing: the lifespan does that.
    app = create_app(RegistrySettings(_env_file=None))
    return app.openapi()


def render() -> str:
    return json.dumps(openapi_document(), indent=2, ensure_ascii=False) + "\n"


def write(path: Path = PUBLISHED) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render())
    return path
