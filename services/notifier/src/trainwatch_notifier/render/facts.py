"""What a message says, independent of the channel: the facts of one job event, or of a burst,
in English or Chinese, plus the size-fitting every channel needs."""

# ruff: noqa: RUF001, RUF002  (Chinese punctuation is meant)

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Literal

from trainwatch_common.events.diagnosis import Diagnosis
from trainwatch_common.events.jobs import JobStatusEvent, Phase, ReplicaCounts, SubPhase
from trainwatch_notifier.render import diagnosis as why
from trainwatch_notifier.ruleset import Language

PHASE_NAMES: dict[Language, dict[str, str]] = {
    "en": {p.value: p.value for p in Phase},
    "zh-CN": {
        "Pending": "等待中",
        "Running": "运行中",
        "Restarting": "重启中",
        "Suspended": "已暂停",
        "Succeeded": "成功",
        "Failed": "失败",
        "Unknown": "未知",
    },
}

# A sub-phase says where in its phase the job is (queued, initializing...): after the phase's name.
SUB_PHASE_NAMES: dict[Language, dict[str, str]] = {
    "en": {s.value: s.value.lower() for s in SubPhase},
    "zh-CN": {
        "Created": "已创建",
        "Queued": "排队中",
        "Scheduling": "调度中",
        "Initializing": "初始化中",
        "Waiting": "等待中",
        "Finishing": "收尾中",
        "Aborting": "中止中",
    },
}

# Between a label and its value, and between the items of a list: Chinese text takes full-width
# punctuation, with no space after it.
COLON: dict[Language, str] = {"en": ": ", "zh-CN": "："}
COMMA: dict[Language, str] = {"en": ", ", "zh-CN": "，"}
SEMICOLON: dict[Language, str] = {"en": "; ", "zh-CN": "；"}

LABELS: dict[Language, dict[str, str]] = {
    "en": {
        "cluster": "Cluster",
        "reason": "Reason",
        "message": "Message",
        "duration": "Duration",
        "replicas": "Replicas",
        "restarts": "Restarts",
        "owner": "Owner",
        "open": "Open in dashboard",
        "silence": "Silence this job for 1 h",
        "title": "{kind} {namespace}/{name} {phase}",
        "digest_title": "{count} job updates in {seconds}s",
        "digest_more": "…and {count} more",
        "digest_more_clusters": "…and {count} more clusters",
        "replicas_of": "{active} of {desired} running",
        "replicas_running": "{active} running",
        "replicas_succeeded": "{count} succeeded",
        "replicas_failed": "{count} failed",
    },
    "zh-CN": {
        "cluster": "集群",
        "reason": "原因",
        "message": "信息",
        "duration": "时长",
        "replicas": "副本",
        "restarts": "重启次数",
        "owner": "负责人",
        "open": "在控制台查看",
        "silence": "静默此任务 1 小时",
        "title": "训练任务{phase}：{kind} {namespace}/{name}",
        "digest_title": "{seconds} 秒内 {count} 个任务状态变化",
        "digest_more": "……另有 {count} 个",
        "digest_more_clusters": "……另有 {count} 个集群",
        "replicas_of": "共 {desired} 个，运行中 {active} 个",
        "replicas_running": "运行中 {active} 个",
        "replicas_succeeded": "成功 {count} 个",
        "replicas_failed": "失败 {count} 个",
    },
}

# Feishu card header templates; also used to pick emoji for plain-text channels.
PHASE_COLOURS: dict[str, str] = {
    "Failed": "red",
    "Succeeded": "green",
    "Restarting": "orange",
    "Suspended": "grey",
    "Running": "blue",
    "Pending": "wathet",
    "Unknown": "grey",
}
PHASE_ICONS: dict[str, str] = {
    "Failed": "❌",
    "Succeeded": "✅",
    "Restarting": "🔁",
    "Suspended": "⏸️",
    "Running": "▶️",
    "Pending": "⏳",
    "Unknown": "❔",
}


