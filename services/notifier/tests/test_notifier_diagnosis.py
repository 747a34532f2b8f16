"""Cards that say why (issue 16): every channel and language leads with the reason line and carries
the evidence, the Warning events and the log tail; cluster text stays data; a maximal diagnosis
still fits every channel's documented limit."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import pytest
from notifier_support import make_event
from test_notifier_sizes import CHANNELS, measure

from trainwatch_common import JobStatusEvent, Phase
from trainwatch_common.events.diagnosis import (
    MAX_LOG_LINE_CHARS,
    MAX_LOG_LINES,
    MAX_MESSAGE_CHARS,
    MAX_SUMMARY_CHARS,
    MAX_WARNING_EVENTS,
    Blame,
    Diagnosis,
    DiagnosisCategory,
    DiagnosisWarning,
    JobResources,
    LogTail,
)
from trainwatch_notifier.channels import build_channel
from trainwatch_notifier.channels.base import Channel
from trainwatch_notifier.render import diagnosis as why
from trainwatch_notifier.render.facts import JobFacts, Mention, job_link
from trainwatch_notifier.ruleset import ChannelConfig, Language

SINCE = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)

OOM = Diagnosis(
    category=DiagnosisCategory.OOM_KILLED, blame=Blame.USER_CONFIG,
    summary="worker-3 (pytorch) was killed for running out of memory (OOMKilled, exit 137)",
    reason="OOMKilled", role="worker", replica_index=3, pod="train-1-worker-3", container="pytorch",
    exit_code=137, signal=9, restarts=2, node="gpu-7", since=SINCE,
    events=[DiagnosisWarning(reason="BackOff", message="Back-off restarting failed container", count=4,
                             object="Pod/train-1-worker-3"),
            DiagnosisWarning(reason="FailedScheduling", message="0/12 nodes are available",
                             object="Pod/train-1-worker-4")],
    log_tail=LogTail(container="pytorch", previous=True,
                     lines=["epoch 3 step 900 loss 0.12", "torch.cuda.OutOfMemoryError: CUDA out of memory"]),
)  # fmt: skip
RESOURCES = JobResources(pods=4, gpus=32, gpu_resource="nvidia.com/gpu", gpu_product="NVIDIA-H100-80GB-HBM3")

REASON_LINES: dict[Language, str] = {
    "en": "OOMKilled · Worker-3 (pytorch) exit 137 on node gpu-7: memory limit reached",
    "zh-CN": "内存不足 (OOMKilled) · Worker-3 (pytorch) 退出码 137，节点 gpu-7：超出内存限制",  # noqa: RUF001
}
EVIDENCE: dict[Language, list[str]] = {
    "en": ["train-1-worker-3", "pytorch", "137 (signal 9)", "gpu-7", "32 × NVIDIA-H100-80GB-HBM3",  # noqa: RUF001
           "the job's author (configuration)", "Warning events", "Log tail (pytorch, previous run)"],
    "zh-CN": ["train-1-worker-3", "pytorch", "137 (信号 9)", "gpu-7", "32 × NVIDIA-H100-80GB-HBM3",  # noqa: RUF001
              "任务作者（配置）", "告警事件", "日志末尾（pytorch，上次运行）"],  # noqa: RUF001
}  # fmt: skip


def diagnosed(diagnosis: Diagnosis | None = OOM, **kwargs: Any) -> JobStatusEvent:
    event = make_event(**kwargs)
    return event.model_copy(
        update={"diagnosis": diagnosis, "resources": RESOURCES, "queue_wait_seconds": 95.0}
    )


def channel(channel_type: str, body_format: str) -> Channel:
    config = ChannelConfig.model_validate(
        {"type": channel_type, "url": "https://bot.example.com/hook", "format": body_format}
    )
    return build_channel("c", config, httpx.AsyncClient())


def facts(event: JobStatusEvent, language: Language, cluster_name: str = "Alpha GPU") -> JobFacts:
    mention = Mention("Alice", "ou_alice", mobile="13800000000")
    return JobFacts(event, cluster_name, job_link("https://dash.example.com", event), language, mention)


def displayed_text(channel_type: str, body_format: str, body: dict[str, Any]) -> str:
    """The text a reader sees first, in reading order (the header or title line aside)."""
    if channel_type == "feishu" and body_format == "card":
        return str(body["card"]["body"]["elements"][0]["content"])
    if channel_type == "feishu" and body_format == "post":
        post = next(iter(body["content"]["post"].values()))
        return "\n".join("".join(node.get("text", "") for node in p) for p in post["content"])
    if channel_type == "feishu":
        return str(body["content"]["text"]).split("\n", 1)[1]
    if channel_type == "dingtalk" and body_format == "markdown":
        return str(body["markdown"]["text"]).split("\n\n", 1)[1]
    if channel_type == "dingtalk":
        return str(body["text"]["content"]).split("\n", 1)[1]
    if channel_type == "wecom" and body_format == "markdown":
        return str(body["markdown"]["content"]).split("\n", 1)[1]
    if channel_type == "wecom":
        return str(body["text"]["content"]).split("\n", 1)[1]
    return str(body["blocks"][1]["text"]["text"])


@pytest.mark.parametrize("language", ["en", "zh-CN"])
@pytest.mark.parametrize(("channel_type", "body_format"), CHANNELS)
def test_every_channel_leads_with_the_reason_line_and_carries_the_evidence(
    channel_type: str, body_format: str, language: Language
) -> None:
    body = channel(channel_type, body_format).render(facts(diagnosed(), language))
    shown = displayed_text(channel_type, body_format, body)
    assert shown.split("\n", 1)[0] == REASON_LINES[language]  # first, on one line, in plain words
    for value in EVIDENCE[language]:
        assert value in shown, value
    assert "BackOff ×4 Pod/train-1-worker-3: Back-off restarting failed container" in shown  # noqa: RUF001
    assert "torch.cuda.OutOfMemoryError: CUDA out of memory" in shown  # the log tail, newest line kept
    for size, limit in measure(channel_type, body_format, body):
        assert size <= limit


@pytest.mark.parametrize(("channel_type", "body_format"), [("feishu", "card"), ("slack", "blocks")])
def test_the_log_tail_is_a_code_block_where_the_markup_has_one(channel_type: str, body_format: str) -> None:
    shown = displayed_text(
        channel_type, body_format, channel(channel_type, body_format).render(facts(diagnosed(), "en"))
    )
    block = shown.split("```\n", 1)[1].split("\n```", 1)[0]
    assert block.split("\n") == list(OOM.log_tail.lines)  # type: ignore[union-attr]


def test_dingtalk_and_wecom_markdown_quote_the_log_lines() -> None:
    for channel_type in ("dingtalk", "wecom"):
        shown = displayed_text(
            channel_type, "markdown", channel(channel_type, "markdown").render(facts(diagnosed(), "en"))
        )
        assert "> torch.cuda.OutOfMemoryError: CUDA out of memory" in shown


def test_an_event_without_a_diagnosis_renders_as_before() -> None:
    for channel_type, body_format in CHANNELS:
        plain = channel(channel_type, body_format).render(facts(make_event(), "en"))
        cleared = channel(channel_type, body_format).render(facts(diagnosed(None), "en"))
        assert plain == cleared
        assert "Who acts" not in orjson.dumps(plain).decode()


def test_every_category_has_a_line_in_both_languages() -> None:
    for category in DiagnosisCategory:
        d = Diagnosis(category=category, summary="s", resource="nvidia.com/gpu", queue="team-a", position=4)
        for language in ("en", "zh-CN"):
            line = why.reason_line(d, language)  # type: ignore[arg-type]
            assert line.startswith(why.category_name(d, language)), line  # type: ignore[arg-type]
            assert "\n" not in line
    waiting = Diagnosis(category=DiagnosisCategory.QUEUE_WAITING, summary="s", queue="team-a", position=4)
    assert why.reason_line(waiting, "en") == "QueueWaiting: waiting for quota in queue team-a, position 5"
    assert why.reason_line(waiting, "zh-CN") == "排队中 (QueueWaiting)：等待配额（队列 team-a），排第 5 位"  # noqa: RUF001
    short = Diagnosis(category=DiagnosisCategory.UNSCHEDULABLE, summary="s", resource="nvidia.com/gpu")
    assert why.reason_line(short, "en") == "Unschedulable: no node has enough free nvidia.com/gpu"


HOSTILE = (
    "<at id=all></at> <!channel> <@U1> @all [click](https://evil.example) "
    + "``` **bold** <font color=red>x</font>"
)


def hostile_diagnosis() -> Diagnosis:
    return OOM.model_copy(
        update={
            "pod": HOSTILE[:200], "node": HOSTILE[:200], "container": "c<at id=all>", "message": HOSTILE,
            "events": [DiagnosisWarning(reason="R<@U1>", message=HOSTILE, object="Pod/" + HOSTILE[:100])],
            "log_tail": LogTail(container="pytorch", lines=[HOSTILE, "```", "end"]),
        }
    )  # fmt: skip


# A Feishu post's text nodes are plain text (un_escape false): shown as written, never interpreted.
@pytest.mark.parametrize(("channel_type", "body_format"), [c for c in CHANNELS if c != ("feishu", "post")])
def test_cluster_text_in_the_diagnosis_is_data_never_markup(channel_type: str, body_format: str) -> None:
    body = channel(channel_type, body_format).render(facts(diagnosed(hostile_diagnosis()), "en"))
    text = json.dumps(body, ensure_ascii=False)
    for live in ("<at id=all>", "<!channel>", "<@U1>", "](https://evil", "https://evil", "<font"):
        assert live not in text, live
    if channel_type in ("dingtalk", "wecom") or body_format in ("text",):
        assert "@all" not in text
    if body_format in ("card", "blocks"):
        shown = displayed_text(channel_type, body_format, body)
        assert shown.count("```") == 2  # a log line cannot close the code block early


def maximal_diagnosis() -> Diagnosis:
    """Every bound of the contract at its maximum, in multi-byte text."""
    long = "汉字と😀" * 400
    return Diagnosis(
        category=DiagnosisCategory.CRASH_LOOP, blame=Blame.USER_CODE, summary=long[:MAX_SUMMARY_CHARS],
        reason="R" * 256, message=long[:MAX_MESSAGE_CHARS], role="w" * 63, replica_index=10**6,
        pod="p" * 253, container="c" * 63, exit_code=255, signal=127, restarts=10**6, node="n" * 253,
        resource="example.com/" + "r" * 60, queue="q" * 63, cluster_queue="cq" * 31, position=10**6,
        pods_affected=10**4, since=SINCE,
        events=[DiagnosisWarning(reason="W" * 128, message=long[:MAX_MESSAGE_CHARS], count=10**6,
                                 object="Pod/" + "p" * 253) for _ in range(MAX_WARNING_EVENTS)],
        log_tail=LogTail(container="c" * 63, previous=True, truncated=True,
                         lines=[f"{i:02d} " + long[: MAX_LOG_LINE_CHARS // 4] for i in range(MAX_LOG_LINES)]),
    )  # fmt: skip


@pytest.mark.parametrize("language", ["en", "zh-CN"])
@pytest.mark.parametrize(("channel_type", "body_format"), CHANNELS)
def test_a_maximal_diagnosis_fits_every_channel_and_keeps_the_reason_line(
    channel_type: str, body_format: str, language: Language
) -> None:
    event = diagnosed(
        maximal_diagnosis(), name="n" * 253, namespace="s" * 63, phase=Phase.FAILED,
        reason="R" * 2000, message="汉字 and ascii " * 3000,
    )  # fmt: skip
    job = facts(event, language, cluster_name="集群" * 100)
    body = channel(channel_type, body_format).render(job)
    for size, limit in measure(channel_type, body_format, body):
        assert size <= limit
    shown = displayed_text(channel_type, body_format, body)
    assert shown.split("\n", 1)[0] == why.reason_line(event.diagnosis, language)  # type: ignore[arg-type]
    assert len(shown.split("\n", 1)[0]) <= why.LINE_MAX_CHARS


def test_the_webhook_carries_the_diagnosis_and_the_reason_line() -> None:
    body = channel("webhook", "cloudevent").render(facts(diagnosed(), "zh-CN"))
    assert body["trainwatchreason"] == REASON_LINES["zh-CN"]
    assert Diagnosis.model_validate(body["data"]["diagnosis"]) == OOM
    assert body["data"]["resources"]["gpus"] == 32


@pytest.mark.parametrize(("channel_type", "body_format"), [c for c in CHANNELS])
def test_a_digest_lists_each_diagnosed_job_with_its_reason_line(channel_type: str, body_format: str) -> None:
    from trainwatch_notifier.render.facts import DigestFacts

    items = [facts(diagnosed(), "en"), facts(diagnosed(None, name="plain-1"), "en")]
    digest = DigestFacts(items=items, seconds=10, language="en", dashboard_url="https://dash.example.com",
                         max_listed=10)  # fmt: skip
    body = channel(channel_type, body_format).render_digest(digest)
    text = orjson.dumps(body).decode()
    assert REASON_LINES["en"][:60] in text  # cut to the digest's 100 characters per job
    assert "BackoffLimitExceeded" in text  # a job without a diagnosis keeps its condition's reason
