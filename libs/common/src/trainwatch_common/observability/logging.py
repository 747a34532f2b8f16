"""Structured JSON logs on stderr, one object per line, with secrets scrubbed.

Secrets are kept out of logs by construction (models holding them override repr); the
scrubber is a second line of defence for tokens and kubeconfig fields that slip into a message.
"""

from __future__ import annotations

import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

# color_message: uvicorn's ANSI-coloured copy of the message.
_STANDARD_ATTRS = frozenset(vars(logging.makeLogRecord({})).keys()) | {
    "message",
    "asctime",
    "taskName",
    "color_message",
}

_SECRET_PATTERNS = (
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"),
    re.compile(
        r"(?i)((?:token|password|secret|client-key-data|client-certificate-data)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"
    ),
)


def scrub(text: str) -> str:
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(r"\1***", text)
    return text


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self._service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "service": self._service,
            "logger": record.name,
            "message": scrub(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                entry[key] = scrub(value) if isinstance(value, str) else value
        if record.exc_info:
            entry["exception"] = scrub(self.formatException(record.exc_info))
        return orjson.dumps(entry, default=str).decode()


class TextFormatter(logging.Formatter):
    """Human-readable lines for `make run`, still scrubbed."""

    def __init__(self, service: str) -> None:
        super().__init__(f"%(asctime)s %(levelname)-7s {service} %(name)s: %(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        extras = {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS and not k.startswith("_")}
        line = super().format(record)
        if extras:
            line += " " + " ".join(f"{k}={v}" for k, v in extras.items())
        return scrub(line)


def configure_logging(*, service: str, level: str = "INFO", fmt: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service) if fmt == "json" else TextFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("aiohttp.access", "uvicorn.access", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