# Full-width look-alikes of the characters that open a link ([x](url)), a tag (<at …>, <@U1>,
# <!channel>, <font>) or a mention (@all) in the chat markups; they read the same and do nothing.
_INERT = {"[": "\uff3b", "]": "\uff3d", "<": "\uff1c", ">": "\uff1e", "@": "\uff20"}


def neutralise(value: str, *, chars: str = "[]<>@") -> str:
    """Text from a cluster made inert in a chat markup that documents no escape (DingTalk, WeCom):
    each of ``chars`` becomes its full-width look-alike, and "://" gets a zero-width space so no
    renderer turns a bare URL into a link. Only Trainwatch decides who is mentioned and what links."""
    for char in chars:
        value = value.replace(char, _INERT[char])
    return value.replace("://", ":\u200b//")


@dataclass(frozen=True, slots=True)
class Mention:
    """Who to @: a display name and the channel-specific id (None: show the name only).

    The name may come from a job's owner annotation (cluster data), and every channel writes it
    into its markup, so it is made inert here, once, for all of them. The ids come from the rules.
    """

    name: str
    user_id: str | None
    mobile: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", neutralise(self.name))  # frozen: set once, at creation


# Free text a job's message can be trimmed in, in the order it is given up: the diagnosis' log tail
# (its oldest lines first) and Warning events before the job's own message. Kubernetes bounds the
# rest (a namespace is at most 63 characters, a name 253), and the diagnosis' fields are bounded.
TrimmableField = Literal["log", "warnings", "message", "reason", "owner", "cluster"]
TRIMMED_IN_ORDER: tuple[TrimmableField, ...] = ("log", "warnings", "message", "reason", "owner", "cluster")
REASON_MAX_CHARS = 256  # a condition's reason is a CamelCase word; longer, it must not crowd out the message
DIGEST_REASON_MAX_CHARS = 100  # a digest gives each job one line


