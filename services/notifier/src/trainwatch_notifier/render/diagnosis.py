"""What a card says about why (issue 16): the reason line, the evidence, the Warning events and
the log tail of a job event's diagnosis, in English or Chinese, independent of the channel.

The reason line is built from the diagnosis' fields, not from its English ``summary``, so a
Chinese card reads Chinese: "OOMKilled · Worker-3 (pytorch) exit 137 on node gpu-7: memory limit
reached" / "内存不足 (OOMKilled) · Worker-3 (pytorch) 退出码 137，节点 gpu-7：超出内存限制".
Every value here comes from a cluster: the channels escape it like any other cluster text.
"""

# ruff: noqa: RUF001, RUF002  (Chinese punctuation and the multiplication sign are meant)
from __future__ import annotations

from trainwatch_common.events.diagnosis import Diagnosis, DiagnosisCategory, JobResources
from trainwatch_notifier.ruleset import Language

C = DiagnosisCategory

CATEGORY_NAMES: dict[Language, dict[str, str]] = {
    "en": {c.value: c.value for c in C},
    "zh-CN": {
        "OOMKilled": "内存不足",
        "ImagePullFailed": "镜像拉取失败",
        "CrashLoop": "反复崩溃",
        "ExitCode": "异常退出",
        "Preempted": "被抢占",
        "Evicted": "被驱逐",
        "NodeFailure": "节点故障",
        "Unschedulable": "无法调度",
        "GangWaiting": "等待成组调度",
        "QueueWaiting": "排队中",
        "QuotaExceeded": "超出配额",
        "DeadlineExceeded": "超过时限",
        "BackoffLimitExceeded": "超过重试上限",
        "ConfigError": "配置错误",
        "PodFailurePolicy": "Pod 失败策略",
        "Unknown": "原因未知",
    },
}

# What the category means, after the colon of the reason line. {resource}/{queue}/{position}.
EXPLANATIONS: dict[Language, dict[str, str]] = {
    "en": {
        "OOMKilled": "memory limit reached",
        "ImagePullFailed": "the image cannot be pulled",
        "CrashLoop": "keeps crashing and restarting",
        "ExitCode": "the container exited with an error",
        "Preempted": "preempted for a higher-priority workload",
        "Evicted": "evicted from its node",
        "NodeFailure": "its node failed",
        "Unschedulable": "no node has enough free {resource}",
        "Unschedulable-": "no node matches its constraints",
        "GangWaiting": "waiting for the whole gang to be scheduled together",
        "QueueWaiting": "waiting for quota{queue}{position}",
        "QuotaExceeded": "asks for more {resource} than the quota{queue} allows",
        "DeadlineExceeded": "ran longer than its deadline",
        "BackoffLimitExceeded": "failed too many times and reached its retry limit",
        "ConfigError": "its configuration is invalid",
        "PodFailurePolicy": "stopped by its pod failure policy",
        "Unknown": "no known cause",
        "queue": " in queue {queue}",
        "position": ", position {position}",
        "resources": "resources",
    },
    "zh-CN": {
        "OOMKilled": "超出内存限制",
        "ImagePullFailed": "无法拉取镜像",
        "CrashLoop": "反复崩溃重启",
        "ExitCode": "容器异常退出",
        "Preempted": "被更高优先级的任务抢占",
        "Evicted": "被节点驱逐",
        "NodeFailure": "所在节点故障",
        "Unschedulable": "没有节点有足够的空闲 {resource}",
        "Unschedulable-": "没有节点满足调度约束",
        "GangWaiting": "等待整组 Pod 同时调度",
        "QueueWaiting": "等待配额{queue}{position}",
        "QuotaExceeded": "申请的 {resource} 超出{queue}配额",
        "DeadlineExceeded": "运行超过时限",
        "BackoffLimitExceeded": "失败次数达到重试上限",
        "ConfigError": "配置无效",
        "PodFailurePolicy": "被 Pod 失败策略终止",
        "Unknown": "原因不明",
        "queue": "（队列 {queue}）",
        "position": "，排第 {position} 位",
        "resources": "资源",
    },
}

LABELS: dict[Language, dict[str, str]] = {
    "en": {
        "blame": "Who acts",
        "pod": "Pod",
        "container": "Container",
        "exit_code": "Exit code",
        "node": "Node",
        "resource": "Short of",
        "queue": "Queue",
        "detail": "Detail",
        "since": "Since",
        "gpus": "GPUs",
        "queue_wait": "Queue wait",
        "warnings": "Warning events",
        "log": "Log tail ({container})",
        "log_previous": "Log tail ({container}, previous run)",
        "signal": "signal {signal}",
        "restarts": "restarted {restarts}×",
        "pods_affected": "{count} pods affected",
        "blame.user_code": "the job's author (code)",
        "blame.user_config": "the job's author (configuration)",
        "blame.infrastructure": "the platform (infrastructure)",
        "blame.unknown": "unknown",
        "exit": "exit {code}",
        "on_node": "on node {node}",
        "join": " ",
    },
    "zh-CN": {
        "blame": "责任方",
        "pod": "Pod",
        "container": "容器",
        "exit_code": "退出码",
        "node": "节点",
        "resource": "短缺资源",
        "queue": "队列",
        "detail": "详情",
        "since": "开始于",
        "gpus": "GPU",
        "queue_wait": "排队时长",
        "warnings": "告警事件",
        "log": "日志末尾（{container}）",
        "log_previous": "日志末尾（{container}，上次运行）",
        "signal": "信号 {signal}",
        "restarts": "已重启 {restarts} 次",
        "pods_affected": "影响 {count} 个 Pod",
        "blame.user_code": "任务作者（代码）",
        "blame.user_config": "任务作者（配置）",
        "blame.infrastructure": "平台（基础设施）",
        "blame.unknown": "未知",
        "exit": "退出码 {code}",
        "on_node": "节点 {node}",
        "join": "，",
    },
}

