"""Slack incoming-webhook bodies: ``text`` as the notification fallback, Block Kit for display."""

from __future__ import annotations

from typing import Any

from trainwatch_notifier.render import text
from trainwatch_notifier.render.facts import DigestFacts, JobFacts, Mention, fit

SECTION_MAX_CHARS = 3000  # Block Kit section text limit; the fallback text stays under 4,000

Body = dict[str, Any]


def _mention(mention: Mention | None) -> str:
    if mention is None:
        return ""
    return f"<@{mention.user_id}>" if mention.user_id else f"@{mention.name}"


def _blocks(title: str, section: str, link: str, button: str) -> list[dict[str, Any]]:
    return [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150], "emoji": True}},
        {"type": "section", "text": {"type": "mrkdwn", "text": section}},
        {
            "type": "actions",
            "elements": [{"type": "button", "text": {"type": "plain_text", "text": button}, "url": link}],
        },
    ]


def message_body(facts: JobFacts) -> Body:
    mention = _mention(facts.mention)

    def section(message: str) -> str:
        return text.markdown(facts, message, markup=text.SLACK_MRKDWN, mention=mention, link=False)

    message = fit(lambda m: len(section(m)), facts.event.message or "", SECTION_MAX_CHARS)
    title = f"{facts.icon} {facts.title()}"
    fallback = f"{title} {mention}".strip()
    return {"text": fallback, "blocks": _blocks(title, section(message), facts.link, facts.label("open"))}


def digest_body(digest: DigestFacts) -> Body:
    mentions = " ".join(_mention(m) for m in digest.mentions())
    section = text.digest_markdown(digest, markup=text.SLACK_MRKDWN, mentions=mentions)
    if len(section) > SECTION_MAX_CHARS:
        raise ValueError("digest too long for a Slack section; lower digest.max_listed")
    title = digest.title()
    return {"text": title, "blocks": _blocks(title, section, digest.dashboard_url, digest.label("open"))}
