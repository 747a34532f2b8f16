"""Message bodies: fields, languages, colours, mentions, links and the size limits."""

# ruff: noqa: RUF001  (Chinese punctuation is meant)

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import orjson
import pytest
from notifier_support import make_event

from trainwatch_common import Phase
from trainwatch_common.events.jobs import ReplicaCounts, SubPhase
from trainwatch_notifier.render import feishu, slack
from trainwatch_notifier.render.facts import DigestFacts, JobFacts, Mention, format_duration, job_link
from trainwatch_notifier.ruleset import ChannelConfig, Language
from trainwatch_notifier.sink import check_body


def facts(language: Language = "en", mention: Mention | None = None, **kwargs: object) -> JobFacts:
    event = make_event(**kwargs)  # type: ignore[arg-type]
    return JobFacts(
        event=event,
        cluster_name="Alpha GPU",
        link=job_link("https://dash.example.com/", event),
        language=language,
        mention=mention,
    )


def test_card_has_every_field_the_phase_colour_and_the_job_link() -> None:
    body = feishu.message_body(facts(mention=Mention("Alice", "ou_alice")), "card")
    check_body(body)
    card = body["card"]
    assert card["schema"] == "2.0"
    assert card["header"]["template"] == "red"
    assert card["header"]["title"]["content"] == "❌ PyTorchJob team-a/train-1 Failed"
    markdown = card["body"]["elements"][0]["content"]
    for expected in (
        "**Cluster**: Alpha GPU (alpha)",
        "**Reason**: BackoffLimitExceeded",
        "**Message**: Job train-1 has failed",
        "**Duration**: 1h 2m 3s",
        "**Replicas**: Master: 0 of 1 running, 1 failed; Worker: 3 of 3 running",
        "<at id=ou_alice></at>",
    ):
        assert expected in markdown
    for in_the_title in ("**Namespace**", "**Kind**", "**Name**", "**Phase**"):
        assert in_the_title not in markdown
    button = card["body"]["elements"][1]
    assert button["behaviors"][0]["default_url"] == "https://dash.example.com/jobs/alpha/uid-train-1"


@pytest.mark.parametrize(
    ("phase", "colour"),
    [
        (Phase.SUCCEEDED, "green"),
        (Phase.RESTARTING, "orange"),
        (Phase.SUSPENDED, "grey"),
        (Phase.RUNNING, "blue"),
    ],
)
def test_card_colour_follows_the_phase(phase: Phase, colour: str) -> None:
    assert feishu.message_body(facts(phase=phase), "card")["card"]["header"]["template"] == colour


def test_chinese_post_and_text_bodies() -> None:
    post = feishu.message_body(facts("zh-CN", Mention("Alice", "ou_alice")), "post")
    check_body(post)
    zh = post["content"]["post"]["zh_cn"]
    assert zh["title"] == "❌ 训练任务失败：PyTorchJob team-a/train-1"
    nodes = [node for paragraph in zh["content"] for node in paragraph]
    assert {"tag": "text", "text": "时长：1小时2分钟3秒"} in nodes
    assert {"tag": "at", "user_id": "ou_alice", "user_name": "Alice"} in nodes
    assert {
        "tag": "a",
        "text": "在控制台查看",
        "href": "https://dash.example.com/jobs/alpha/uid-train-1",
    } in nodes
    text = feishu.message_body(facts("zh-CN", Mention("Alice", "ou_alice")), "text")
    check_body(text)
    assert '<at user_id="ou_alice">Alice</at>' in text["content"]["text"]
    unmapped = feishu.message_body(facts(mention=Mention("bob", None)), "text")
    assert "@bob" in unmapped["content"]["text"]  # no open_id configured: the name, no ping


@pytest.mark.parametrize("body_format", ["card", "card-v1", "post", "text"])
def test_a_huge_message_is_trimmed_to_the_feishu_body_limit(body_format: str) -> None:
    body = feishu.message_body(facts(message="汉字 and ascii " * 5000), body_format)
    size = len(orjson.dumps({"timestamp": "1700000000", "sign": "x" * 44, **body}))
    assert size <= feishu.MAX_BODY_BYTES
    assert size > feishu.MAX_BODY_BYTES - 200  # trimmed, not dropped
    assert "…" in orjson.dumps(body).decode()


def test_slack_blocks_with_mention_and_limit() -> None:
    body = slack.message_body(facts(mention=Mention("Alice", "U_ALICE"), message="x" * 10_000))
    assert body["text"].startswith("❌ PyTorchJob team-a/train-1 Failed <@U_ALICE>")
    section = body["blocks"][1]["text"]["text"]
    assert len(section) <= slack.SECTION_MAX_CHARS
    assert "*Reason*: BackoffLimitExceeded" in section
    assert body["blocks"][2]["elements"][0]["url"] == "https://dash.example.com/jobs/alpha/uid-train-1"


def test_digest_counts_per_cluster_lists_some_jobs_and_mentions_nobody() -> None:
    items = [facts(name=f"job-{i}", mention=Mention("Alice", "ou_alice")) for i in range(30)]
    items += [facts(name="ok-1", phase=Phase.SUCCEEDED, cluster_id="beta")]
    digest = DigestFacts(items=items, seconds=15, language="en", dashboard_url="https://dash", max_listed=5)
    body = feishu.digest_body(digest, "card")
    check_body(body)
    markdown = body["card"]["body"]["elements"][0]["content"]
    assert body["card"]["header"]["title"]["content"] == "31 job updates in 15s"
    assert body["card"]["header"]["template"] == "red"
    assert "Alpha GPU (alpha): 30 Failed" in markdown
    assert "Alpha GPU (beta): 1 Succeeded" in markdown
    assert markdown.count("[team-a/job-") == 5
    assert "…and 26 more" in markdown
    # Issue 18 item 5: a burst must not @-mention every owner (it did, once each).
    assert "<at" not in markdown


