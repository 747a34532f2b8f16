"""WeCom (企业微信) group robot: markdown or text; the key in the URL is the only secret (§6)."""

from __future__ import annotations

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

MARKDOWN_MAX_BYTES = 4096
TEXT_MAX_BYTES = 2048
FREQ_OUT_OF_LIMIT = 45009


def _size(value: str) -> int:
    return len(value.encode())


class WeComChannel(HttpChannel):
    def _body(self, markdown: str, plain: str, mentions: list[Mention]) -> Body:
        if self.config.body_format == "text":
            users = [m.user_id for m in mentions if m.user_id]
            mobiles = [m.mobile for m in mentions if m.mobile]
            return {
                "msgtype": "text",
                "text": {"content": plain, "mentioned_list": users, "mentioned_mobile_list": mobiles},
            }
        return {"msgtype": "markdown", "markdown": {"content": markdown}}

    def _limit(self) -> int:
        return TEXT_MAX_BYTES if self.config.body_format == "text" else MARKDOWN_MAX_BYTES

    def _content_size(self, body: Body) -> int:
        """The limits are on the content's UTF-8 bytes (the mention lists of a text are apart)."""
        return _size(body[body["msgtype"]]["content"])

    def render(self, facts: JobFacts) -> Body:
        fitted = fit_job(lambda trimmed: self._content_size(self._job_body(trimmed)), facts, self._limit())
        return self._job_body(fitted)

    def _job_body(self, facts: JobFacts) -> Body:
        mentions = [facts.mention] if facts.mention else []
        markdown_mention = " ".join(f"<@{m.user_id}>" if m.user_id else f"@{m.name}" for m in mentions)
        message = facts.event.message or ""
        markdown = f"**{facts.icon} {facts.title()}**\n" + text.markdown(
            facts, message, mention=markdown_mention
        )
        return self._body(markdown, text.plain(facts, message), mentions)

    def render_digest(self, digest: DigestFacts) -> Body:
        fitted = fit_digest(
            lambda trimmed: self._content_size(self._digest_body(trimmed)), digest, self._limit()
        )
        return self._digest_body(fitted)

    def _digest_body(self, digest: DigestFacts) -> Body:
        # A digest @-mentions nobody: a burst of 500 jobs must not ping each of their owners.
        markdown = f"**{digest.title()}**\n" + text.digest_markdown(digest)
        return self._body(markdown, text.digest_plain(digest), [])

    async def post(self, body: Body) -> None:
        code, message = await post_errcode_json(
            self._client,
            self.config.url.get_secret_value(),
            body,
            timeout_seconds=self.config.timeout_seconds,
        )
        if code == 0:
            return
        if code == FREQ_OUT_OF_LIMIT:
            raise RateLimitedError("wecom-rate-limited", message)
        if code == 93000:
            raise ChannelRefusedError("wecom-invalid-key", message)
        raise PermanentSendError("wecom-error", f"{code} {message}")
