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


def _no_fence(line: str) -> str:
    """A log line cannot close the code block it is shown in: backticks become a look-alike."""
    return line.replace("`", "\u02cb")


def fenced_block(escape: Callable[[str], str]) -> Callable[[list[str]], str]:
    """A code block (Feishu card markdown, Slack mrkdwn): the log tail shown as it was written."""
    return lambda lines: "```\n" + "\n".join(_no_fence(escape(line)) for line in lines) + "\n```"


def quoted_block(lines: list[str]) -> str:
    """DingTalk and WeCom markdown document no code block: each log line quoted, made inert."""
    return "\n".join(f"> {neutralise(line)}" for line in lines)


@dataclass(frozen=True, slots=True)
class Markup:
    """How one channel writes bold and links, and escapes a value taken from a cluster."""

    bold_open: str = "**"
    bold_close: str = "**"
    link_template: str = "[{text}]({url})"
    escape: Callable[[str], str] = neutralise
    log_block: Callable[[list[str]], str] = quoted_block

    def bold(self, text: str) -> str:
        return f"{self.bold_open}{text}{self.bold_close}"

    def link(self, text: str, url: str) -> str:
        """A link of ours (the dashboard's URL); its text may hold a job's name, so it is escaped."""
        return self.link_template.format(text=self.escape(text), url=url)


def _inline(escape: Callable[[str], str]) -> Callable[[str], str]:
    """A value in a markdown line: escaped, and no backtick of it opens a code span or block."""
    return lambda value: _no_fence(escape(value))


# DingTalk and WeCom markdown: neither documents an escape, so special characters are made inert.
MARKDOWN = Markup(escape=_inline(neutralise))
# In a Feishu code block an entity would show as "&lt;": the full-width look-alikes read the same.
FEISHU_MARKDOWN = Markup(escape=_inline(feishu_markdown_escape), log_block=fenced_block(neutralise))
SLACK_MRKDWN = Markup(
    bold_open="*", bold_close="*", link_template="<{url}|{text}>", escape=_inline(slack_escape),
    log_block=fenced_block(slack_escape),
)  # fmt: skip


def markdown(
    facts: JobFacts, message: str | None, *, markup: Markup = MARKDOWN, mention: str = "", link: bool = True
) -> str:
    """The body of one notification: the reason line first when the event says why, a field per
    line, the Warning events and the log tail, the link last (unless a button carries it), then
    the mention."""
    reason = facts.reason_line()
    lines = [markup.escape(reason)] if reason else []
    lines += [
        f"{markup.bold(label)}{facts.colon}{markup.escape(value)}"
        for label, value in facts.fields(message=message)
    ]
    warnings = facts.warnings()
    if warnings:
        lines.append(markup.bold(facts.diagnosis_label("warnings")))
        lines += [f"- {markup.escape(w)}" for w in warnings]
    log = facts.log()
    if log:
        lines.append(markup.bold(markup.escape(facts.log_title())))
        lines.append(markup.log_block(log))
    if link:
        lines.append(markup.link(facts.label("open"), facts.link))
        if facts.silence_link:
            lines.append(markup.link(facts.label("silence"), facts.silence_link))
    if mention:
        lines.append(mention)
    return "\n".join(lines)


def plain(
    facts: JobFacts, message: str | None, *, mention: str = "", escape: Callable[[str], str] = neutralise
) -> str:
    """Text bodies are markup too (Feishu reads <at user_id=…> in them, DingTalk @-mentions)."""
    lines = [f"{facts.icon} {facts.title()}"]  # kind, namespace and name: Kubernetes-validated
    reason = facts.reason_line()
    if reason:
        lines.append(escape(reason))
    lines += [f"{label}{facts.colon}{escape(value)}" for label, value in facts.fields(message=message)]
    warnings = facts.warnings()
    if warnings:
        lines.append(facts.diagnosis_label("warnings") + facts.colon.rstrip())
        lines += [f"- {escape(w)}" for w in warnings]
    log = facts.log()
    if log:
        lines.append(escape(facts.log_title()) + facts.colon.rstrip())
        lines += [f"  {escape(line)}" for line in log]
    lines.append(f"{facts.label('open')}{facts.colon}{facts.link}")
    if facts.silence_link:
        lines.append(f"{facts.label('silence')}{facts.colon}{facts.silence_link}")
    if mention:
        lines.append(mention)
    return "\n".join(lines)


def digest_markdown(digest: DigestFacts, *, markup: Markup = MARKDOWN) -> str:
    lines = [markup.escape(line) for line in digest.summary()]
    lines.append("")
    for item in digest.listed():
        job = item.event.job
        reason = f" — {markup.escape(digest.reason(item))}" if digest.reason(item) else ""
        name = markup.link(f"{job.namespace}/{job.name}", item.link)
        lines.append(f"- {item.icon} {name} ({markup.escape(job.kind)}) {item.phase_name}{reason}")
    more = digest.more()
    if more:
        lines.append(more)
    lines.append(markup.link(digest.label("open"), digest.dashboard_url))
    return "\n".join(lines)


def digest_plain(digest: DigestFacts, *, escape: Callable[[str], str] = neutralise) -> str:
    """A digest @-mentions nobody: a burst of 500 jobs must not ping each of their owners."""
    lines = [digest.title(), *(escape(line) for line in digest.summary()), ""]
    for item in digest.listed():
        job = item.event.job
        reason = f" — {escape(digest.reason(item))}" if digest.reason(item) else ""
        listed = escape(f"{job.namespace}/{job.name} ({job.kind})")
        lines.append(f"- {item.icon} {listed} {item.phase_name}{reason} {item.link}")
    more = digest.more()
    if more:
        lines.append(more)
    lines.append(f"{digest.label('open')}{digest.colon}{digest.dashboard_url}")
    return "\n".join(lines)
