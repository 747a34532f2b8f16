"""One module per channel type; ``build_channel`` picks the right one for a config."""

from __future__ import annotations

import httpx

from trainwatch_notifier.channels.base import Channel
from trainwatch_notifier.channels.dingtalk import DingTalkChannel
from trainwatch_notifier.channels.feishu import FeishuChannel
from trainwatch_notifier.channels.slack import SlackChannel
from trainwatch_notifier.channels.webhook import WebhookChannel
from trainwatch_notifier.channels.wecom import WeComChannel
from trainwatch_notifier.ruleset import ChannelConfig


def build_channel(name: str, config: ChannelConfig, client: httpx.AsyncClient) -> Channel:
    if config.type == "feishu":
        return FeishuChannel(name, config, client)
    if config.type == "dingtalk":
        return DingTalkChannel(name, config, client)
    if config.type == "wecom":
        return WeComChannel(name, config, client)
    if config.type == "slack":
        return SlackChannel(name, config, client)
    return WebhookChannel(name, config, client)
