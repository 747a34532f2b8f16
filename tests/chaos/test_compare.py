"""The comparison's rules, on small hand-made histories (pure, fast)."""

from __future__ import annotations

import dataclasses

from chaos.compare import Observations, Seen, TruthRow, compare


def truth(*states: tuple[str, str, str | None, bool], uid: str = "u1") -> list[TruthRow]:
    return [TruthRow("c01", uid, "PyTorchJob", "default", "j", *s) for s in states]


LIFE = truth(
    ("created", "Pending", "Created", False),
    ("transition", "Running", None, False),
    ("transition", "Restarting", None, False),
    ("transition", "Running", None, False),
    ("transition", "Succeeded", None, True),
    ("deleted", "Succeeded", None, True),
)


def seen(rows: list[TruthRow], *, ids: bool = True) -> list[Seen]:
    return [
        Seen(r.change, r.phase, r.sub_phase, r.terminal, ident=f"id{i}" if ids else None)
        for i, r in enumerate(rows)
    ]


def test_a_faithful_history_passes_on_every_surface() -> None:
    cards = [Seen("transition", "Restarting", None, False), Seen("transition", "Succeeded", None, True)]
    finals = {"u1": (True, "Succeeded", None, True)}
    report = compare(LIFE, Observations({"u1": seen(LIFE)}, {"u1": seen(LIFE)}, finals, {"u1": cards}))
    assert not report.failed
    assert (
        report.summary_line() == "chaos: 6 transitions, 0 lost, 0 duplicated, 0 wrong final, 0 out of order"
    )


def test_a_relist_may_collapse_intermediate_states_but_not_terminal_ones() -> None:
    collapsed = [LIFE[1], LIFE[4], LIFE[5]]  # Pending, Restarting, Running skipped
    report = compare(LIFE, Observations(stream={"u1": seen(collapsed)}))
    stream = report.results["stream"][0]
    assert (stream.collapsed, stream.lost, stream.wrong_final) == (3, 0, False)
    lost = [LIFE[1], LIFE[5]]  # the terminal Succeeded missing
    stream = compare(LIFE, Observations(stream={"u1": seen(lost)})).results["stream"][0]
    assert (stream.lost, stream.wrong_final) == (1, False)


def test_duplicates_by_id_and_by_repeated_state() -> None:
    items = seen(LIFE)
    reused = Seen("transition", "Failed", None, True, ident=items[1].ident)
    again = [
        *items[:2],
        items[1],
        Seen("transition", "Running", None, False, ident="other"),
        reused,
        *items[2:],
    ]
    stream = compare(LIFE, Observations(stream={"u1": again})).results["stream"][0]
    assert (stream.replayed, stream.duplicated) == (1, 2)  # a replay; a repeated state and a reused id
    assert not stream.lost


def test_out_of_order_never_true_and_wrong_final() -> None:
    items = seen(LIFE)
    late = [items[0], items[1], items[4], items[2], items[5]]  # Restarting after Succeeded
    stream = compare(LIFE, Observations(stream={"u1": late})).results["stream"][0]
    assert stream.out_of_order == 1
    odd = [*items[:5], Seen("transition", "Failed", None, True, ident="x")]
    stream = compare(LIFE, Observations(stream={"u1": odd})).results["stream"][0]
    assert (stream.never_true, stream.wrong_final, stream.lost) == (1, True, 1)


def test_cards_alike_in_a_row_are_not_duplicates_but_a_card_sent_again_is() -> None:
    volcano = truth(
        ("created", "Pending", "Created", False),
        ("transition", "Suspended", "Aborting", False),
        ("transition", "Suspended", None, False),
        ("transition", "Failed", "Finishing", False),
        ("transition", "Failed", None, True),
    )
    suspended = Seen("transition", "Suspended", None, False)
    failed = Seen("transition", "Failed", None, True)
    ok = compare(volcano, Observations(cards={"u1": [suspended, suspended, failed]})).results["cards"][0]
    assert not ok.failed
    again = compare(volcano, Observations(cards={"u1": [suspended, failed, failed]})).results["cards"][0]
    assert (again.duplicated, again.collapsed) == (1, 1)


def test_lost_states_are_located_in_the_truth_log() -> None:
    placed = [dataclasses.replace(r, position=10 + i) for i, r in enumerate(LIFE)]
    report = compare(placed, Observations(stream={"u1": seen(placed[:4])}))
    assert report.lost_positions["stream"] == [14, 15]  # the terminal Succeeded and the deletion
    assert report.lost_positions["cards"] == [14]


def test_a_deletion_with_a_stale_phase_is_a_deletion_and_a_wrong_final_state() -> None:
    stale = [*seen(LIFE)[:4], Seen("deleted", "Running", None, False, ident="d")]
    stream = compare(LIFE, Observations(stream={"u1": stale})).results["stream"][0]
    assert (stream.lost, stream.never_true, stream.wrong_final) == (1, 0, True)  # Succeeded* lost


def test_a_card_again_under_its_key_is_a_duplicate_unless_marked_as_a_resend() -> None:
    """The notifier's promise for a send whose outcome it lost (its sender killed mid-request):
    sent again, marked as a resend under the same idempotency key. Only that repeat is allowed."""
    restarting = Seen("transition", "Restarting", None, False, ident="ch.id2")
    succeeded = Seen("transition", "Succeeded", None, True, ident="ch.id4")
    finals = {"u1": (True, "Succeeded", None, True)}

    def cards_report(cards: list[Seen]) -> tuple[int, int]:
        report = compare(LIFE, Observations({"u1": seen(LIFE)}, {"u1": seen(LIFE)}, finals, {"u1": cards}))
        return report.total("cards", "duplicated"), report.total("cards", "resent")

    resent = dataclasses.replace(succeeded, resend=True)
    assert cards_report([restarting, succeeded, resent]) == (0, 1)
    assert cards_report([restarting, succeeded, succeeded]) == (1, 0)  # not marked: sent twice
    assert cards_report([restarting, resent]) == (0, 0)  # the first copy never arrived: just the card
    other = dataclasses.replace(succeeded, ident="ch.id9", resend=True)
    assert cards_report([restarting, succeeded, other]) == (1, 0)  # another key's "resend" is no excuse


