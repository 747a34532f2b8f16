"""Feishu/Lark custom-bot bodies (reference §5.2, §5.3): text, post (rich text) and card 2.0.

The signature fields (``timestamp``, ``sign``) are added by the channel at send time.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson

from trainwatch_notifier.render import text
from trainwatch_notifier.render.facts import (
    PHASE_COLOURS,
    DigestFacts,
    JobFacts,
    Mention,
    fit_digest,
    fit_job,
)

MAX_BODY_BYTES = 20 * 1024
SIGNATURE_ROOM = 128  # "timestamp" and "sign" are added after rendering

Body = dict[str, Any]


def _size(body: Body) -> int:
    return len(orjson.dumps(body)) + SIGNATURE_ROOM


def _text_mention(mention: Mention | None) -> str:
    if mention is None:
        return ""
    if mention.user_id is None:
        return f"@{mention.name}"
    return f'<at user_id="{mention.user_id}">{mention.name}</at>'


def _card_mentions(mentions: list[Mention]) -> str:
    return " ".join(f"<at id={m.user_id}></at>" if m.user_id else f"@{m.name}" for m in mentions)


def _post_language(facts_language: str) -> str:
    return "zh_cn" if facts_language == "zh-CN" else "en_us"


def _button(text: str, link: str, kind: str) -> dict[str, Any]:
    return {
        "tag": "button",
        "text": {"tag": "plain_text", "content": text},
        "type": kind,
        "behaviors": [{"type": "open_url", "default_url": link}],
    }


def _card(
    title: str,
    colour: str,
    markdown: str,
    link: str,
    button: str,
    silence: tuple[str, str] | None = None,
    *,
    body_format: str = "card",
) -> Body:
    """Card JSON 2.0, or the 1.0 form for ``card-v1`` (clients and tenants that lag behind)."""
    links = [(button, link, "primary")]
    if silence is not None:  # a plain URL button: custom bots have no card callbacks
        links.append((silence[0], silence[1], "default"))
    header = {"title": {"tag": "plain_text", "content": title}, "template": colour}
    if body_format == "card-v1":
        actions = [
            {"tag": "button", "text": {"tag": "plain_text", "content": text}, "type": kind, "url": url}
            for text, url, kind in links
        ]
        elements = [{"tag": "div", "text": {"tag": "lark_md", "content": markdown}}]
        card = {
            "config": {"wide_screen_mode": True, "update_multi": True},
            "header": header,
            "elements": [*elements, {"tag": "action", "actions": actions}],
        }
        return {"msg_type": "interactive", "card": card}
    buttons = [_button(text, url, kind) for text, url, kind in links]
    return {
        "msg_type": "interactive",
        "card": {
            "schema": "2.0",
            "config": {"update_multi": True},
            "header": header,
            "body": {"elements": [{"tag": "markdown", "content": markdown}, *buttons]},
        },
    }


def _render_one(facts: JobFacts, body_format: str) -> Body:
    message = facts.event.message or ""
    if body_format == "text":
        content = text.plain(facts, message, mention=_text_mention(facts.mention))
        return {"msg_type": "text", "content": {"text": content}}
    if body_format == "post":
        # Text nodes are plain text (un_escape false): a cluster's value is shown, never interpreted.
        reason = facts.reason_line()
        lines = [reason] if reason else []
        lines += [f"{label}{facts.colon}{value}" for label, value in facts.fields(message=message)]
        if facts.warnings():
            warnings_title = facts.diagnosis_label("warnings") + facts.colon.rstrip()
            lines += [warnings_title, *(f"- {w}" for w in facts.warnings())]
        if facts.log():
            lines += [facts.log_title() + facts.colon.rstrip(), *(f"  {line}" for line in facts.log())]
        paragraphs: list[list[dict[str, Any]]] = [[{"tag": "text", "text": line}] for line in lines]
        paragraphs.append([{"tag": "a", "text": facts.label("open"), "href": facts.link}])
        if facts.silence_link:
            paragraphs.append([{"tag": "a", "text": facts.label("silence"), "href": facts.silence_link}])
        if facts.mention and facts.mention.user_id:
            paragraphs.append(
                [{"tag": "at", "user_id": facts.mention.user_id, "user_name": facts.mention.name}]
            )
        post = {
            _post_language(facts.language): {"title": f"{facts.icon} {facts.title()}", "content": paragraphs}
        }
        return {"msg_type": "post", "content": {"post": post}}
    mention = _card_mentions([facts.mention]) if facts.mention else ""
    markdown = text.markdown(  # the button carries the link
        facts, message, markup=text.FEISHU_MARKDOWN, mention=mention, link=False
    )
    silence = (facts.label("silence"), facts.silence_link) if facts.silence_link else None
    title = f"{facts.icon} {facts.title()}"
    return _card(
        title, facts.colour, markdown, facts.link, facts.label("open"), silence, body_format=body_format
    )


def message_body(facts: JobFacts, body_format: str, *, max_bytes: int = MAX_BODY_BYTES) -> Body:
    """One job's notification, its free text trimmed so the signed body stays within the limit."""
    fitted = fit_job(lambda trimmed: _size(_render_one(trimmed, body_format)), facts, max_bytes)
    return _render_one(fitted, body_format)


def digest_body(digest: DigestFacts, body_format: str, *, max_bytes: int = MAX_BODY_BYTES) -> Body:
    """A burst in one message: as many jobs listed as fit the signed body's limit, the rest counted."""
    fitted = fit_digest(lambda trimmed: _size(_digest(trimmed, body_format)), digest, max_bytes)
    return _digest(fitted, body_format)


def _digest(digest: DigestFacts, body_format: str) -> Body:
    phases = Counter(item.event.phase.value for item in digest.items)
    colour = "red" if "Failed" in phases else PHASE_COLOURS[phases.most_common(1)[0][0]]
    # A digest @-mentions nobody: a burst of 500 jobs must not ping each of their owners.
    if body_format == "text":
        body: Body = {"msg_type": "text", "content": {"text": text.digest_plain(digest)}}
    elif body_format == "post":
        paragraphs: list[list[dict[str, Any]]] = [
            [{"tag": "text", "text": line}] for line in digest.summary()
        ]
        for item in digest.listed():
            job = item.event.job
            reason = f" — {digest.reason(item)}" if digest.reason(item) else ""
            paragraphs.append(
                [
                    {"tag": "text", "text": f"{item.icon} "},
                    {"tag": "a", "text": f"{job.namespace}/{job.name}", "href": item.link},
                    {"tag": "text", "text": f" ({job.kind}) {item.phase_name}{reason}"},
                ]
            )
        more = digest.more()
        if more:
            paragraphs.append([{"tag": "text", "text": more}])
        paragraphs.append([{"tag": "a", "text": digest.label("open"), "href": digest.dashboard_url}])
        post = {_post_language(digest.language): {"title": digest.title(), "content": paragraphs}}
        body = {"msg_type": "post", "content": {"post": post}}
    else:
        markdown = text.digest_markdown(digest, markup=text.FEISHU_MARKDOWN)
        body = _card(
            digest.title(),
            colour,
            markdown,
            digest.dashboard_url,
            digest.label("open"),
            body_format=body_format,
        )
    return body
