"""Pure: decoding, the ordering rule, in-batch folding, cursors. No servers."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest
from persister_factories import make_event

from trainwatch_common import JobStatusEvent, Phase, wrap_job_event
from trainwatch_persister import batching, ordering
from trainwatch_persister.api import pagination
from trainwatch_persister.filters import JobFilters, SortField, SortOrder


def test_resource_versions_compare_as_integers_when_numeric() -> None:
    assert ordering.rv_number("999") < ordering.rv_number("1000")
    assert ordering.rv_number("abc") == ordering.NON_NUMERIC_RESOURCE_VERSION
    assert ordering.rv_number("-5") == ordering.NON_NUMERIC_RESOURCE_VERSION
    assert ordering.rv_number("9" * 30) == ordering.NON_NUMERIC_RESOURCE_VERSION  # beyond a BIGINT
    assert ordering.rv_number("١٢") == ordering.NON_NUMERIC_RESOURCE_VERSION  # non-ASCII digits


@pytest.mark.parametrize(
    ("new", "current", "replaces"),
    [
        ((5, 1, 10), (4, 9, 99), True),  # sequence first, even from a lower epoch
        ((4, 9, 99), (5, 1, 10), False),  # an older sequence never wins
        ((5, 2, 10), (5, 1, 99), True),  # same sequence: the higher epoch is the owner
        ((5, 1, 99), (5, 2, 10), False),  # ...and a stale owner never overwrites it
        ((5, 2, 11), (5, 2, 10), True),  # same owner: the fresher read
        ((5, 2, 10), (5, 2, 10), False),  # a duplicate changes nothing
    ],
)
def test_ordering_rule(new: tuple[int, int, int], current: tuple[int, int, int], replaces: bool) -> None:
    assert ordering.supersedes(ordering.OrderKey(*new), ordering.OrderKey(*current)) is replaces


def test_folding_a_batch_equals_applying_its_events_one_by_one() -> None:
    events = [
        make_event(sequence=1, epoch=2, rv="10"),
        make_event(sequence=1, epoch=3, rv="8", event_id="b"),
        make_event(sequence=0, epoch=9, rv="50"),
        make_event(sequence=2, epoch=1, rv="12"),
        make_event(sequence=2, epoch=1, rv="11", event_id="c"),
    ]
    for stored in events:
        for permutation in itertools.permutations(events):
            one_by_one = stored
            for event in permutation:
                if ordering.supersedes(batching.order_key(event), batching.order_key(one_by_one)):
                    one_by_one = event
            (folded,) = batching.latest_per_job(permutation)
            if ordering.supersedes(batching.order_key(folded), batching.order_key(stored)):
                after_batch = folded
            else:
                after_batch = stored
            assert after_batch == one_by_one


def test_decode_separates_poison_from_valid_events() -> None:
    good = make_event()
    decoded = batching.decode(
        [
            ("m1", wrap_job_event(good).to_json()),
            ("m2", b"{not json"),
            ("m3", b'{"specversion": "1.0", "id": "x", "source": "s", "type": "t", "time": "2026-01-01"}'),
        ]
    )
    assert [(r.message, r.event) for r in decoded.received] == [("m1", good)]
    assert [r.message for r in decoded.rejected] == ["m2", "m3"]
    assert all(r.reason == "invalid-event" and "\n" not in r.error for r in decoded.rejected)


def test_rows_keep_the_first_of_duplicate_ids_and_map_deletion() -> None:
    deleted: JobStatusEvent = make_event(sequence=3, change="deleted", phase=Phase.SUCCEEDED)
    rows = batching.transition_rows([deleted, deleted])
    assert len(rows) == 1
    assert rows[0]["event"]["change"] == "deleted"
    job = batching.job_row(deleted)
    assert job["deleted_at"] == deleted.observed_at
    assert (job["sequence"], job["rv_number"]) == (3, 103)


def test_cursors_round_trip_and_refuse_other_lists() -> None:
    filters = JobFilters(clusters=("alpha",), labels=(("team", "nlp"),))
    when = datetime(2026, 11, 1, 12, 30, 0, 123456, tzinfo=UTC)
    cursor = pagination.encode_cursor(
        sort=SortField.UPDATED_AT, order=SortOrder.DESC, filters=filters, position=(when, "alpha", "u1")
    )
    newest_first = {"sort": SortField.UPDATED_AT, "order": SortOrder.DESC}
    assert pagination.decode_cursor(cursor, **newest_first, filters=filters) == (when, "alpha", "u1")
    for sort, order, other in [
        (SortField.CREATED_AT, SortOrder.DESC, filters),
        (SortField.UPDATED_AT, SortOrder.ASC, filters),
        (SortField.UPDATED_AT, SortOrder.DESC, JobFilters(clusters=("beta",))),
    ]:
        with pytest.raises(pagination.InvalidCursor):
            pagination.decode_cursor(cursor, sort=sort, order=order, filters=other)
    for garbage in ["", "%%%", "eyJ2IjoxfQ", cursor[:-4]]:
        with pytest.raises(pagination.InvalidCursor):
            pagination.decode_cursor(
                garbage, sort=SortField.UPDATED_AT, order=SortOrder.DESC, filters=filters
            )
