"""The rules file: channels, owners and routing rules, validated as a whole.

A file either loads completely or is refused with a reason; there is no partial load. Secret
values (webhook URLs, signing secrets) can be written as ``${ENV_VAR}`` so the file itself can
be committed; they are held as ``SecretStr`` and never appear in logs or reprs.
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from trainwatch_common.events.jobs import JobChange, Phase

ChannelType = Literal["feishu", "dingtalk", "wecom", "slack", "webhook"]
Language = Literal["en", "zh-CN"]

_NOTIFIED_CHANGES: tuple[JobChange, ...] = ("created", "transition")
DEFAULT_PHASES = (Phase.FAILED, Phase.SUCCEEDED, Phase.RESTARTING, Phase.SUSPENDED)

_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,62})$")
_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

# Documented per-bot limits (reference §5.6, §6): (count, per seconds).
DEFAULT_RATE_LIMITS: dict[str, tuple[tuple[int, float], ...]] = {
    "feishu": ((5, 1.0), (100, 60.0)),
    "dingtalk": ((20, 60.0),),
    "wecom": ((20, 60.0),),
    "slack": ((1, 1.0),),
    "webhook": (),
}
FORMATS: dict[str, tuple[str, ...]] = {
    "feishu": ("card", "card-v1", "post", "text"),  # card: card JSON 2.0; card-v1: the 1.0 form
    "dingtalk": ("markdown", "text"),
    "wecom": ("markdown", "text"),
    "slack": ("blocks",),
    "webhook": ("cloudevent",),
}


class RulesError(ValueError):
    """The rules file was refused; the message says why."""


class RateLimit(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int = Field(ge=1)
    per_seconds: float = Field(gt=0)


class DigestConfig(BaseModel):
    """Burst control: past ``threshold`` messages in ``window_seconds``, events are collected for
    ``hold_seconds`` and sent as one digest."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    threshold: int = Field(10, ge=1)
    window_seconds: float = Field(60.0, gt=0)
    hold_seconds: float = Field(15.0, gt=0)
    max_listed: int = Field(
        20,
        ge=1,
        description="Jobs listed one by one in a digest (fewer if the channel's size limit needs it); "
        "the rest are counted",
    )


class ChannelConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    type: ChannelType
    url: SecretStr = Field(description="The webhook URL: a credential")
    secret: SecretStr | None = Field(None, description="Signing secret (Feishu, DingTalk, webhook HMAC)")
    format: str | None = Field(None, description="Body format; the channel type's default when unset")
    language: Language = "en"
    rate_limits: list[RateLimit] | None = Field(None, description="None: the documented limits; []: none")
    digest: DigestConfig = Field(default_factory=DigestConfig)
    timeout_seconds: float = Field(10.0, gt=0)
    concurrency: int = Field(
        1, ge=1, le=64, description="Parallel senders; each job stays on one, so its events keep their order"
    )

    @model_validator(mode="after")
    def _check_format(self) -> ChannelConfig:
        allowed = FORMATS[self.type]
        if self.format is not None and self.format not in allowed:
            raise ValueError(
                f"format {self.format!r} is not one of {list(allowed)} for a {self.type} channel"
            )
        if self.type == "webhook" and self.digest.enabled and "digest" in self.model_fields_set:
            raise ValueError("a generic webhook receives one CloudEvent per event: digests are not supported")
        if self.concurrency > 1 and self.digest_enabled:
            raise ValueError("concurrency > 1 needs digest: {enabled: false} (a digest collects one queue)")
        url = self.url.get_secret_value()
        if not url.startswith(("http://", "https://")):
            raise ValueError("url must be an http(s) URL")
        return self

    @property
    def body_format(self) -> str:
        return self.format or FORMATS[self.type][0]

    @property
    def limits(self) -> tuple[tuple[int, float], ...]:
        if self.rate_limits is None:
            return DEFAULT_RATE_LIMITS[self.type]
        return tuple((limit.count, limit.per_seconds) for limit in self.rate_limits)

    @property
    def digest_enabled(self) -> bool:
        return self.digest.enabled and self.type != "webhook"

    def bot_key(self) -> str:
        """Identifies the bot (for its rate limits): two channels on one URL share one bucket."""
        return f"{self.type}:{self.url.get_secret_value()}"


