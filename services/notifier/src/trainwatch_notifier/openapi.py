"""The published OpenAPI document of the admin API (docs/openapi/notifier.json), from the routes.

``uv run python -m trainwatch_notifier.openapi`` regenerates it; a test says when it is stale.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from trainwatch_notifier import api

# services/notifier/src/trainwatch_notifier/openapi.py -> the repository root
REPO_ROOT = Path(__file__).resolve().parents[4]
PUBLISHED = REPO_ROOT / "docs" / "openapi" / "notifier.json"


def openapi_document() -> dict[str, Any]:
    app = FastAPI(title="Trainwatch notifier admin API", version="1", description=api.__doc__ or "")
    app.include_router(api.router)
    return app.openapi()


def render() -> str:
    return json.dumps(openapi_document(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    PUBLISHED.parent.mkdir(parents=True, exist_ok=True)
    PUBLISHED.write_text(render())
    print(PUBLISHED)