# -- issue 18 item 7: the texts ---------------------------------------------------------------
def test_chinese_durations_say_minutes_not_a_bare_fen() -> None:
    assert format_duration(timedelta(minutes=40), "zh-CN") == "40分钟"  # was "40分"
    assert format_duration(timedelta(hours=1, minutes=2, seconds=3), "zh-CN") == "1小时2分钟3秒"
    assert format_duration(timedelta(minutes=40), "en") == "40m"


def test_the_replica_line_is_plain_in_both_languages() -> None:
    """Was ``Master/1: active 0, failed 1; Worker/3: active 3`` and ``Master/1: 运行 0, 失败 1``."""
    assert facts().replicas() == "Master: 0 of 1 running, 1 failed; Worker: 3 of 3 running"
    zh = "Master：共 1 个，运行中 0 个，失败 1 个；Worker：共 3 个，运行中 3 个"
    assert facts("zh-CN").replicas() == zh
    unknown_size = facts(phase=Phase.RUNNING)
    replicas = {"Worker": ReplicaCounts(active=2)}
    unknown_size = replace(unknown_size, event=unknown_size.event.model_copy(update={"replicas": replicas}))
    assert unknown_size.replicas() == "Worker: 2 running"


def test_chinese_text_takes_full_width_punctuation() -> None:
    body = feishu.message_body(facts("zh-CN", Mention("Alice", None)), "text")["content"]["text"]
    lines = body.split("\n")
    assert lines[0] == "❌ 训练任务失败：PyTorchJob team-a/train-1"
    assert lines[-1] == "@Alice"  # the mention (no open_id: the name)
    for line in lines[1:-1]:
        label, colon, _ = line.partition("：")
        assert colon, f"no full-width colon in {line!r}"
        assert ":" not in label, line
        assert ", " not in label, line
    replicas = next(line for line in lines if line.startswith("副本"))
    assert "," not in replicas
    assert ";" not in replicas


@pytest.mark.parametrize(
    ("language", "sub_phase", "expected"),
    [
        ("en", SubPhase.QUEUED, "⏳ PyTorchJob team-a/train-1 Pending (queued)"),
        ("zh-CN", SubPhase.QUEUED, "⏳ 训练任务等待中（排队中）：PyTorchJob team-a/train-1"),
        ("zh-CN", SubPhase.INITIALIZING, "⏳ 训练任务等待中（初始化中）：PyTorchJob team-a/train-1"),
    ],
)
def test_the_sub_phase_is_in_the_title_in_the_cards_language(
    language: Language, sub_phase: SubPhase, expected: str
) -> None:
    pending = facts(language, phase=Phase.PENDING)
    pending = replace(pending, event=pending.event.model_copy(update={"sub_phase": sub_phase}))
    title = feishu.message_body(pending, "card")["card"]["header"]["title"]["content"]
    assert title == expected
    assert "Queued" not in title
    assert "Initializing" not in title


@pytest.mark.parametrize("language", ["en", "zh-CN"])
def test_no_field_repeats_what_the_title_says(language: Language) -> None:
    job_facts = facts(language)
    values = [value for _, value in job_facts.fields(message=job_facts.event.message)]
    for said_in_the_title in ("team-a", "train-1", "PyTorchJob", job_facts.phase_name):
        assert said_in_the_title not in values


def test_a_chinese_digest_counts_with_full_width_punctuation() -> None:
    items = [facts("zh-CN", name=f"job-{i}") for i in range(3)]
    items.append(facts("zh-CN", name="ok-1", phase=Phase.SUCCEEDED))
    digest = DigestFacts(items=items, seconds=15, language="zh-CN", dashboard_url="https://d", max_listed=5)
    assert digest.summary() == ["Alpha GPU (alpha)：失败 3 个，成功 1 个"]


def test_card_v1_is_the_older_card_form_with_the_same_content() -> None:
    """Issue 18 item 5: card JSON 2.0 by default, and a setting to fall back to 1.0."""
    job = replace(
        facts(mention=Mention("Alice", "ou_alice")), silence_link="https://dash.example.com/silence?t=x"
    )
    v2 = feishu.message_body(job, "card")["card"]
    body = feishu.message_body(job, "card-v1")
    check_body(body)
    v1 = body["card"]
    assert "schema" not in v1
    assert "body" not in v1
    assert v1["header"] == v2["header"]
    markdown, action = v1["elements"]
    assert markdown == {
        "tag": "div",
        "text": {"tag": "lark_md", "content": v2["body"]["elements"][0]["content"]},
    }
    assert [(b["text"]["content"], b["url"], b["type"]) for b in action["actions"]] == [
        ("Open in dashboard", "https://dash.example.com/jobs/alpha/uid-train-1", "primary"),
        ("Silence this job for 1 h", "https://dash.example.com/silence?t=x", "default"),
    ]
    digest = DigestFacts(items=[job], seconds=15, language="en", dashboard_url="https://d", max_listed=5)
    digest_card = feishu.digest_body(digest, "card-v1")["card"]
    assert digest_card["elements"][1]["actions"][0]["url"] == "https://d"


def test_card_v1_is_a_format_a_feishu_channel_accepts() -> None:
    config = ChannelConfig.model_validate(
        {"type": "feishu", "url": "https://bot.example.com/h", "format": "card-v1"}
    )
    assert config.body_format == "card-v1"
    with pytest.raises(ValueError, match="card-v1"):
        ChannelConfig.model_validate(
            {"type": "slack", "url": "https://bot.example.com/h", "format": "card-v1"}
        )