class OwnerIds(BaseModel):
    """One person's ids in each channel type (a Feishu open_id, a Slack member id...)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    feishu: str | None = Field(None, description="open_id (ou_...) or user_id")
    slack: str | None = Field(None, description="member id (U...)")
    dingtalk: str | None = Field(None, description="DingTalk userId")
    dingtalk_mobile: str | None = None
    wecom: str | None = Field(None, description="WeCom userid")
    name: str | None = Field(None, description="Display name; defaults to the owner key")


class Match(BaseModel):
    """Every given criterion must hold; an empty list or mapping matches anything."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    clusters: list[str] = Field(default_factory=list, description="Cluster ids (shell globs)")
    cluster_labels: dict[str, str] = Field(default_factory=dict)
    namespaces: list[str] = Field(default_factory=list, description="Shell globs")
    kinds: list[str] = Field(default_factory=list, description="Kind keys (pytorchjob) or kinds (PyTorchJob)")
    labels: dict[str, str] = Field(default_factory=dict, description="Job labels carried by the event")
    phases: list[Phase] | None = Field(None, description="None: the file's default phases")
    terminal: bool | None = Field(
        None, description="None: Succeeded/Failed only once terminal, other phases always"
    )
    changes: list[JobChange] = Field(default_factory=lambda: list(_NOTIFIED_CHANGES))


class Rule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    match: Match = Field(default_factory=Match)
    channels: list[str] = Field(min_length=1)
    mention_owner: bool = True


class Defaults(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    phases: list[Phase] = Field(default_factory=lambda: list(DEFAULT_PHASES))


class Ruleset(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    defaults: Defaults = Field(default_factory=Defaults)
    owner_label: str | None = Field(
        None, description="Job label naming the owner; unset: the event's owner (label or annotation)"
    )
    owners: dict[str, OwnerIds] = Field(default_factory=dict)
    channels: dict[str, ChannelConfig] = Field(default_factory=dict)
    rules: list[Rule] = Field(default_factory=list)
    unconfigured_channels: list[str] = Field(
        default_factory=list,
        description="Channels left out because their url is empty (e.g. TRAINWATCH_FEISHU_WEBHOOK "
        "unset in the deploy): nothing is routed to them; a rule with no other channel is left out too",
    )

    @field_validator("channels")
    @classmethod
    def _channel_names(cls, channels: dict[str, ChannelConfig]) -> dict[str, ChannelConfig]:
        bad = [name for name in channels if not _NAME_RE.match(name)]
        if bad:
            raise ValueError(f"channel names must be lower-case slugs (a-z, 0-9, '-', '_'): {bad}")
        return channels

    @model_validator(mode="after")
    def _references(self) -> Ruleset:
        names = [rule.name for rule in self.rules]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"rule names must be unique: {duplicates}")
        for rule in self.rules:
            unknown = [name for name in rule.channels if name not in self.channels]
            if unknown:
                raise ValueError(f"rule {rule.name!r} sends to undefined channels {unknown}")
        return self


def _without_unconfigured_channels(raw: dict[str, Any]) -> dict[str, Any]:
    """A channel whose url is empty after expansion means "no such route", not a bad file: the
    shipped deploy leaves TRAINWATCH_FEISHU_WEBHOOK empty until an operator has a bot, and the
    notifier must start (and be ready) with it. The channel and its mentions in rules are dropped
    and named in ``unconfigured_channels``; a rule left without channels is dropped too."""
    channels = raw.get("channels")
    if not isinstance(channels, dict):
        return raw
    empty = sorted(
        name
        for name, config in channels.items()
        if isinstance(config, dict) and isinstance(config.get("url"), str) and not config["url"].strip()
    )
    if not empty:
        return raw
    rules = []
    for rule in raw.get("rules") or []:
        if isinstance(rule, dict) and isinstance(rule.get("channels"), list):
            kept = [name for name in rule["channels"] if name not in empty]
            if not kept and rule["channels"]:
                continue
            rule = {**rule, "channels": kept}
        rules.append(rule)
    return {
        **raw,
        "channels": {name: config for name, config in channels.items() if name not in empty},
        "rules": rules,
        "unconfigured_channels": empty,
    }


def expand_env(value: Any, environ: dict[str, str] | os._Environ[str], where: str = "") -> Any:
    """Replace ``${VAR}`` in every string of a parsed YAML tree; a missing variable is an error."""
    if isinstance(value, str):

        def substitute(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in environ:
                raise RulesError(f"environment variable {name} is not set (used at {where or 'top level'})")
            return environ[name]

        return _ENV_RE.sub(substitute, value)
    if isinstance(value, dict):
        return {
            key: expand_env(item, environ, f"{where}.{key}" if where else str(key))
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [expand_env(item, environ, f"{where}[{index}]") for index, item in enumerate(value)]
    return value


def parse_ruleset(text: str, environ: dict[str, str] | None = None) -> Ruleset:
    """The ruleset in ``text``, or RulesError with a reason fit for a log line."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RulesError(f"not valid YAML: {exc}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RulesError("the rules file must be a YAML mapping")
    expanded = _without_unconfigured_channels(expand_env(raw, os.environ if environ is None else environ))
    try:
        return Ruleset.model_validate(expanded)
    except ValidationError as exc:
        reasons = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or '(file)'}: {error['msg']}"
            for error in exc.errors()
        )
        raise RulesError(reasons) from None
