"""Markdown and plain text shared by the channels that take them (Feishu cards, DingTalk, WeCom)."""

from __future__ import annotations

from dataclasses import dataclass

from trainwatch_notifier.render.facts import DigestFacts, JobFacts


@dataclass(frozen=True, slots=True)
class Markup:
    """How one channel writes bold and links."""

    bold_open: str = "**"
    bold_close: str = "**"
    link_template: str = "[{text}]({url})"

    def bold(self, text: str) -> str:
        return f"{self.bold_open}{text}{self.bold_close}"

    def link(self, text: str, url: str) -> str:
        return self.link_template.format(text=text, url=url)


MARKDOWN = Markup()
SLACK_MRKDWN = Markup(bold_open="*", bold_close="*", link_template="<{url}|{text}>")


def markdown(
    facts: JobFacts, message: str | None, *, markup: Markup = MARKDOWN, mention: str = "", link: bool = True
) -> str:
    """The body of one notification: a field per line, the link last (unless a button carries
    it), then the mention."""
    lines = [f"{markup.bold(label)}: {value}" for label, value in facts.fields(message=message)]
    if link:
        lines.append(markup.link(facts.label("open"), facts.link))
    if mention:
        lines.append(mention)
    return "\n".join(lines)


def plain(facts: JobFacts, message: str | None, *, mention: str = "") -> str:
    lines = [f"{facts.icon} {facts.title()}"]
    lines += [f"{label}: {value}" for label, value in facts.fields(message=message)]
    lines.append(f"{facts.label('open')}: {facts.link}")
    if mention:
        lines.append(mention)
    return "\n".join(lines)


def digest_markdown(digest: DigestFacts, *, markup: Markup = MARKDOWN, mentions: str = "") -> str:
    lines = list(digest.summary())
    lines.append("")
    for item in digest.listed():
        job = item.event.job
        reason = f" — {digest.reason(item)}" if item.event.reason else ""
        name = markup.link(f"{job.namespace}/{job.name}", item.link)
        lines.append(f"- {item.icon} {name} ({job.kind}) {item.phase_name}{reason}")
    more = digest.more()
    if more:
        lines.append(more)
    lines.append(markup.link(digest.label("open"), digest.dashboard_url))
    if mentions:
        lines.append(mentions)
    return "\n".join(lines)


def digest_plain(digest: DigestFacts, *, mentions: str = "") -> str:
    lines = [digest.title(), *digest.summary(), ""]
    for item in digest.listed():
        job = item.event.job
        reason = f" — {digest.reason(item)}" if item.event.reason else ""
        lines.append(
            f"- {item.icon} {job.namespace}/{job.name} ({job.kind}) {item.phase_name}{reason} {item.link}"
        )
    more = digest.more()
    if more:
        lines.append(more)
    lines.append(f"{digest.label('open')}: {digest.dashboard_url}")
    if mentions:
        lines.append(mentions)
    return "\n".join(lines)
