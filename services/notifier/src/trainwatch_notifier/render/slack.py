"""Slack incoming-webhook bodies: ``text`` as the notification fallback, Block Kit for display."""

from __future__ import annotations

from typing import Any

from trainwatch_notifier.render import text
from trainwatch_notifier.render.facts import DigestFacts, JobFacts, Mention, fit_digest, fit_job

SECTION_MAX_CHARS = 3000  # Block Kit section text limit; the fallback text stays under 4,000

Body = dict[str, Any]


def _mention(mention: Mention | None) -> str:
    if mention is None:
        return ""
    return f"<@{mention.user_id}>" if mention.user_id else f"@{mention.name}"


def _blocks(
    title: str, section: str, link: str, button: str, silence: tuple[str, str] | None = None
) -> list[dict[str, Any]]:
    buttons = [{"type": "button", "text": {"type": "plain_text", "text": button}, "url": link}]
    if silence is not None:
        buttons.append(
            {"type": "button", "text": {"type": "plain_text", "text": silence[0]}, "url": silence[1]}
        )
    return [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150], "emoji": True}},
        {"type": "section", "text": {"type": "mrkdwn", "text": section}},
        {"type": "actions", "elements": buttons},
    ]


def _section(facts: JobFacts) -> str:
    message = facts.event.message or ""
    return text.markdown(
        facts, message, markup=text.SLACK_MRKDWN, mention=_mention(facts.mention), link=False
    )


def message_body(facts: JobFacts) -> Body:
    fitted = fit_job(lambda trimmed: len(_section(trimmed)), facts, SECTION_MAX_CHARS)
    title = f"{fitted.icon} {fitted.title()}"
    fallback = f"{title} {_mention(fitted.mention)}".strip()
    silence = (fitted.label("silence"), fitted.silence_link) if fitted.silence_link else None
    blocks = _blocks(title, _section(fitted), fitted.link, fitted.label("open"), silence)
    return {"text": fallback, "blocks": blocks}


def _digest_section(digest: DigestFacts) -> str:
    return text.digest_markdown(digest, markup=text.SLACK_MRKDWN)  # mentioning nobody


def digest_body(digest: DigestFacts) -> Body:
    fitted = fit_digest(lambda trimmed: len(_digest_section(trimmed)), digest, SECTION_MAX_CHARS)
    title = fitted.title()
    return {
        "text": title,
        "blocks": _blocks(title, _digest_section(fitted), fitted.dashboard_url, fitted.label("open")),
    }
