"""Markdown and plain text shared by the channels that take them (Feishu cards, DingTalk, WeCom).

Text from a cluster (a job's message, reason, names, its owner annotation) is data, never markup:
every such value goes through the channel's ``escape`` before it is placed in a body, so only
Trainwatch decides who is mentioned (``<at id=all>``, ``<!channel>``, ``<@U1>``, ``@all``) and what
links (``[x](https://…)``, ``<https://…|x>``, a bare URL).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trainwatch_notifier.render.facts import DigestFacts, JobFacts, neutralise


def slack_escape(value: str) -> str:
    """Slack's own escaping for mrkdwn (&, <, >): no <!channel>, <@U..> or <url|text> survives."""
    escaped = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return neutralise(escaped, chars="")  # and no bare URL that Slack would link


def feishu_markdown_escape(value: str) -> str:
    """Feishu card markdown: < and > as the entities its docs give (no <at>, <font>, <a> tags),
    brackets and @ made inert (no [x](url)), bare URLs broken (see facts.neutralise)."""
    return neutralise(value.replace("<", "&lt;").replace(">", "&gt;"), chars="[]@")


@dataclass(frozen=True, slots=True)
class Markup:
    """How one channel writes bold and links, and escapes a value taken from a cluster."""

    bold_open: str = "**"
    bold_close: str = "**"
    link_template: str = "[{text}]({url})"
    escape: Callable[[str], str] = neutralise

    def bold(self, text: str) -> str:
        return f"{self.bold_open}{text}{self.bold_close}"

    def link(self, text: str, url: str) -> str:
        """A link of ours (the dashboard's URL); its text may hold a job's name, so it is escaped."""
        return self.link_template.format(text=self.escape(text), url=url)


# DingTalk and WeCom markdown: neither documents an escape, so special characters are made inert.
MARKDOWN = Markup()
FEISHU_MARKDOWN = Markup(escape=feishu_markdown_escape)
SLACK_MRKDWN = Markup(bold_open="*", bold_close="*", link_template="<{url}|{text}>", escape=slack_escape)


def markdown(
    facts: JobFacts, message: str | None, *, markup: Markup = MARKDOWN, mention: str = "", link: bool = True
) -> str:
    """The body of one notification: a field per line, the link last (unless a button carries
    it), then the mention."""
    lines = [
        f"{markup.bold(label)}: {markup.escape(value)}" for label, value in facts.fields(message=message)
    ]
    if link:
        lines.append(markup.link(facts.label("open"), facts.link))
    if mention:
        lines.append(mention)
    return "\n".join(lines)


def plain(
    facts: JobFacts, message: str | None, *, mention: str = "", escape: Callable[[str], str] = neutralise
) -> str:
    """Text bodies are markup too (Feishu reads <at user_id=…> in them, DingTalk @-mentions)."""
    lines = [f"{facts.icon} {facts.title()}"]  # kind, namespace and name: Kubernetes-validated
    lines += [f"{label}: {escape(value)}" for label, value in facts.fields(message=message)]
    lines.append(f"{facts.label('open')}: {facts.link}")
    if mention:
        lines.append(mention)
    return "\n".join(lines)


def digest_markdown(digest: DigestFacts, *, markup: Markup = MARKDOWN, mentions: str = "") -> str:
    lines = [markup.escape(line) for line in digest.summary()]
    lines.append("")
    for item in digest.listed():
        job = item.event.job
        reason = f" — {markup.escape(digest.reason(item))}" if item.event.reason else ""
        name = markup.link(f"{job.namespace}/{job.name}", item.link)
        lines.append(f"- {item.icon} {name} ({markup.escape(job.kind)}) {item.phase_name}{reason}")
    more = digest.more()
    if more:
        lines.append(more)
    lines.append(markup.link(digest.label("open"), digest.dashboard_url))
    if mentions:
        lines.append(mentions)
    return "\n".join(lines)


def digest_plain(
    digest: DigestFacts, *, mentions: str = "", escape: Callable[[str], str] = neutralise
) -> str:
    lines = [digest.title(), *(escape(line) for line in digest.summary()), ""]
    for item in digest.listed():
        job = item.event.job
        reason = f" — {escape(digest.reason(item))}" if item.event.reason else ""
        listed = escape(f"{job.namespace}/{job.name} ({job.kind})")
        lines.append(f"- {item.icon} {listed} {item.phase_name}{reason} {item.link}")
    more = digest.more()
    if more:
        lines.append(more)
    lines.append(f"{digest.label('open')}: {digest.dashboard_url}")
    if mentions:
        lines.append(mentions)
    return "\n".join(lines)
