"""DingTalk custom robot: markdown or text; "加签" signing in the URL query (§6)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from urllib.parse import quote_plus

import orjson

from trainwatch_notifier.channels.base import (
    Body,
    ChannelRefusedError,
    HttpChannel,
    PermanentSendError,
    RateLimitedError,
    post_errcode_json,
)
from trainwatch_notifier.render import text
from trainwatch_notifier.render.facts import DigestFacts, JobFacts, Mention, fit_digest, fit_job

MAX_BODY_BYTES = 20_000
SEND_TOO_FAST = 130101
THROTTLED_RETRY_AFTER = 60.0  # the robot is throttled for 10 minutes; probe once a minute


def dingtalk_sign(secret: str, timestamp_ms: int) -> str:
    """HMAC-SHA256 keyed with the SECRET over ``f"{timestamp}\\n{secret}"``, Base64, URL-encoded."""
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return quote_plus(base64.b64encode(digest).decode())


def _at(mentions: list[Mention]) -> tuple[Body, str]:
    mobiles = [m.mobile for m in mentions if m.mobile]
    user_ids = [m.user_id for m in mentions if m.user_id]
    # @<mobile>/@<userId> in the text is what makes the mention render.
    rendered = " ".join(f"@{m.mobile or m.user_id or m.name}" for m in mentions)
    return {"atMobiles": mobiles, "atUserIds": user_ids, "isAtAll": False}, rendered


class DingTalkChannel(HttpChannel):
    def _body(self, title: str, markdown: str, plain: str, at: Body) -> Body:
        if self.config.body_format == "text":
            return {"msgtype": "text", "text": {"content": plain}, "at": at}
        return {"msgtype": "markdown", "markdown": {"title": title, "text": markdown}, "at": at}

    def render(self, facts: JobFacts) -> Body:
        fitted = fit_job(lambda trimmed: len(orjson.dumps(self._job_body(trimmed))), facts, MAX_BODY_BYTES)
        return self._job_body(fitted)

    def _job_body(self, facts: JobFacts) -> Body:
        at, mention = _at([facts.mention] if facts.mention else [])
        title = f"{facts.icon} {facts.title()}"
        message = facts.event.message or ""
        markdown = f"#### {title}\n\n" + text.markdown(facts, message, mention=mention).replace("\n", "\n\n")
        return self._body(title, markdown, text.plain(facts, message, mention=mention), at)

    def render_digest(self, digest: DigestFacts) -> Body:
        fitted = fit_digest(
            lambda trimmed: len(orjson.dumps(self._digest_body(trimmed))), digest, MAX_BODY_BYTES
        )
        return self._digest_body(fitted)

    def _digest_body(self, digest: DigestFacts) -> Body:
        # A digest @-mentions nobody: a burst of 500 jobs must not ping each of their owners.
        markdown = f"#### {digest.title()}\n\n" + text.digest_markdown(digest).replace("\n", "\n\n")
        return self._body(digest.title(), markdown, text.digest_plain(digest), _at([])[0])

    def signed_url(self) -> str:
        url = self.config.url.get_secret_value()
        if self.config.secret is None:
            return url
        timestamp = int(self._clock() * 1000)
        sign = dingtalk_sign(self.config.secret.get_secret_value(), timestamp)
        return f"{url}{'&' if '?' in url else '?'}timestamp={timestamp}&sign={sign}"

    async def post(self, body: Body) -> None:
        code, message = await post_errcode_json(
            self._client,
            self.signed_url(),
            body,
            timeout_seconds=self.config.timeout_seconds,
        )
        if code == 0:
            return
        if code == SEND_TOO_FAST:
            raise RateLimitedError("dingtalk-rate-limited", message, retry_after=THROTTLED_RETRY_AFTER)
        if code == 310000:
            raise ChannelRefusedError("dingtalk-security-check", message)  # signature, keyword or IP
        raise PermanentSendError("dingtalk-error", f"{code} {message}")