@dataclass(frozen=True, slots=True)
class JobFacts:
    event: JobStatusEvent
    cluster_name: str
    link: str
    language: Language
    mention: Mention | None
    # The diagnosis' Warning event lines and log lines once trimmed to fit ("\n"-joined); None: all.
    warnings_text: str | None = None
    log_text: str | None = None
    evidence_chars: int = why.VALUE_MAX_CHARS  # each evidence value; lowered only if all else is cut
    # The signed dashboard link that offers to silence this job for an hour (issue 18); None: none.
    silence_link: str | None = None

    def label(self, key: str) -> str:
        return LABELS[self.language][key]

    @property
    def colon(self) -> str:
        """Between a label and its value (full-width in Chinese)."""
        return COLON[self.language]

    @property
    def diagnosis(self) -> Diagnosis | None:
        return self.event.diagnosis

    def reason_line(self) -> str | None:
        """The one plain line a message leads with when the event says why (issue 16)."""
        return why.reason_line(self.diagnosis, self.language) if self.diagnosis else None

    def warnings(self) -> list[str]:
        text = self.text("warnings")
        return text.split("\n") if text else []

    def log(self) -> list[str]:
        text = self.text("log")
        return text.split("\n") if text else []

    def log_title(self) -> str:
        return why.log_title(self.diagnosis, self.language) if self.diagnosis else ""

    def diagnosis_label(self, key: str) -> str:
        return why.section_label(key, self.language)

    def text(self, field: TrimmableField) -> str:
        if field == "log":
            if self.log_text is not None:
                return self.log_text
            return "\n".join(why.log_lines(self.diagnosis)) if self.diagnosis else ""
        if field == "warnings":
            if self.warnings_text is not None:
                return self.warnings_text
            return "\n".join(why.warning_lines(self.diagnosis)) if self.diagnosis else ""
        if field == "message":
            return self.event.message or ""
        if field == "reason":
            return self.event.reason or ""
        if field == "owner":
            return self.mention.name if self.mention else ""
        return self.cluster_name

    def with_text(self, field: TrimmableField, value: str) -> JobFacts:
        """The same facts with one free-text field replaced (trimmed to fit a channel)."""
        if field == "log":
            return replace(self, log_text=value)
        if field == "warnings":
            return replace(self, warnings_text=value)
        if field in ("message", "reason"):
            return replace(self, event=self.event.model_copy(update={field: value}))
        if field == "owner":
            return replace(self, mention=replace(self.mention, name=value)) if self.mention else self
        return replace(self, cluster_name=value)

    @property
    def phase_name(self) -> str:
        """The phase, and where in it the job is: "Pending (queued)", "等待中（排队中）"."""
        name = PHASE_NAMES[self.language][self.event.phase.value]
        # Terminal: the outcome is final, whatever sub-phase the event still names.
        sub_phase = None if self.event.terminal else self.event.sub_phase
        finishing = self.event.phase in (Phase.SUCCEEDED, Phase.FAILED) and not self.event.terminal
        if sub_phase is None and finishing:
            sub_phase = SubPhase.FINISHING
        if sub_phase is None:
            return name
        detail = SUB_PHASE_NAMES[self.language][sub_phase.value]
        return f"{name} ({detail})" if self.language == "en" else f"{name}（{detail}）"

    @property
    def colour(self) -> str:
        return PHASE_COLOURS[self.event.phase.value]

    @property
    def icon(self) -> str:
        return PHASE_ICONS[self.event.phase.value]

    def title(self) -> str:
        job = self.event.job
        return self.label("title").format(
            kind=job.kind, namespace=job.namespace, name=job.name, phase=self.phase_name
        )

    def cluster_text(self) -> str:
        cluster_id = self.event.job.cluster_id
        return cluster_id if self.cluster_name in ("", cluster_id) else f"{self.cluster_name} ({cluster_id})"

    def duration(self) -> str | None:
        event = self.event
        start = event.started_at or event.created_at
        end = event.finished_at or event.observed_at
        if start is None or end < start:
            return None
        return format_duration(end - start, self.language)

    def replicas(self) -> str | None:
        """One plain phrase per replica role: "Worker: 3 of 4 running, 1 failed"."""
        parts = [
            f"{role}{self.colon}{self._replica_counts(counts)}"
            for role, counts in sorted(self.event.replicas.items())
        ]
        return SEMICOLON[self.language].join(parts) or None

    def _replica_counts(self, counts: ReplicaCounts) -> str:
        if counts.desired is not None:
            numbers = [self.label("replicas_of").format(active=counts.active, desired=counts.desired)]
        else:
            numbers = [self.label("replicas_running").format(active=counts.active)]
        if counts.succeeded:
            numbers.append(self.label("replicas_succeeded").format(count=counts.succeeded))
        if counts.failed:
            numbers.append(self.label("replicas_failed").format(count=counts.failed))
        return COMMA[self.language].join(numbers)

    def fields(self, *, message: str | None) -> list[tuple[str, str]]:
        """(label, value) pairs in display order, empty values left out. The kind, namespace, name
        and phase are the title's: not repeated here."""
        rows = [
            ("cluster", self.cluster_text()),
            ("reason", self.event.reason or ""),
            ("message", message or ""),
            ("duration", self.duration() or ""),
            ("replicas", self.replicas() or ""),
            ("restarts", str(self.event.restart_count) if self.event.restart_count else ""),
            ("owner", self.mention.name if self.mention else ""),
        ]
        labelled = [(self.label(key), value) for key, value in rows if value]
        return labelled + self.evidence()

    def evidence(self) -> list[tuple[str, str]]:
        """The diagnosis' evidence (pod, container, exit code, node, GPUs...), after the job's fields."""
        if self.diagnosis is None:
            return []
        wait = self.event.queue_wait_seconds
        queue_wait = format_duration(timedelta(seconds=wait), self.language) if wait is not None else None
        return why.evidence(
            self.diagnosis, self.event.resources, queue_wait, self.language, max_chars=self.evidence_chars
        )


