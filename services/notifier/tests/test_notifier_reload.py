"""Rules are reloaded when the file changes; a bad file is refused and the previous rules stay."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from nats.js import JetStreamContext
from notifier_support import feishu_rules, make_event, publish, running, settings_for
from prometheus_client import REGISTRY

from trainwatch_common.testing import eventually
from trainwatch_notifier.app import Notifier
from trainwatch_notifier.rules_source import RulesSource
from trainwatch_notifier.sink import FeishuSink

GOOD = "channels: {c: {type: slack, url: 'https://hooks.slack.com/x'}}\nrules: [{name: r, channels: [c]}]\n"


def refused_total() -> float:
    return REGISTRY.get_sample_value("trainwatch_notifier_rules_reloads_total", {"result": "refused"}) or 0.0


def bump_mtime(path: Path) -> None:
    """Rewrites within one mtime tick still differ in size or content; make the tick explicit too."""
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))


def test_source_reloads_refuses_and_keeps_the_previous_rules(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(GOOD)
    seen = []
    source = RulesSource(path, on_change=seen.append)
    first = source.load()
    assert source.version == 1
    source.poll()
    assert source.version == 1  # unchanged file: nothing happens
    bump_mtime(path)
    source.poll()
    assert source.version == 1  # touched, same content: not a reload
    before = refused_total()
    path.write_text("rules: [{name: r, channels: [missing]}]\n")
    bump_mtime(path)
    source.poll()
    assert source.current is first
    assert source.last_error is not None
    assert "undefined channels ['missing']" in source.last_error
    assert refused_total() == before + 1
    assert REGISTRY.get_sample_value("trainwatch_notifier_rules_file_valid") == 0
    source.poll()
    assert refused_total() == before + 1  # refused once per change, not once per poll
    path.unlink()
    source.poll()
    assert source.current is first
    assert refused_total() == before + 2
    path.write_text(GOOD.replace("r,", "r2,"))
    source.poll()
    assert source.version == 2
    assert source.current.rules[0].name == "r2"
    assert source.last_error is None
    assert [ruleset.rules[0].name for ruleset in seen] == ["r", "r2"]


async def test_a_running_notifier_follows_the_file(
    nats_url: str,
    redis_url: str,
    js: JetStreamContext,
    feishu_sink: FeishuSink,
    rules_path: Callable[[str], Path],
) -> None:
    path = rules_path(feishu_rules(feishu_sink.url("first")))
    notifier = Notifier(settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=path))
    async with running(notifier):
        await publish(js, make_event(name="a"))
        await eventually(lambda: [r.token for r in feishu_sink.received] == ["first"])

        path.write_text(feishu_rules(feishu_sink.url("second")))
        bump_mtime(path)
        await eventually(lambda: notifier.rules.version == 2, message="new rules in force")
        await publish(js, make_event(name="b"))
        await eventually(lambda: [r.token for r in feishu_sink.received] == ["first", "second"])

        path.write_text("channels: {x: {type: carrier-pigeon, url: 'https://x'}}\n")
        bump_mtime(path)
        await eventually(lambda: notifier.rules.last_error is not None, message="bad file refused")
        assert notifier.rules.version == 2
        await publish(js, make_event(name="c"))
        await eventually(lambda: [r.token for r in feishu_sink.received] == ["first", "second", "second"])

        # a channel removed by a reload: its worker retires, events now go nowhere
        path.write_text("rules: []\n")
        bump_mtime(path)
        await eventually(lambda: notifier.rules.version == 3)
        await publish(js, make_event(name="d"))

        async def acked() -> bool:
            info = await js.consumer_info("JOBS", "notifier")
            return info.num_ack_pending == 0 and info.num_pending == 0

        await eventually(acked)
    assert len(feishu_sink.received) == 3
