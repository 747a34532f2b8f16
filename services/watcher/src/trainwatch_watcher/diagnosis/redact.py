"""Log tails fit to publish: secret-looking strings replaced, then cut to bounded lines and bytes.

Redaction runs on the whole text *before* it is cut, so a cut can never leave half a secret (the
body of a private key whose BEGIN line fell off the tail is still recognised by its END line).
What counts as secret-looking:

- PEM private keys (``-----BEGIN ... PRIVATE KEY-----`` to ``-----END ... PRIVATE KEY-----``);
- ``Authorization: Bearer|Basic <credential>`` and bare ``Bearer <token>``;
- passwords in URLs (``scheme://user:password@host``);
- AWS access key ids (``AKIA...``/``ASIA...``) and ``aws_secret_access_key`` values;
- well-known token shapes: GitHub (``ghp_``, ``github_pat_``...), Slack (``xox?-``), JWTs,
  Hugging Face (``hf_``), OpenAI-style ``sk-``, Google API keys (``AIza``);
- the value of any ``key=value`` / ``key: value`` / ``"key": "value"`` whose key names a secret
  (password, passwd, pwd, secret, token, api_key, access_key, private_key, credential, auth...).

Each is replaced by ``[REDACTED]``. The result is also stripped of ANSI colour codes and of
progress-bar rewrites (only the text after the last carriage return of a line is kept).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainwatch_common.events.diagnosis import MAX_LOG_BYTES, MAX_LOG_LINE_CHARS, MAX_LOG_LINES, LogTail

MASK = "[REDACTED]"

_PEM = re.compile(r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?(?:-----END \1PRIVATE KEY-----|\Z)", re.DOTALL)
_PEM_TAIL = re.compile(r"\A.*?-----END [A-Z0-9 ]*PRIVATE KEY-----", re.DOTALL)
_AUTH_HEADER = re.compile(
    r"(?i)(authorization\s*[:=]\s*[\"']?\s*)(bearer|basic|token|digest)?(\s*)[^\s\"',;]+"
)
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
_URL_PASSWORD = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:)[^\s@/]+(@)")
_TOKENS = re.compile(
    r"\b(?:"
    r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}"
    r"|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|github_pat_[A-Za-z0-9_]{30,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
    r"|hf_[A-Za-z0-9]{30,}"
    r"|sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"
    r"|AIza[0-9A-Za-z_-]{35}"
    r")"
)
_SECRET_KEY = (
    r"[A-Za-z0-9_.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|"
    r"private[_-]?key|credentials?|auth)[A-Za-z0-9_.-]*"
)
# key=value, key: value, "key": "value", --key value is left alone (too many false positives).
_KEY_VALUE = re.compile(r"(?i)(\b" + _SECRET_KEY + r"[\"']?\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&\"'}]+)")
# Values that are no secret (and auth schemes, whose credential the header rule already masked).
_NOT_SECRETS = frozenset({"NONE", "NULL", "TRUE", "FALSE", '""', "''", "BEARER", "BASIC", "DIGEST", "TOKEN"})
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class Redacted:
    lines: tuple[str, ...]
    truncated: bool
    redacted: bool


def _mask_value(match: re.Match[str]) -> str:
    value = match.group(2)
    if value.upper() in _NOT_SECRETS or value == MASK:
        return match.group(0)
    quote = value[0] if value[:1] in "\"'" else ""
    return f"{match.group(1)}{quote}{MASK}{quote}"


def redact_text(text: str) -> tuple[str, bool]:
    """``text`` with every secret-looking string replaced; and whether anything was."""
    original = text
    text = _PEM.sub(MASK, text)
    if "PRIVATE KEY-----" in text:  # an END line whose BEGIN was cut off before we saw it
        text = _PEM_TAIL.sub(MASK, text)
    text = _AUTH_HEADER.sub(lambda m: f"{m.group(1)}{m.group(2) or ''}{m.group(3)}{MASK}", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)}{MASK}", text)
    text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{MASK}{m.group(2)}", text)
    text = _TOKENS.sub(MASK, text)
    text = _KEY_VALUE.sub(_mask_value, text)
    return text, text != original


def redact(
    text: str,
    *,
    max_lines: int = MAX_LOG_LINES,
    max_bytes: int = MAX_LOG_BYTES,
    max_line_chars: int = MAX_LOG_LINE_CHARS,
) -> Redacted:
    """The redacted tail of ``text``: at most ``max_lines`` lines (each at most ``max_line_chars``)
    and ``max_bytes`` UTF-8 bytes in all, newest lines kept."""
    text, changed = redact_text(text)
    text = _ANSI.sub("", text)
    raw_lines = text.split("\n")  # not splitlines(): a lone \r is a progress-bar rewrite
    while raw_lines and not raw_lines[-1].strip():
        raw_lines.pop()
    truncated = len(raw_lines) > max_lines
    lines: list[str] = []
    for raw in raw_lines[-max_lines:]:
        line = _CONTROL.sub("", raw.rsplit("\r", 1)[-1]).rstrip()
        if len(line) > max_line_chars:
            line, truncated = line[: max_line_chars - 1] + "…", True
        lines.append(line)
    size = sum(len(line.encode()) + 1 for line in lines)
    while lines and size > max_bytes:
        size -= len(lines.pop(0).encode()) + 1
        truncated = True
    return Redacted(lines=tuple(lines), truncated=truncated, redacted=changed)


def log_tail(text: str, *, container: str, previous: bool) -> LogTail:
    """A :class:`LogTail` for the contract from raw log text of one container."""
    result = redact(text)
    return LogTail(
        container=container,
        previous=previous,
        lines=list(result.lines),
        truncated=result.truncated,
        redacted=result.redacted,
    )
