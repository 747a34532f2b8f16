"""The jobs export: what a filter shows, as CSV or JSON, streamed page by page and bounded.

A page of ``EXPORT_PAGE`` rows at a time is read with the list's keyset order (newest change
first), so memory stays flat whatever the limit, and the first bytes leave before the last row is
read. Cells that a spreadsheet would run as a formula (=, +, -, @ first) get a leading quote.
"""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator, Iterable
from typing import Any

import orjson
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncEngine

from trainwatch_persister import queries
from trainwatch_persister.api.models import JobPublic
from trainwatch_persister.filters import JobFilters, SortField, SortOrder

EXPORT_PAGE = 500
MAX_EXPORT_ROWS = 10_000

CSV_COLUMNS: tuple[str, ...] = (
    "cluster_id", "namespace", "kind_key", "name", "uid", "phase", "sub_phase", "terminal", "reason",
    "owner", "queue", "restart_count", "replicas_ready", "replicas_desired", "created_at", "started_at",
    "finished_at", "updated_at", "deleted_at",
)  # fmt: skip
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def replica_progress(replicas: dict[str, Any]) -> tuple[int | None, int | None]:
    """(ready, desired) summed over the roles; None where no role reports it."""

    def total(field: str) -> int | None:
        values = [
            int(c[field]) for c in replicas.values() if isinstance(c, dict) and c.get(field) is not None
        ]
        return sum(values) if values else None

    return total("ready"), total("desired")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def csv_row(job: RowMapping) -> list[str]:
    ready, desired = replica_progress(job["replicas"] or {})
    values = {**job, "replicas_ready": ready, "replicas_desired": desired}
    return [_cell(values.get(column)) for column in CSV_COLUMNS]


async def rows(engine: AsyncEngine, filters: JobFilters, limit: int) -> AsyncIterator[list[RowMapping]]:
    """Pages of matching jobs, newest change first, ``limit`` rows in all."""
    left = limit
    after = None
    total: int | None = None
    async with engine.connect() as conn:
        while left > 0:
            page = await queries.list_jobs(
                conn, filters=filters, sort=SortField.UPDATED_AT, order=SortOrder.DESC,
                after=after, limit=min(EXPORT_PAGE, left), total=total,
            )  # fmt: skip
            total = page.total
            if page.rows:
                yield page.rows
            left -= len(page.rows)
            if not page.has_more or not page.rows:
                return
            after = queries.sort_key(page.rows[-1], SortField.UPDATED_AT)


def _csv_lines(lines: Iterable[list[str]]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\r\n").writerows(lines)
    return buffer.getvalue().encode()


async def as_csv(pages: AsyncIterator[list[RowMapping]]) -> AsyncIterator[bytes]:
    yield "\ufeff".encode() + _csv_lines([list(CSV_COLUMNS)])  # the BOM: spreadsheets read UTF-8
    async for page in pages:
        yield _csv_lines(csv_row(job) for job in page)


async def as_json(pages: AsyncIterator[list[RowMapping]]) -> AsyncIterator[bytes]:
    yield b"["
    first = True
    async for page in pages:
        chunk = b",\n".join(
            orjson.dumps(JobPublic.model_validate(dict(job)).model_dump(mode="json")) for job in page
        )
        yield (b"\n" if first else b",\n") + chunk
        first = False
    yield b"\n]\n"
