"""WeCom (企业微信) group robot: markdown or text; the key in the URL is the only secret (§6)."""

from __future__ import annotations

import orjson

from trainwatch_notifier.channels.base import (
    Body,
    HttpChannel,
    PermanentSendError,
    RetryableSendError,
    json_of,
    post_bytes,
)
from trainwatch_notifier.render import text
from trainwatch_notifier.render.facts import DigestFacts, JobFacts, Mention, fit

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

    def render(self, facts: JobFacts) -> Body:
        mentions = [facts.mention] if facts.mention else []
        markdown_mention = " ".join(f"<@{m.user_id}>" if m.user_id else f"@{m.name}" for m in mentions)
        title = f"**{facts.icon} {facts.title()}**"

        def markdown(message: str) -> str:
            return f"{title}\n" + text.markdown(facts, message, mention=markdown_mention)

        def plain(message: str) -> str:
            return text.plain(facts, message)

        if self.config.body_format == "text":
            message = fit(lambda m: _size(plain(m)), facts.event.message or "", TEXT_MAX_BYTES)
        else:
            message = fit(lambda m: _size(markdown(m)), facts.event.message or "", MARKDOWN_MAX_BYTES)
        return self._body(markdown(message), plain(message), mentions)

    def render_digest(self, digest: DigestFacts) -> Body:
        mentions = digest.mentions()
        markdown_mention = " ".join(f"<@{m.user_id}>" for m in mentions if m.user_id)
        markdown = f"**{digest.title()}**\n" + text.digest_markdown(digest, mentions=markdown_mention)
        plain = text.digest_plain(digest)
        limit = TEXT_MAX_BYTES if self.config.body_format == "text" else MARKDOWN_MAX_BYTES
        if _size(plain if self.config.body_format == "text" else markdown) > limit:
            raise ValueError("digest too long for WeCom; lower digest.max_listed")
        return self._body(markdown, plain, mentions)

    async def post(self, body: Body) -> None:
        response = await post_bytes(
            self._client,
            self.config.url.get_secret_value(),
            orjson.dumps(body),
            headers={"Content-Type": "application/json; charset=utf-8"},
            timeout_seconds=self.config.timeout_seconds,
        )
        answer = json_of(response)
        code = answer.get("errcode")
        if code == 0:
            return
        message = str(answer.get("errmsg", ""))[:200]
        if code == FREQ_OUT_OF_LIMIT:
            raise RetryableSendError("wecom-rate-limited", message)
        if code == 93000:
            raise PermanentSendError("wecom-invalid-key", message)
        raise PermanentSendError("wecom-error", f"{code} {message}")
