"""The one kubeconfig parser (``trainwatch_common.kubeconfig_yaml.load_mapping``) under attack.

Every service that reads an operator's kubeconfig calls it, so each hostile document here must be
refused with a ``DocumentRefused`` that names the problem, never with another exception (which a
web service would turn into a 500) and never after expanding it in memory.
"""

from __future__ import annotations

import time

import pytest

from trainwatch_common.kubeconfig_yaml import DocumentRefused, load_mapping


def refusal(text: str) -> DocumentRefused:
    with pytest.raises(DocumentRefused) as caught:
        load_mapping(text)
    return caught.value


def test_v1_billion_laughs_refused_fast() -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, 9):
        prev, cur = chr(ord("a") + level - 1), chr(ord("a") + level)
        lines.append(f"{cur}: &{cur} [{','.join(['*' + prev] * 9)}]")
    started = time.monotonic()
    refused = refusal("\n".join(lines) + "\n")
    assert refused.code == "yaml_alias"
    assert time.monotonic() - started < 1.0  # refused while reading events, never expanded


def test_v1_anchor_without_alias_refused() -> None:
    # An anchor alone expands nothing, but a kubeconfig needs none: refusing every anchor keeps
    # the rule simple for every caller ("no anchors, no aliases").
    refused = refusal("kind: Config\nclusters: &c []\n")
    assert refused.code == "yaml_alias"
    assert "anchors" in refused.message


@pytest.mark.parametrize(
    "text",
    [
        "a: " + "[" * 10_000 + "]" * 10_000,
        '{"a": ' + "[" * 10_000 + "]" * 10_000 + "}",
        "a:\n" + "".join("  " * depth + f"k{depth}:\n" for depth in range(1, 200)),
    ],
    ids=["yaml flow", "json", "yaml block"],
)
def test_v1_deep_nesting_refused(text: str) -> None:
    assert refusal(text).code == "too_deep"


def test_v1_huge_input_refused_before_parsing() -> None:
    refused = refusal("a: " + "x" * (2 * 1024 * 1024))
    assert refused.code == "too_large"
    assert "1 MiB" in refused.message


@pytest.mark.parametrize("text", ["a: " + "1" * 5000, '{"a": ' + "1" * 5000 + "}"], ids=["yaml", "json"])
def test_bug_5000_digit_integer_refused(text: str) -> None:
    refused = refusal(text)
    assert refused.code in ("invalid_yaml", "invalid_json")
    assert "too many digits" in refused.message


def test_bug_impossible_yaml_timestamp_refused() -> None:
    assert refusal("a: 2001-02-30\n").code == "invalid_yaml"


@pytest.mark.parametrize(
    "text", ['{"kind": "Config"}\n{"kind": "Config"}', '{"kind": "Config"}\n---\n{"kind": "Config"}']
)
def test_bug_multi_doc_json_reason_says_several_documents(text: str) -> None:
    refused = refusal(text)
    assert refused.code == "multiple_documents"
    assert "Extra data" not in refused.message
    assert "expected one JSON document" in refused.message