LINE_MAX_CHARS = 300  # the reason line: one line whatever the cluster's names
VALUE_MAX_CHARS = 160  # each evidence value
LOG_MAX_LINES = 20  # of the watcher's ≤ 50: a card is read on a phone


def _short(text: str, chars: int) -> str:
    text = " ".join(text.split())  # one line: no newline from a cluster breaks the layout
    if len(text) <= chars:
        return text
    return text[: chars - 1].rstrip() + "…" if chars > 1 else ""


def category_name(d: Diagnosis, language: Language) -> str:
    name = CATEGORY_NAMES[language][d.category.value]
    return name if language == "en" else f"{name} ({d.category.value})"


def who(d: Diagnosis) -> str:
    """ "Worker-3 (pytorch)", "pod train-x (main)", or "" when the diagnosis is about the job."""
    if d.role:
        name = d.role[:1].upper() + d.role[1:]
        if d.replica_index is not None:
            name += f"-{d.replica_index}"
    elif d.pod:
        name = d.pod
    else:
        return ""
    return f"{name} ({d.container})" if d.container else name


def reason_line(d: Diagnosis, language: Language) -> str:
    """The one plain line a card leads with: category · who, exit code, node: what it means."""
    words = LABELS[language]
    exit_code = words["exit"].format(code=d.exit_code) if d.exit_code is not None else ""
    node = words["on_node"].format(node=d.node) if d.node else ""
    subject = " ".join(filter(None, [who(d), exit_code]))
    subject = (" " if language == "en" else words["join"]).join(filter(None, [subject, node]))
    head = category_name(d, language) + (f" · {subject}" if subject else "")
    colon = ": " if language == "en" else "："
    return _short(head + colon + explanation(d, language), LINE_MAX_CHARS)


def explanation(d: Diagnosis, language: Language) -> str:
    texts = EXPLANATIONS[language]
    if d.category is C.UNKNOWN and language == "en" and d.summary:
        return d.summary
    key = d.category.value
    if d.category is C.UNSCHEDULABLE and not d.resource:
        key = "Unschedulable-"
    queue = texts["queue"].format(queue=d.queue) if d.queue else ""
    position = texts["position"].format(position=d.position + 1) if d.position is not None else ""
    return texts[key].format(resource=d.resource or texts["resources"], queue=queue, position=position)


def evidence(
    d: Diagnosis,
    resources: JobResources | None,
    queue_wait: str | None,
    language: Language,
    *,
    max_chars: int = VALUE_MAX_CHARS,
) -> list[tuple[str, str]]:
    """(label, value) pairs of what the diagnosis was read from; empty values left out."""
    words = LABELS[language]
    exit_code = ""
    if d.exit_code is not None:
        exit_code = str(d.exit_code)
        if d.signal is not None:
            exit_code += f" ({words['signal'].format(signal=d.signal)})"
    if d.restarts:
        restarts = words["restarts"].format(restarts=d.restarts)
        exit_code = words["join"].join(filter(None, [exit_code, restarts]))
    pod = d.pod or ""
    if pod and d.pods_affected > 1:
        pod += f" ({words['pods_affected'].format(count=d.pods_affected)})"
    queue = d.queue or ""
    if queue and d.cluster_queue:
        queue += f" / {d.cluster_queue}"
    rows = [
        ("blame", words[f"blame.{d.blame.value}"]),
        ("pod", pod),
        ("container", d.container or ""),
        ("exit_code", exit_code),
        ("node", d.node or ""),
        ("resource", d.resource or ""),
        ("queue", queue),
        ("detail", " ".join(filter(None, [d.reason or "", d.message or ""]))),
        ("since", d.since.strftime("%Y-%m-%d %H:%M:%S UTC") if d.since else ""),
        ("gpus", gpus(resources)),
        ("queue_wait", queue_wait or ""),
    ]
    shortened = [(words[key], _short(value, max_chars)) for key, value in rows]
    return [(label, value) for label, value in shortened if value]


def gpus(resources: JobResources | None) -> str:
    """ "32 × NVIDIA-H100-80GB-HBM3 (nvidia.com/gpu)", or "" when the job asks for none."""
    if resources is None or not resources.gpus:
        return ""
    product = f" × {resources.gpu_product}" if resources.gpu_product else ""
    kind = f" ({resources.gpu_resource})" if resources.gpu_resource else ""
    return f"{resources.gpus}{product}{kind}"


def warning_lines(d: Diagnosis) -> list[str]:
    """One line per distinct Warning event: "BackOff ×4 Pod/train-worker-3: Back-off restarting…"."""
    lines = []
    for w in d.events:
        count = f" ×{w.count}" if w.count > 1 else ""
        about = f" {w.object}" if w.object else ""
        message = f": {w.message}" if w.message else ""
        lines.append(_short(f"{w.reason}{count}{about}{message}", 400))
    return lines


def log_title(d: Diagnosis, language: Language) -> str:
    if d.log_tail is None:
        return ""
    key = "log_previous" if d.log_tail.previous else "log"
    return LABELS[language][key].format(container=d.log_tail.container)


def log_lines(d: Diagnosis) -> list[str]:
    """The last lines of the log tail, as many as a card shows; tabs and control characters gone."""
    if d.log_tail is None:
        return []
    return [_printable(line) for line in d.log_tail.lines[-LOG_MAX_LINES:]]


def _printable(line: str) -> str:
    return "".join(ch if ch.isprintable() else " " for ch in line).rstrip()


def section_label(key: str, language: Language) -> str:
    return LABELS[language][key]
