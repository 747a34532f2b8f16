"""The signed silence link: what the notifier signs, the dashboard accepts; nothing else."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import pytest

from trainwatch_common.silence_links import JobIdentity, LinkRefused, link, sign, verify

SECRET = "a-key-long-enough-for-the-tests"
JOB = JobIdentity("gpu-east", "team-a", "pytorchjob", "train-1", "7f0c-uid")
NOW = 1_800_000_000


def test_a_signed_link_verifies_to_its_job_and_expiry() -> None:
    url = link("https://dash.example.com/", SECRET, JOB, expires=NOW + 60)
    parts = urlsplit(url)
    assert parts.path == "/silences/new"
    assert verify(SECRET, dict(parse_qsl(parts.query)), now=NOW) == (JOB, NOW + 60)


@pytest.mark.parametrize("field", ["cluster", "namespace", "kind", "name", "uid", "expires"])
def test_changing_any_field_breaks_the_signature(field: str) -> None:
    params = sign(SECRET, JOB, expires=NOW + 60)
    params[field] = "7" + params[field]  # still a number for expires
    with pytest.raises(LinkRefused, match="signature"):
        verify(SECRET, params, now=NOW)


def test_an_expired_link_another_key_or_a_missing_field_is_refused() -> None:
    with pytest.raises(LinkRefused, match="expired"):
        verify(SECRET, sign(SECRET, JOB, expires=NOW), now=NOW)
    with pytest.raises(LinkRefused, match="signature"):
        verify(SECRET, sign("another-key-of-another-setup", JOB, expires=NOW + 60), now=NOW)
    params = sign(SECRET, JOB, expires=NOW + 60)
    del params["sig"]
    with pytest.raises(LinkRefused, match="lacks sig"):
        verify(SECRET, params, now=NOW)
    with pytest.raises(LinkRefused, match="not enabled"):
        verify("", sign(SECRET, JOB, expires=NOW + 60), now=NOW)


def test_values_cannot_be_shifted_between_fields() -> None:
    # "a" + "b,c" and "a,b" + "c" must not sign the same text.
    one = JobIdentity("a", "b,c", "k", "n", "u")
    two = JobIdentity("a,b", "c", "k", "n", "u")
    params = sign(SECRET, one, expires=NOW + 60)
    params.update(cluster=two.cluster, namespace=two.namespace)
    with pytest.raises(LinkRefused):
        verify(SECRET, params, now=NOW)
