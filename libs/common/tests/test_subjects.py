import pytest

from trainwatch_common.subjects import (
    cluster_health_subject,
    cluster_subject,
    escape_token,
    job_filter,
    job_subject,
    parse_job_subject,
    unescape_token,
)

HOSTILE = ["with.dots", "has space", "star*", "gt>", "全角名字", "per%cent", "tab\tx", "a.*.>", "ok-name_1"]


@pytest.mark.parametrize("value", HOSTILE)
def test_escaped_tokens_are_valid_and_reversible(value: str) -> None:
    token = escape_token(value)
    assert not set(token) & {".", "*", ">", " ", "\t"}
    assert token.isascii()
    assert unescape_token(token) == value


def test_plain_kubernetes_names_stay_readable() -> None:
    assert job_subject(cluster_id="gpu-a", namespace="team-1", kind_key="pytorchjob", name="bert-large") == (
        "jobs.v1.gpu-a.team-1.pytorchjob.bert-large"
    )


def test_distinct_names_never_share_a_subject() -> None:
    names = ["a.b", "a%2Eb", "a_b", "a-b", "a b"]
    subjects = {job_subject(cluster_id="c", namespace="n", kind_key="job", name=n) for n in names}
    assert len(subjects) == len(names)


def test_job_subject_round_trips() -> None:
    subject = job_subject(cluster_id="c1", namespace="ns", kind_key="rayjob", name="x.y*z")
    parsed = parse_job_subject(subject)
    assert (parsed.cluster_id, parsed.namespace, parsed.kind_key, parsed.name) == (
        "c1",
        "ns",
        "rayjob",
        "x.y*z",
    )


def test_filters_and_cluster_subjects() -> None:
    assert job_filter() == "jobs.v1.*.*.*.*"
    assert job_filter(cluster_id="c1", namespace="team.a") == "jobs.v1.c1.team%2Ea.*.*"
    assert cluster_subject("updated", "c1") == "clusters.v1.updated.c1"
    assert cluster_health_subject("c1") == "clusters.v1.health.c1"


def test_empty_token_and_foreign_subjects_are_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        escape_token("")
    with pytest.raises(ValueError, match="not a job subject"):
        parse_job_subject("clusters.v1.added.c1")
