"""Nothing is too big to tell: every channel's documented size limit is met by trimming text and
listing fewer jobs in a digest (with a count of the rest), never by dropping the message."""

from __future__ import annotations

import re
from typing import Any

import httpx
import orjson
import pytest
from notifier_support import make_event

from trainwatch_common import Phase
from trainwatch_notifier.channels import build_channel
from trainwatch_notifier.channels.base import Channel
from trainwatch_notifier.render.facts import DigestFacts, JobFacts, Mention, job_link
from trainwatch_notifier.ruleset import ChannelConfig

# (channel type, format): the documented limit (reference §5.6, §6) and how the body is measured
FEISHU_BYTES = 20 * 1024
SIGNATURE = {"timestamp": "1700000000", "sign": "x" * 44}  # added at send time, inside the limit


def measure(channel_type: str, body_format: str, body: dict[str, Any]) -> list[tuple[int, int]]:
    """(size, limit) pairs, in the unit each limit is documented in."""
    if channel_type == "feishu":
        return [(len(orjson.dumps({**SIGNATURE, **body})), FEISHU_BYTES)]
    if channel_type == "dingtalk":
        return [(len(orjson.dumps(body)), 20_000)]
    if channel_type == "wecom":
        content = body[body["msgtype"]]["content"]
        return [(len(content.encode()), 2048 if body_format == "text" else 4096)]
    section = body["blocks"][1]["text"]["text"]
    return [(len(section), 3000), (len(body["text"]), 4000)]


CHANNELS = [
    ("feishu", "card"),
    ("feishu", "post"),
    ("feishu", "text"),
    ("dingtalk", "markdown"),
    ("dingtalk", "text"),
    ("wecom", "markdown"),
    ("wecom", "text"),
    ("slack", "blocks"),
]


def channel(channel_type: str, body_format: str) -> Channel:
    config = ChannelConfig.model_validate(
        {"type": channel_type, "url": "https://bot.example.com/hook", "format": body_format}
    )
    return build_channel("c", config, httpx.AsyncClient())


def facts(index: int, **kwargs: Any) -> JobFacts:
    event = make_event(name=f"job-{index:03d}", uid=f"uid-{index:03d}", **kwargs)
    mention = Mention(f"Owner {index}", f"ou_owner_{index}", mobile=f"1380000{index:04d}")
    return JobFacts(event, "Alpha GPU", job_link("https://dash.example.com", event), "en", mention)


@pytest.mark.parametrize(("channel_type", "body_format"), CHANNELS)
def test_a_digest_over_the_limit_lists_fewer_jobs_and_counts_the_rest(
    channel_type: str, body_format: str
) -> None:
    # 400 failures with 1,000-character reasons, each with its own owner: far over every limit
    items = [facts(i, reason="BackoffLimitExceeded/" + "E" * 1000) for i in range(400)]
    digest = DigestFacts(
        items=items, seconds=15, language="en", dashboard_url="https://dash.example.com", max_listed=400
    )
    body = channel(channel_type, body_format).render_digest(digest)
    for size, limit in measure(channel_type, body_format, body):
        assert size <= limit
    text = orjson.dumps(body).decode()
    listed = len(set(re.findall(r"/jobs/alpha/uid-(\d{3})", text)))
    assert 1 <= listed < 400
    assert f"and {400 - listed} more" in text  # the rest are counted, not lost
    assert "400 job updates" in text


@pytest.mark.parametrize(("channel_type", "body_format"), CHANNELS)
def test_a_huge_reason_and_message_are_trimmed_to_fit_one_message(
    channel_type: str, body_format: str
) -> None:
    job = facts(1, phase=Phase.FAILED, reason="R" * 25_000, message="汉字 and ascii " * 3000)
    body = channel(channel_type, body_format).render(job)
    for size, limit in measure(channel_type, body_format, body):
        assert size <= limit
    text = orjson.dumps(body).decode()
    assert "RRRRRRRRRR" in text  # the reason is trimmed, not removed
    assert "…" in text
    assert "team-a/job-001" in text


@pytest.mark.parametrize(("channel_type", "body_format"), CHANNELS)
def test_a_digest_mentions_none_of_its_owners(channel_type: str, body_format: str) -> None:
    """Issue 18 item 5: a digest @-mentioned every owner of the burst (each job's own card does)."""
    items = [facts(i) for i in range(5)]
    digest = DigestFacts(items=items, seconds=15, language="en", dashboard_url="https://dash", max_listed=5)
    text = orjson.dumps(channel(channel_type, body_format).render_digest(digest)).decode()
    assert "team-a/job-004" in text
    assert "ou_owner_" not in text
    assert "1380000" not in text
    assert "Owner " not in text