DigestKnob = Literal["max_listed", "max_clusters"]


@dataclass(frozen=True, slots=True)
class DigestFacts:
    """A burst: many events for one channel collected over ``seconds``.

    ``max_listed`` jobs are listed one by one and the rest counted; ``fit_digest`` lowers it (and,
    if need be, ``max_clusters``) until the digest fits its channel. A digest @-mentions nobody:
    a burst of 500 jobs must not ping each of their owners (each job's own card would).
    """

    items: Sequence[JobFacts]
    seconds: int
    language: Language
    dashboard_url: str  # where its "open" link goes: the digest's own view of its jobs
    max_listed: int
    reason_chars: int = DIGEST_REASON_MAX_CHARS
    max_clusters: int | None = None  # summary lines; None: one per cluster

    def label(self, key: str) -> str:
        return LABELS[self.language][key]

    @property
    def colon(self) -> str:
        return COLON[self.language]

    def title(self) -> str:
        return self.label("digest_title").format(count=len(self.items), seconds=self.seconds)

    def summary(self) -> list[str]:
        """One line per cluster: "prod-a: 180 Failed, 20 Succeeded"."""
        per_cluster: dict[str, Counter[str]] = {}
        for item in self.items:
            per_cluster.setdefault(item.cluster_text(), Counter())[item.phase_name] += 1
        comma = COMMA[self.language]
        lines = [
            cluster + self.colon + comma.join(self._count(n, phase) for phase, n in counts.most_common())
            for cluster, counts in per_cluster.items()
        ]
        if self.max_clusters is not None and len(lines) > self.max_clusters:
            rest = len(lines) - self.max_clusters
            lines = [*lines[: self.max_clusters], self.label("digest_more_clusters").format(count=rest)]
        return lines

    def _count(self, count: int, phase: str) -> str:
        return f"{count} {phase}" if self.language == "en" else f"{phase} {count} 个"

    def listed(self) -> Sequence[JobFacts]:
        return self.items[: self.max_listed]

    def reason(self, item: JobFacts) -> str:
        """A listed job's one line of why: its diagnosis' reason line when it has one."""
        return shorten(item.reason_line() or item.event.reason or "", self.reason_chars)

    def more(self) -> str | None:
        rest = len(self.items) - len(self.listed())
        return self.label("digest_more").format(count=rest) if rest > 0 else None

    def limited(self, knob: DigestKnob, count: int) -> DigestFacts:
        """The same digest with one of its limits set (``fit_digest`` searches each)."""
        if knob == "max_listed":
            return replace(self, max_listed=count)
        return replace(self, max_clusters=count)


def format_duration(delta: timedelta, language: Language) -> str:
    seconds = int(delta.total_seconds())
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    units = ("d", "h", "m", "s") if language == "en" else ("天", "小时", "分钟", "秒")
    parts = [
        f"{value}{unit}" for value, unit in zip((days, hours, minutes, secs), units, strict=True) if value
    ]
    return (" " if language == "en" else "").join(parts[:3]) or f"0{units[3]}"


def job_link(dashboard_url: str, event: JobStatusEvent) -> str:
    return f"{dashboard_url.rstrip('/')}/jobs/{event.job.cluster_id}/{event.job.uid}"


def shorten(text: str, chars: int) -> str:
    """At most ``chars`` characters; a longer text ends in an ellipsis."""
    if len(text) <= chars:
        return text
    return text[: chars - 1].rstrip() + "…" if chars > 1 else ""


def longest_prefix(size: Callable[[str], int], text: str, limit: int) -> str:
    """The longest prefix of ``text`` (with "…" if cut) for which ``size(prefix) <= limit``; ""
    if none does. Sizes are whatever the channel limits (bytes of a body, characters of a block)."""
    if size(text) <= limit:
        return text
    low, high = 0, len(text)
    best = ""
    while low <= high:  # binary search on the prefix length: sizes grow with it
        middle = (low + high) // 2
        candidate = text[:middle].rstrip() + "…" if middle else ""
        if size(candidate) <= limit:
            best, low = candidate, middle + 1
        else:
            high = middle - 1
    return best


