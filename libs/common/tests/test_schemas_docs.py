from pathlib import Path

from trainwatch_common.schemas import rendered_files

DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_committed_schemas_are_current() -> None:
    stale = [
        relative
        for relative, content in rendered_files().items()
        if not (DOCS / relative).exists() or (DOCS / relative).read_bytes() != content
    ]
    assert not stale, f"docs/ is stale for {stale}: run `make schemas` and commit the result"
