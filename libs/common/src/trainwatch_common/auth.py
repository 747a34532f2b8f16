"""Bearer tokens and roles, shared by the registry's and the persister's APIs.

Tokens come from settings (TRAINWATCH_ADMIN_TOKENS, TRAINWATCH_VIEWER_TOKENS,
TRAINWATCH_WATCHER_TOKENS: comma-separated), or files mounted from a secret. Roles:
admin writes clusters; viewer reads clusters and jobs; watcher reads connection configs.
An admin may do what a viewer may.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections import deque
from collections.abc import Callable
from enum import StrEnum

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Role(StrEnum):
    ADMIN = "admin"
    VIEWER = "viewer"
    WATCHER = "watcher"


# Which roles satisfy a required role.
_GRANTS: dict[Role, frozenset[Role]] = {
    Role.ADMIN: frozenset({Role.ADMIN}),
    Role.VIEWER: frozenset({Role.ADMIN, Role.VIEWER}),
    Role.WATCHER: frozenset({Role.WATCHER}),
}


MIN_TOKEN_LENGTH = 16
# What the shipped examples say and what people type when they mean "fill in later".
_PLACEHOLDERS = ("replace-me", "replaceme", "replace_me", "changeme", "change-me", "change_me", "example")


def token_id(token: str) -> str:
    """A short, stable name for a token in audit lines: which token acted, without the token.

    Tokens are long random strings (start-up refuses short or placeholder ones), so a prefix of
    their SHA-256 cannot be turned back into one. The dashboard and the registry name the same
    token the same way, so one admin change can be followed through both logs.
    """
    return hashlib.sha256(token.encode()).hexdigest()[:12]


def weak_token_reason(token: str) -> str | None:
    """Why a configured token must not be accepted (a placeholder, too short), or None.

    The reason never contains the token: it ends up in a start-up error and a log.
    """
    lowered = token.lower()
    if any(word in lowered for word in _PLACEHOLDERS) or lowered in ("secret", "password", "token", "admin"):
        return "is a placeholder value"
    if len(token) < MIN_TOKEN_LENGTH:
        return f"is shorter than {MIN_TOKEN_LENGTH} characters"
    return None


def refuse_weak_tokens(tokens: dict[str, list[str]]) -> None:
    """Raise ValueError naming each setting that holds a weak token (by position, never by value)."""
    problems = [
        f"{setting} token #{index} {reason}"
        for setting, values in tokens.items()
        for index, value in enumerate(values, start=1)
        if (reason := weak_token_reason(value)) is not None
    ]
    if problems:
        raise ValueError(
            "refusing to start with weak tokens: "
            + "; ".join(problems)
            + " (generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )


class ApiTokens(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TRAINWATCH_", extra="ignore")

    admin_tokens: SecretStr = Field(SecretStr(""), description="Comma-separated admin bearer tokens")
    viewer_tokens: SecretStr = Field(SecretStr(""), description="Comma-separated viewer bearer tokens")
    watcher_tokens: SecretStr = Field(SecretStr(""), description="Comma-separated watcher bearer tokens")

    def _tokens(self, role: Role) -> list[str]:
        raw = {
            Role.ADMIN: self.admin_tokens,
            Role.VIEWER: self.viewer_tokens,
            Role.WATCHER: self.watcher_tokens,
        }
        return [t.strip() for t in raw[role].get_secret_value().split(",") if t.strip()]

    def refuse_weak(self) -> None:
        """Start-up check: a placeholder such as ``replace-me`` or a short token is a clear error."""
        refuse_weak_tokens({f"TRAINWATCH_{role.value.upper()}_TOKENS": self._tokens(role) for role in Role})

    def role_of(self, token: str) -> Role | None:
        """The role a presented token has (compared in constant time), or None."""
        found: Role | None = None
        for role in Role:
            for known in self._tokens(role):
                if hmac.compare_digest(known.encode(), token.encode()):
                    found = found or role
        return found

    @staticmethod
    def allows(role: Role | None, required: Role) -> bool:
        return role is not None and role in _GRANTS[required]


class AuthFailures:
    """Failed authentications per client address over the last minute (every API and the
    dashboard's sign-in count them): past ``per_minute`` the client waits, whatever it sends,
    so guessing tokens is slow. In memory, per process: a bound, not an account lockout."""

    WINDOW_SECONDS = 60.0
    MAX_CLIENTS = 10_000  # addresses tracked; beyond this the stalest are forgotten

    def __init__(self, per_minute: int = 10, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._limit = per_minute
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}

    def retry_after(self, client: str) -> int | None:
        """Seconds until ``client`` may try again, or None when it may now."""
        now = self._clock()
        times = self._failures.get(client)
        if times is None:
            return None
        while times and times[0] <= now - self.WINDOW_SECONDS:
            times.popleft()
        if not times:
            del self._failures[client]
            return None
        if len(times) < self._limit:
            return None
        return max(1, int(times[0] + self.WINDOW_SECONDS - now) + 1)

    def record(self, client: str) -> None:
        if client not in self._failures and len(self._failures) >= self.MAX_CLIENTS:
            self._failures.pop(next(iter(self._failures)))
        self._failures.setdefault(client, deque()).append(self._clock())


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None