def longest_suffix(size: Callable[[str], int], text: str, limit: int) -> str:
    """The longest suffix of ``text`` (with "…" if cut) for which ``size(suffix) <= limit``: a log
    tail keeps its newest lines."""
    if size(text) <= limit:
        return text
    low, high = 0, len(text)
    best = ""
    while low <= high:
        middle = (low + high) // 2
        candidate = "…" + text[len(text) - middle :].lstrip() if middle else ""
        if size(candidate) <= limit:
            best, low = candidate, middle + 1
        else:
            high = middle - 1
    return best


def fit_job(size: Callable[[JobFacts], int], facts: JobFacts, limit: int) -> JobFacts:
    """The facts with their free text trimmed until ``size(facts) <= limit``: the reason to
    ``REASON_MAX_CHARS`` first, then the diagnosis' log tail (oldest lines first) and Warning
    events, the message, the reason, the owner's name, the cluster's name, each only as far as
    needed. ValueError only if the job's fixed fields alone are too big."""
    facts = facts.with_text("reason", shorten(facts.text("reason"), REASON_MAX_CHARS))
    for field in TRIMMED_IN_ORDER:
        if size(facts) <= limit:
            return facts
        facts = _trim_field(size, facts, field, limit)
    if size(facts) > limit and facts.diagnosis is not None:
        facts = _shorten_evidence(size, facts, limit)
    if size(facts) > limit:
        raise ValueError(f"the message does not fit in {limit} even without its text")
    return facts


def _shorten_evidence(size: Callable[[JobFacts], int], facts: JobFacts, limit: int) -> JobFacts:
    """The longest evidence values that fit (a 2 KB text message of a job with 253-character names)."""
    low, high = 0, facts.evidence_chars
    best = replace(facts, evidence_chars=0)
    while low <= high:
        middle = (low + high) // 2
        candidate = replace(facts, evidence_chars=middle)
        if size(candidate) <= limit:
            best, low = candidate, middle + 1
        else:
            high = middle - 1
    return best


def _trim_field(
    size: Callable[[JobFacts], int], facts: JobFacts, field: TrimmableField, limit: int
) -> JobFacts:
    def size_with(value: str) -> int:
        return size(facts.with_text(field, value))

    keep = longest_suffix if field == "log" else longest_prefix
    return facts.with_text(field, keep(size_with, facts.text(field), limit))


def fit_digest(size: Callable[[DigestFacts], int], digest: DigestFacts, limit: int) -> DigestFacts:
    """The digest listing as many jobs as fit ``size(digest) <= limit`` (the rest are counted, "…and
    37 more"); if none fit, fewer cluster lines. ValueError only if its title
    and counts alone are too big."""
    if size(digest) <= limit:
        return digest
    knobs: tuple[tuple[DigestKnob, int], ...] = (
        ("max_listed", len(digest.listed())),
        ("max_clusters", len(digest.summary())),
    )
    for knob, most in knobs:
        count = _largest_count(size, digest, knob, most, limit)
        if count is not None:
            return digest.limited(knob, count)
        digest = digest.limited(knob, 0)
    raise ValueError(f"the digest does not fit in {limit} even without its jobs")


def _largest_count(
    size: Callable[[DigestFacts], int], digest: DigestFacts, knob: DigestKnob, most: int, limit: int
) -> int | None:
    """The largest value in [0, most] of one of the digest's limits that fits (sizes grow with it)."""
    low, high = 0, most
    best: int | None = None
    while low <= high:
        middle = (low + high) // 2
        if size(digest.limited(knob, middle)) <= limit:
            best, low = middle, middle + 1
        else:
            high = middle - 1
    return best