def _sequenced(rows: list[TruthRow]) -> list[Seen]:
    return [dataclasses.replace(s, sequence=i) for i, s in enumerate(seen(rows))]


def test_a_jobs_sequence_going_back_in_the_stream_is_out_of_order() -> None:
    """What a NATS outage did before a job's next publish waited for its previous one: the
    stream held sequence N after N+1 (the states then also come out of order)."""
    items = _sequenced(LIFE)
    swapped = [items[0], items[2], items[1], *items[3:]]
    stream = compare(LIFE, Observations(stream={"u1": swapped})).results["stream"][0]
    assert stream.out_of_order >= 1
    assert any("(sequence 1) after sequence 2" in note for note in stream.notes)
    in_order = compare(LIFE, Observations(stream={"u1": items})).results["stream"][0]
    assert not in_order.failed


def test_diagnosis_updates_are_no_state_but_their_ids_order_and_final_category_are_checked() -> None:
    life = _sequenced(LIFE[:2])  # created (Pending), Running
    update = Seen("diagnosis", "Running", None, False, ident="id-d", sequence=2, diagnosis="OOMKilled")
    history = [*life, update]
    finals = {"u1": (False, "Running", None, False)}
    diagnoses = {"u1": ["OOMKilled"]}

    def surfaces(stream: list[Seen], sql_diagnosis: str | None) -> Observations:
        return Observations(
            stream={"u1": stream}, sql={"u1": stream}, sql_final=finals, sql_diagnosis={"u1": sql_diagnosis}
        )

    good = compare(LIFE[:2], surfaces(history, "OOMKilled"), diagnoses)
    assert not good.failed, good.failing_jobs({})
    assert good.results["stream"][0].diagnosis_updates == 1

    wrong = compare(LIFE[:2], surfaces(history, "Unknown"), {"u1": ["OOMKilled"]})
    stream, sql = wrong.results["stream"][0], wrong.results["sql"][0]
    assert (stream.wrong_diagnosis, sql.wrong_diagnosis) == (False, True)
    assert wrong.wrong_final() == 1

    on_stream = compare(LIFE[:2], surfaces(history, "ImagePullBackOff"), {"u1": ["ImagePullBackOff"]})
    assert on_stream.results["stream"][0].wrong_diagnosis
    assert "diagnosis OOMKilled, truth ImagePullBackOff" in on_stream.results["stream"][0].notes

    reused = dataclasses.replace(update, ident=life[1].ident)
    twice = compare(LIFE[:2], surfaces([*life, reused], "OOMKilled"), diagnoses).results["stream"][0]
    assert twice.duplicated == 1

    # BackoffLimitExceeded is reported by its root cause: either of the accepted categories
    either = compare(LIFE[:2], surfaces(history, "CrashLoop"), {"u1": ["OOMKilled", "CrashLoop"]})
    assert not either.failed


def _positioned(rows: list[TruthRow], first: int) -> list[TruthRow]:
    return [dataclasses.replace(r, position=first + i) for i, r in enumerate(rows)]


def test_states_of_a_job_deleted_while_the_history_was_gone_are_unobservable_not_lost() -> None:
    """Chaos seed 41: a TrainJob succeeded and was deleted during "410 everywhere"; the relist
    found it gone. Its Succeeded is unobservable: counted apart, not lost, and its surfaces'
    final state (deleted, as last seen Running) not wrong."""
    life = _positioned(LIFE, first=100)
    window = (103, 110)  # Running (103) and Succeeded (104) and the deletion (105) fall inside
    found_gone = Seen("deleted", "Running", None, False, ident="id9", source="relist:absent")
    stream = [*seen(life[:2]), found_gone]
    observations = Observations(
        stream={"u1": stream},
        sql={"u1": stream},
        sql_final={"u1": (True, "Running", None, False)},
        cards={"u1": [Seen("transition", "Restarting", None, False)]},
    )
    report = compare(life, observations, blind_windows=[window])
    for surface in ("stream", "sql", "cards"):
        result = report.results[surface][0]
        assert (result.unobservable, result.lost, result.wrong_final) == (1, 0, False), (surface, result)
    assert not report.failed
    assert "unobservable" in report.table()


def test_unobservable_needs_the_relist_to_have_found_it_gone_and_the_deletion_in_the_window() -> None:
    life = _positioned(LIFE, first=100)
    watched_deletion = Seen("deleted", "Running", None, False, ident="id9")  # a DELETED event: seen
    found_gone = dataclasses.replace(watched_deletion, source="relist:absent")
    for stream, windows in (
        ([*seen(life[:2]), watched_deletion], [(103, 110)]),  # the watcher saw the deletion
        ([*seen(life[:2]), found_gone], [(106, 110)]),  # deleted before the history was gone
        ([*seen(life[:2]), found_gone], [(100, 104)]),  # deleted after every cluster streamed again
        ([*seen(life[:2]), found_gone], []),  # no 410 in the run
    ):
        result = compare(life, Observations(stream={"u1": stream}), blind_windows=windows).results["stream"][
            0
        ]
        assert (result.unobservable, result.lost, result.wrong_final) == (0, 1, True), (stream, windows)
