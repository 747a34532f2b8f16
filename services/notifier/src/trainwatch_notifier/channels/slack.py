"""Slack incoming webhook: success is HTTP 200 with the plain-text body ``ok`` (§6)."""

from __future__ import annotations

import orjson

from trainwatch_notifier.channels.base import Body, HttpChannel, PermanentSendError, post_bytes
from trainwatch_notifier.render import slack as render
from trainwatch_notifier.render.facts import DigestFacts, JobFacts


class SlackChannel(HttpChannel):
    def render(self, facts: JobFacts) -> Body:
        return render.message_body(facts)

    def render_digest(self, digest: DigestFacts) -> Body:
        return render.digest_body(digest)

    async def post(self, body: Body) -> None:
        # 429 (with Retry-After) and 5xx are retried and other 4xx (invalid_payload, no_service...)
        # are configuration errors, by post_bytes.
        response = await post_bytes(
            self._client,
            self.config.url.get_secret_value(),
            orjson.dumps(body),
            headers={"Content-Type": "application/json"},
            timeout_seconds=self.config.timeout_seconds,
        )
        if response.text.strip() != "ok":
            raise PermanentSendError("slack-error", response.text[:200])
