"""Routing (pure) and the validation of the rules file."""

from __future__ import annotations

import pytest
from notifier_support import make_event

from trainwatch_common import Phase
from trainwatch_notifier.rules import route
from trainwatch_notifier.ruleset import RulesError, parse_ruleset

RULES = """
owner_label: example.com/owner
owners:
  alice: {feishu: ou_alice, slack: U_ALICE, name: Alice}
channels:
  prod-feishu: {type: feishu, url: "https://open.feishu.cn/open-apis/bot/v2/hook/t1"}
  team-a-slack: {type: slack, url: "https://hooks.slack.com/services/T/B/x"}
  audit: {type: webhook, url: "https://audit.example.com/hook"}
rules:
  - name: prod-failures
    match: {cluster_labels: {env: prod}, phases: [Failed]}
    channels: [prod-feishu]
  - name: team-a
    match: {namespaces: ["team-a*"], kinds: [PyTorchJob, mpijob], labels: {team: ml}}
    channels: [team-a-slack, prod-feishu]
    mention_owner: false
  - name: audit-everything
    match: {phases: [Pending, Running, Restarting, Suspended, Succeeded, Failed, Unknown], terminal: null}
    channels: [audit]
    mention_owner: false
"""


def channels(event, labels=None) -> list[str]:  # type: ignore[no-untyped-def]
    return [d.channel for d in route(event, cluster_labels=labels or {}, ruleset=parse_ruleset(RULES))]


def test_cluster_labels_namespace_kind_and_job_labels_select_rules() -> None:
    failed = make_event(phase=Phase.FAILED, labels={"team": "ml"})
    assert channels(failed, {"env": "prod"}) == ["prod-feishu", "team-a-slack", "audit"]
    assert channels(failed, {"env": "dev"}) == ["team-a-slack", "prod-feishu", "audit"]
    assert channels(make_event(phase=Phase.FAILED), {"env": "dev"}) == ["audit"]  # no team label
    assert channels(make_event(namespace="other", labels={"team": "ml"})) == ["audit"]
    assert channels(make_event(kind="TFJob", kind_key="tfjob", labels={"team": "ml"})) == ["audit"]
    mpi = make_event(kind="MPIJob", kind_key="mpijob", namespace="team-a-2", labels={"team": "ml"})
    assert channels(mpi) == ["team-a-slack", "prod-feishu", "audit"]


def test_default_phases_and_finishing_outcomes() -> None:
    ruleset = parse_ruleset(
        "channels: {c: {type: slack, url: 'https://x'}}\nrules: [{name: r, channels: [c]}]"
    )

    def routed(**kwargs: object) -> bool:
        return bool(route(make_event(**kwargs), cluster_labels={}, ruleset=ruleset))  # type: ignore[arg-type]

    assert routed(phase=Phase.FAILED)
    assert routed(phase=Phase.SUCCEEDED)
    assert routed(phase=Phase.RESTARTING)
    assert routed(phase=Phase.SUSPENDED)
    assert not routed(phase=Phase.RUNNING)  # optional: only when a rule asks for it
    assert not routed(phase=Phase.PENDING)
    assert not routed(phase=Phase.FAILED, terminal=False)  # finishing: the terminal event follows
    assert not routed(phase=Phase.FAILED, change="deleted")
    # the audit rule asks for every phase with terminal: null; finishing outcomes still wait
    assert channels(make_event(phase=Phase.RUNNING)) == ["audit"]


def test_owner_mention_from_label_or_event_owner() -> None:
    ruleset = parse_ruleset(RULES)
    by_label = route(
        make_event(labels={"example.com/owner": "alice"}), cluster_labels={"env": "prod"}, ruleset=ruleset
    )
    first = by_label[0]
    assert first.channel == "prod-feishu"
    assert first.mention is not None
    assert first.mention.ids is not None
    assert first.mention.ids.feishu == "ou_alice"
    assert first.mention.display_name == "Alice"
    by_owner = route(make_event(owner="bob"), cluster_labels={"env": "prod"}, ruleset=ruleset)
    assert by_owner[0].mention is not None
    assert by_owner[0].mention.key == "bob"
    assert by_owner[0].mention.ids is None
    # mention_owner: false on every matching rule for that channel: no mention
    team = route(make_event(owner="alice", labels={"team": "ml"}), cluster_labels={}, ruleset=ruleset)
    assert [d.mention for d in team] == [None, None, None]
    # one rule asking is enough, and each channel is reached once with all its rules listed
    both = route(
        make_event(owner="alice", labels={"team": "ml"}), cluster_labels={"env": "prod"}, ruleset=ruleset
    )
    feishu = next(d for d in both if d.channel == "prod-feishu")
    assert feishu.rules == ("prod-failures", "team-a")
    assert feishu.mention is not None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("rules: [{name: r, channels: [nope]}]", "undefined channels ['nope']"),
        ("channels: {c: {type: feishu, url: 'https://x', format: blocks}}", "format 'blocks' is not one of"),
        ("channels: {c: {type: pigeon, url: 'https://x'}}", "channels.c.type"),
        ("channels: {C: {type: slack, url: 'https://x'}}", "lower-case slugs"),
        ("channels: {c: {type: slack, url: 'ftp://x'}}", "http(s) URL"),
        ("channels: {c: {type: slack, url: '${NOT_SET_ANYWHERE}'}}", "NOT_SET_ANYWHERE is not set"),
        (
            "rules: [{name: r, channels: [c], match: {phases: [Exploded]}}]\nchannels: {c: {type: slack, url: 'https://x'}}",
            "phases",
        ),
        ("rules: [", "not valid YAML"),
        ("- just a list", "must be a YAML mapping"),
        ("colour: blue", "colour: Extra inputs are not permitted"),
    ],
)
def test_bad_files_are_refused_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(RulesError) as refused:
        parse_ruleset(text, environ={})
    assert reason in str(refused.value)


def test_secrets_come_from_the_environment_and_stay_hidden() -> None:
    ruleset = parse_ruleset(
        "channels: {c: {type: feishu, url: '${HOOK}', secret: '${SECRET}'}}",
        environ={"HOOK": "https://open.feishu.cn/open-apis/bot/v2/hook/abc", "SECRET": "s3cr3t"},
    )
    config = ruleset.channels["c"]
    assert config.url.get_secret_value().endswith("/abc")
    assert "s3cr3t" not in repr(ruleset)
    assert "/abc" not in repr(ruleset)
    assert config.limits == ((5, 1.0), (100, 60.0))  # the documented Feishu limits by default


def test_the_example_rules_file_loads() -> None:
    from pathlib import Path

    example = Path(__file__).parents[1] / "rules.example.yaml"
    environ = {"TRAINWATCH_FEISHU_WEBHOOK": "http://127.0.0.1:9100/hook/x", "TRAINWATCH_FEISHU_SECRET": "s"}
    ruleset = parse_ruleset(example.read_text(), environ=environ)
    assert ruleset.channels["demo-feishu"].url.get_secret_value() == "http://127.0.0.1:9100/hook/x"
    assert "bob@example.com" in ruleset.owners
    assert [rule.name for rule in ruleset.rules] == ["job-outcomes"]
