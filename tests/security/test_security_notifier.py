"""V4: text from a cluster is data in every chat channel's markup, never a mention or a link.

A job's message, reason and owner annotation are written by whoever can create a job in a
watched cluster. The bodies below are the exact bodies the channels post; each is checked for
the markup that would mention everyone, mention someone Trainwatch did not choose, or link
elsewhere than the dashboard.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import pytest

from trainwatch_common import JobRef, JobStatusEvent, Phase, job_event_id
from trainwatch_notifier.channels.dingtalk import DingTalkChannel
from trainwatch_notifier.channels.wecom import WeComChannel
from trainwatch_notifier.render import feishu, slack
from trainwatch_notifier.render.facts import DigestFacts, JobFacts, Mention, job_link
from trainwatch_notifier.ruleset import ChannelConfig

DASHBOARD = "https://dash.example.com"
EVIL = "https://evil.example/phish"
# Every markup's mention-everyone and link syntax, as a hostile job would write them.
HOSTILE = (
    f'<at id=all></at> <at user_id="all">all</at> <!channel> <!here> <@U999> <{EVIL}|log in> '
    f"[log in]({EVIL}) ![x]({EVIL}) @all <@all> <font color='red'>x</font> {EVIL}"
)


def hostile_facts() -> JobFacts:
    event = JobStatusEvent(
        event_id=job_event_id("alpha", "uid-1", 3),
        change="transition",
        sequence=3,
        epoch=1,
        job=JobRef(
            cluster_id="alpha",
            api_version="batch/v1",
            kind="Job",
            kind_key="job",
            namespace="team-a",
            name="train-1",
            uid="uid-1",
            resource_version="42",
        ),
        phase=Phase.FAILED,
        terminal=True,
        reason=f"Backoff {HOSTILE}",
        message=f"failed: {HOSTILE}",
        observed_at=datetime(2026, 12, 1, 10, 0, tzinfo=UTC),
        owner=HOSTILE,
    )
    # An owner not in the rules' table: dispatch mentions the annotation's text by name only.
    return JobFacts(
        event=event,
        cluster_name="Alpha",
        link=job_link(DASHBOARD, event),
        language="en",
        mention=Mention(HOSTILE, None),
    )


def digest_of(facts: JobFacts) -> DigestFacts:
    return DigestFacts(items=[facts, facts], seconds=10, language="en", dashboard_url=DASHBOARD, max_listed=5)


def _strings(body: Any) -> list[str]:
    if isinstance(body, dict):
        return [s for value in body.values() for s in _strings(value)]
    if isinstance(body, list):
        return [s for value in body for s in _strings(value)]
    return [body] if isinstance(body, str) else []


FORBIDDEN = (
    "<at",  # Feishu mention tag (cards and text messages)
    "<!channel>",
    "<!here>",
    "<@",  # Slack and WeCom user mention
    f"<{EVIL}",  # Slack link
    f"]({EVIL}",  # markdown link and image
    "[log in]",
    "@all",  # DingTalk/WeCom/Feishu-text mention of everyone
    "<font",
    EVIL,  # a bare link that a renderer would turn into a link
)


# Slack's mrkdwn has no [text](url) links and mentions only through <…>: brackets may stay.
SLACK_FORBIDDEN = tuple(f for f in FORBIDDEN if f not in ("[log in]", "@all"))


def assert_inert(body: Any, forbidden: tuple[str, ...] = FORBIDDEN) -> None:
    text = "\n".join(_strings(body))
    assert "Backoff" in text  # the reason is there, only made inert
    for markup in forbidden:
        assert markup not in text, f"{markup!r} arrived as written in {text!r}"
    assert DASHBOARD in orjson.dumps(body).decode()  # Trainwatch's own link is intact


def _channel(kind: type[DingTalkChannel] | type[WeComChannel], channel_type: str, body_format: str) -> Any:
    config = ChannelConfig(type=channel_type, url="https://chat.example/hook", format=body_format)  # type: ignore[arg-type]
    return kind("chat", config, httpx.AsyncClient())


@pytest.mark.parametrize("body_format", ["card", "text"])
def test_v4_feishu_mentions_and_links_from_a_job_are_inert(body_format: str) -> None:
    facts = hostile_facts()
    assert_inert(feishu.message_body(facts, body_format))
    assert_inert(feishu.digest_body(digest_of(facts), body_format))


def test_v4_slack_mentions_and_links_from_a_job_are_inert() -> None:
    facts = hostile_facts()
    assert_inert(slack.message_body(facts), SLACK_FORBIDDEN)
    assert_inert(slack.digest_body(digest_of(facts)), SLACK_FORBIDDEN)


@pytest.mark.parametrize(
    ("kind", "channel_type", "body_format"),
    [
        (DingTalkChannel, "dingtalk", "markdown"),
        (DingTalkChannel, "dingtalk", "text"),
        (WeComChannel, "wecom", "markdown"),
        (WeComChannel, "wecom", "text"),
    ],
)
async def test_v4_dingtalk_and_wecom_mentions_and_links_from_a_job_are_inert(
    kind: type[DingTalkChannel] | type[WeComChannel], channel_type: str, body_format: str
) -> None:
    channel = _channel(kind, channel_type, body_format)
    facts = hostile_facts()
    body = channel.render(facts)
    assert_inert(body)
    assert_inert(channel.render_digest(digest_of(facts)))
    if channel_type == "dingtalk":  # who is notified is only what Trainwatch put in "at"
        assert body["at"] == {"atMobiles": [], "atUserIds": [], "isAtAll": False}
    await channel._client.aclose()


def test_v4_mentions_trainwatch_chose_still_work() -> None:
    facts = hostile_facts()
    chosen = JobFacts(
        event=facts.event,
        cluster_name="Alpha",
        link=facts.link,
        language="en",
        mention=Mention("Alice", "ou_a"),
    )
    card = feishu.message_body(chosen, "card")["card"]["body"]["elements"][0]["content"]
    assert "<at id=ou_a></at>" in card
    assert (
        "<@U_ALICE>"
        in slack.message_body(
            JobFacts(
                event=facts.event,
                cluster_name="Alpha",
                link=facts.link,
                language="en",
                mention=Mention("Alice", "U_ALICE"),
            )
        )["blocks"][1]["text"]["text"]
    )
