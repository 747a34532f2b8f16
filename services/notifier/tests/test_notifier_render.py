"""Message bodies: fields, languages, colours, mentions, links and the size limits."""

from __future__ import annotations

import orjson
import pytest
from notifier_support import make_event

from trainwatch_common import Phase
from trainwatch_notifier.render import feishu, slack
from trainwatch_notifier.render.facts import DigestFacts, JobFacts, Mention, job_link
from trainwatch_notifier.ruleset import Language
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
        "**Namespace**: team-a",
        "**Kind**: PyTorchJob",
        "**Reason**: BackoffLimitExceeded",
        "**Message**: Job train-1 has failed",
        "**Duration**: 1h 2m 3s",
        "**Replicas**: Master/1: active 0, failed 1; Worker/3: active 3",
        "<at id=ou_alice></at>",
    ):
        assert expected in markdown
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
    assert zh["title"] == "❌ 训练任务失败: PyTorchJob team-a/train-1"
    nodes = [node for paragraph in zh["content"] for node in paragraph]
    assert {"tag": "text", "text": "运行时长: 1小时2分3秒"} in nodes
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


@pytest.mark.parametrize("body_format", ["card", "post", "text"])
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


def test_digest_counts_per_cluster_lists_some_jobs_and_mentions_owners() -> None:
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
    assert markdown.count("<at id=ou_alice></at>") == 1
