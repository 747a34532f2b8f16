"""Trainwatch notifier: job-status events from JetStream to Feishu, DingTalk, WeCom, Slack and
webhooks, routed by hot-reloaded rules, rate-limited per bot, and sent once."""
