"""The pure parts: formatting, form parsing, counts, the message catalog, error wording."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from trainwatch_common.kubeconfig_yaml import MAX_DOCUMENT_BYTES
from trainwatch_dashboard import i18n, presenters
from trainwatch_dashboard.backends import Page, problems_of


def test_times_and_durations() -> None:
    assert presenters.format_time("2026-11-29T15:00:05Z") == "2026-11-29 15:00:05"
    assert presenters.format_time("2026-11-29T23:00:05+08:00") == "2026-11-29 15:00:05"
    assert presenters.format_time(None) == "—"
    assert presenters.format_time("not a time") == "—"
    assert presenters.format_duration(3.25) == "3.2s"
    assert presenters.format_duration(75) == "1m 15s"
    assert presenters.format_duration(3 * 3600 + 120) == "3h 2m"
    assert presenters.format_duration(2 * 86400 + 3600) == "2d 1h"
    assert presenters.format_duration(None) == "—"


def test_job_duration_runs_until_now_or_finish() -> None:
    now = datetime(2026, 11, 29, 16, 0, tzinfo=UTC)
    running = {"started_at": "2026-11-29T15:00:00Z", "terminal": False}
    assert presenters.job_duration(running, now) == 3600
    done = {"started_at": "2026-11-29T15:00:00Z", "finished_at": "2026-11-29T15:30:00Z", "terminal": True}
    assert presenters.job_duration(done, now) == 1800
    assert presenters.job_duration({"terminal": True, "created_at": "2026-11-29T15:00:00Z"}, now) is None


def test_labels_round_trip_and_refusal() -> None:
    assert presenters.parse_labels("env=prod\n team = ml \n\n") == {"env": "prod", "team": "ml"}
    assert presenters.parse_labels("a=1,b=2") == {"a": "1", "b": "2"}
    assert presenters.format_labels({"a": "1", "b": "2"}) == "a=1\nb=2"
    with pytest.raises(ValueError, match="key=value"):
        presenters.parse_labels("just-a-word")


def test_cluster_form_becomes_the_registry_body() -> None:
    form = {
        "id": " gpu-east ",
        "name": "",
        "labels": "env=prod",
        "kubeconfig": "k",
        "context": "ctx",
        "include_namespaces": "a, b",
        "exclude_namespaces": "",
        "kinds": "pytorchjob",
        "owner_label": " owner ",
    }
    spec = presenters.cluster_spec(form)
    assert spec == {
        "id": "gpu-east",
        "name": "gpu-east",
        "description": "",
        "labels": {"env": "prod"},
        "kubeconfig": "k",
        "context": "ctx",
        "watch": {
            "include_namespaces": ["a", "b"],
            "exclude_namespaces": [],
            "kinds": ["pytorchjob"],
            "owner_label": "owner",
            "owner_annotation": None,
        },
    }
    assert "context" not in presenters.cluster_spec({"id": "x", "kubeconfig": "k"})
    assert "kubeconfig" not in presenters.metadata_changes(form)


def test_kubeconfig_contexts_yaml_json_and_refusals() -> None:
    yaml_text = "contexts:\n- name: a\n  context: {cluster: c}\n- name: b\ncurrent-context: b\n"
    assert presenters.kubeconfig_contexts(yaml_text) == (["a", "b"], "b")
    assert presenters.kubeconfig_contexts('{"contexts": [{"name": "j"}], "current-context": "x"}') == (
        ["j"],
        None,
    )
    for bad, reason in (("[1, 2]", "mapping"), ("a: [", "invalid YAML"), ("contexts: 3", "not a list")):
        with pytest.raises(ValueError, match=reason):
            presenters.kubeconfig_contexts(bad)
    with pytest.raises(ValueError, match="1 MiB"):
        presenters.kubeconfig_contexts("#" * (MAX_DOCUMENT_BYTES + 1))


def test_phase_counts_from_the_persisters_rows_and_other_shapes() -> None:
    rows = {"by_cluster_phase": [{"cluster_id": "a", "phase": "Running", "count": 2},
                                 {"cluster_id": "a", "phase": "Failed", "count": 1}]}  # fmt: skip
    assert presenters.phase_counts(rows) == {"a": {"Running": 2, "Failed": 1}}
    assert presenters.phase_counts({"by_cluster": {"b": {"Pending": 4}}}) == {"b": {"Pending": 4}}
    assert presenters.phase_counts({}) == {}
    assert presenters.sorted_phase_counts({"Failed": 1, "Running": 2, "Pending": 0}) == [
        ("Running", 2),
        ("Failed", 1),
    ]


def test_fresher_health_wins() -> None:
    old = {"reachable": False, "observed_at": "2026-11-29T15:00:00Z"}
    new = {"reachable": True, "observed_at": "2026-11-29T15:00:09Z"}
    assert presenters.fresher_health(old, new) == new
    assert presenters.fresher_health(new, old) == new
    assert presenters.fresher_health(None, old) == old
    assert presenters.fresher_health(None, None) is None


def test_job_filters_drop_empty_values_and_unknown_keys() -> None:
    params = {"cluster": "a", "phase": "", "name": " res ", "sort": "name", "evil": "x"}
    assert presenters.job_filters(params) == {"cluster": "a", "name": "res"}
    assert (
        presenters.query_string({"cluster": "a", "cursor": "c1"}, cursor=None, lang="en")
        == "cluster=a&lang=en"
    )


def test_every_message_has_a_chinese_translation() -> None:
    missing = sorted(set(i18n.EN) - set(i18n.ZH))
    assert missing == []
    assert set(i18n.client_messages("zh-CN")) == set(i18n.client_messages("en"))


def test_language_choice_order() -> None:
    assert i18n.pick_language("zh-CN", "en", "en") == "zh-CN"
    assert i18n.pick_language("fr", "zh-CN", "en") == "zh-CN"
    assert i18n.pick_language(None, None, "zh-TW,zh;q=0.9,en;q=0.8") == "zh-CN"
    assert i18n.pick_language(None, None, "de-DE") == "en"
    t = i18n.translator("zh-CN")
    assert t("jobs.total", total=3) == "共 3 个任务"
    assert t("no.such.key") == "no.such.key"
    assert i18n.phase_label("zh-CN", "Failed") == "失败"
    assert i18n.phase_label("en", "Failed") == "Failed"


def test_problems_are_read_from_every_error_shape() -> None:
    fastapi_422 = {"detail": [{"loc": ["body", "kubeconfig"], "msg": "no server", "type": "x"}]}
    assert problems_of(fastapi_422) == ["kubeconfig: no server"]
    assert problems_of({"detail": "cluster x exists"}) == ["cluster x exists"]
    assert problems_of({"message": "boom"}) == ["boom"]
    assert problems_of("plain text") == ["plain text"]
    assert problems_of({}) == []


def test_page_reads_the_list_shapes() -> None:
    page = Page.from_body({"data": [{"a": 1}], "total": 7, "next_cursor": "n"})
    assert (page.items, page.total, page.next_cursor) == ([{"a": 1}], 7, "n")
    assert Page.from_body([{"a": 1}]).total == 1
    assert Page.from_body(None).items == []
