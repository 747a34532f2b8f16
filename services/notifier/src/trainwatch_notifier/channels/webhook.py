"""Generic webhook: the job event as a CloudEvent (structured JSON), optionally HMAC-signed.

Signature header, when a secret is configured (the scheme of Stripe and others, so receivers
can reject replays)::

    Trainwatch-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>
"""

from __future__ import annotations

import hashlib
import hmac

import orjson

from trainwatch_common import wrap_job_event
from trainwatch_common.events.envelope import CONTENT_TYPE
from trainwatch_notifier.channels.base import Body, HttpChannel, post_bytes
from trainwatch_notifier.render.facts import DigestFacts, JobFacts

SIGNATURE_HEADER = "Trainwatch-Signature"


def webhook_signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


class WebhookChannel(HttpChannel):
    def render(self, facts: JobFacts) -> Body:
        body = wrap_job_event(facts.event).model_dump(mode="json", exclude_none=True)
        # CloudEvents extension attributes: lower-case alphanumerics only.
        body["trainwatchlink"] = facts.link
        if facts.silence_link:
            body["trainwatchsilencelink"] = facts.silence_link
        if facts.mention is not None:
            body["trainwatchowner"] = facts.mention.name
        reason = facts.reason_line()
        if reason is not None:  # the diagnosis itself is in data, for machines; this is the plain line
            body["trainwatchreason"] = reason
        return body

    def render_digest(self, digest: DigestFacts) -> Body:
        raise NotImplementedError("webhook channels never digest (validated in the ruleset)")

    async def post(self, body: Body) -> None:
        content = orjson.dumps(body)
        headers = {"Content-Type": CONTENT_TYPE}
        if self.config.secret is not None:
            headers[SIGNATURE_HEADER] = webhook_signature(
                self.config.secret.get_secret_value(), int(self._clock()), content
            )
        await post_bytes(
            self._client,
            self.config.url.get_secret_value(),
            content,
            headers=headers,
            timeout_seconds=self.config.timeout_seconds,
        )
