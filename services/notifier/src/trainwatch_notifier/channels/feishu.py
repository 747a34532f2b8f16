"""Feishu/Lark custom bot: signed JSON bodies; success only when the JSON ``code`` is 0 (§5)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import orjson

from trainwatch_notifier.channels.base import (
    Body,
    ChannelRefusedError,
    HttpChannel,
    PermanentSendError,
    RateLimitedError,
    json_of,
    post_bytes,
)
from trainwatch_notifier.render import feishu as render
from trainwatch_notifier.render.facts import DigestFacts, JobFacts

RATE_LIMITED = 11232
# Codes that retrying cannot fix (§5.5), with the slug used in dead-letter subjects and metrics.
PERMANENT_CODES = {
    9499: "bad-request",
    19001: "invalid-token",
    19021: "bad-signature",
    19022: "ip-not-allowed",
    19024: "keyword-not-found",
}
# Of those, the ones every request of the channel gets until its configuration is fixed.
CHANNEL_REFUSALS = {19001, 19021, 19022, 19024}


def feishu_sign(secret: str, timestamp: int) -> str:
    """HMAC-SHA256 keyed with ``f"{timestamp}\\n{secret}"`` over an EMPTY message, Base64 (§5.4)."""
    key = f"{timestamp}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


class FeishuChannel(HttpChannel):
    def render(self, facts: JobFacts) -> Body:
        return render.message_body(facts, self.config.body_format)

    def render_digest(self, digest: DigestFacts) -> Body:
        return render.digest_body(digest, self.config.body_format)

    def signed(self, body: Body) -> Body:
        if self.config.secret is None:
            return body
        timestamp = int(self._clock())
        sign = feishu_sign(self.config.secret.get_secret_value(), timestamp)
        return {"timestamp": str(timestamp), "sign": sign, **body}

    async def post(self, body: Body) -> None:
        content = orjson.dumps(self.signed(body))
        response = await post_bytes(
            self._client,
            self.config.url.get_secret_value(),
            content,
            headers={"Content-Type": "application/json"},
            timeout_seconds=self.config.timeout_seconds,
        )
        answer = json_of(response)
        code = answer.get("code", answer.get("StatusCode"))
        if code == 0:
            return
        message = str(answer.get("msg", answer.get("StatusMessage", "")))[:200]
        if code == RATE_LIMITED:
            raise RateLimitedError("feishu-rate-limited", message)
        if isinstance(code, int) and code in PERMANENT_CODES:
            error = ChannelRefusedError if code in CHANNEL_REFUSALS else PermanentSendError
            raise error(f"feishu-{PERMANENT_CODES[code]}", f"{code} {message}")
        raise PermanentSendError("feishu-error", f"{code} {message}")
