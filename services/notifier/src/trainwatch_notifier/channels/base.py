"""What every channel does, and how sending fails.

Exceptions::

    SendError                  a send did not succeed; ``reason`` is a short slug for metrics
    ├── RetryableSendError     try again later (429, 5xx, rate-limit codes, transport errors)
    │   └── RateLimitedError   the bot's rate limit (429, 11232, 130101, 45009)
    └── PermanentSendError     retrying cannot help (bad signature, keyword, token, body)

Retry decisions go by class, never by message.
"""

from __future__ import annotations

import contextvars
import email.utils
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import orjson

from trainwatch_notifier.render.facts import DigestFacts, JobFacts
from trainwatch_notifier.ruleset import ChannelConfig

Body = dict[str, Any]

IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
RESEND_HEADER = "Trainwatch-Resend"


@dataclass(frozen=True, slots=True)
class Attempt:
    """What every request of one delivery says about it, whatever the channel: its idempotency key
    (the same on every attempt and every copy: ``<channel>.<event id>``, or a digest's hash) and
    whether an earlier attempt's outcome is unknown (a sender killed mid-request, a read timeout),
    so the bot may already have it. A receiver that keeps the keys can drop the repeat; Feishu's
    and the other chat bots' webhooks ignore both headers."""

    idempotency_key: str
    resend: bool = False


# Set by the sender around each attempt (its own task's context); ``post_bytes`` adds the headers.
ATTEMPT: contextvars.ContextVar[Attempt | None] = contextvars.ContextVar("notifier_attempt", default=None)


class SendError(Exception):
    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class RetryableSendError(SendError):
    """``maybe_delivered``: the request may have reached the bot (no answer came back), as
    opposed to one the bot answered with a refusal or one that never left (connect errors)."""

    def __init__(
        self,
        reason: str,
        detail: str = "",
        *,
        retry_after: float | None = None,
        maybe_delivered: bool = False,
    ) -> None:
        super().__init__(reason, detail)
        self.retry_after = retry_after
        self.maybe_delivered = maybe_delivered


class RateLimitedError(RetryableSendError):
    """The bot refused the request for its rate limit (HTTP 429, Feishu 11232, DingTalk 130101,
    WeCom 45009): nothing went out, and the bot's window is fuller than this process counted."""


class PermanentSendError(SendError):
    pass


class ChannelRefusedError(PermanentSendError):
    """The bot refuses every request of this channel, whatever it carries: a wrong signing secret
    or token, a webhook that no longer exists, an IP allowlist, a security keyword. The channel's
    configuration is wrong, not the message: the notifier says so in /readyz (``ChannelHealth``)."""


class Channel(Protocol):
    """One configured destination. Rendering is pure; ``post`` signs (freshly, per attempt) and sends."""

    name: str
    config: ChannelConfig

    def render(self, facts: JobFacts) -> Body: ...

    def render_digest(self, digest: DigestFacts) -> Body: ...

    async def post(self, body: Body) -> None: ...


class HttpChannel:
    """What every channel holds: its name, its configuration, the notifier's shared HTTP client,
    and the clock that signed channels read afresh for each attempt."""

    def __init__(
        self,
        name: str,
        config: ChannelConfig,
        client: httpx.AsyncClient,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.config = config
        self._client = client
        self._clock = clock


def retry_after_seconds(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time())


async def post_bytes(
    client: httpx.AsyncClient, url: str, content: bytes, *, headers: dict[str, str], timeout_seconds: float
) -> httpx.Response:
    """POST, turning transport failures, 429 and 5xx into RetryableSendError and other 4xx into
    PermanentSendError; returns 2xx/3xx responses for the channel to read its own codes."""
    attempt = ATTEMPT.get()
    if attempt is not None:
        headers = {**headers, IDEMPOTENCY_KEY_HEADER: attempt.idempotency_key}
        if attempt.resend:
            headers[RESEND_HEADER] = "unconfirmed"
    try:
        response = await client.post(url, content=content, headers=headers, timeout=timeout_seconds)
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:  # never left
        raise RetryableSendError("transport", type(exc).__name__) from None
    except httpx.TransportError as exc:  # read/write errors and timeouts: the bot may have it
        raise RetryableSendError("transport", type(exc).__name__, maybe_delivered=True) from None
    if response.status_code == 429:
        raise RateLimitedError("http-429", response.text[:200], retry_after=retry_after_seconds(response))
    if response.status_code >= 500:
        raise RetryableSendError(f"http-{response.status_code}", response.text[:200])
    if response.status_code in (401, 403, 404):  # refused credentials, or a webhook that is gone
        raise ChannelRefusedError(f"http-{response.status_code}", response.text[:200])
    if response.status_code >= 400:
        raise PermanentSendError(f"http-{response.status_code}", response.text[:200])
    return response


def json_of(response: httpx.Response) -> dict[str, Any]:
    try:
        value = response.json()
    except ValueError:
        raise PermanentSendError("bad-response", response.text[:200]) from None
    if not isinstance(value, dict):
        raise PermanentSendError("bad-response", response.text[:200])
    return value


async def post_errcode_json(
    client: httpx.AsyncClient, url: str, body: Any, *, timeout_seconds: float
) -> tuple[object, str]:
    """POST a JSON body to a bot that answers ``{"errcode": ..., "errmsg": ...}`` (DingTalk,
    WeCom): its code and message (cut to 200 characters), for the channel to classify."""
    response = await post_bytes(
        client,
        url,
        orjson.dumps(body),
        headers={"Content-Type": "application/json; charset=utf-8"},
        timeout_seconds=timeout_seconds,
    )
    answer = json_of(response)
    return answer.get("errcode"), str(answer.get("errmsg", ""))[:200]
