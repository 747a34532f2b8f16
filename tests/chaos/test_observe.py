"""The chaos run reads cards the way the notifier renders them (pure, fast): a change of the
card's title (issue 18 item 7 put the sub-phase there) must not read as a state never true."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from chaos.observe import parse_card
from trainwatch_common import JobRef, JobStatusEvent, Phase, job_event_id
from trainwatch_common.events.jobs import SubPhase
from trainwatch_notifier.render import feishu
from trainwatch_notifier.render.facts import JobFacts, job_link
from trainwatch_notifier.sink import Received


def rendered(phase: Phase, sub_phase: SubPhase | None, terminal: bool) -> Received:
    event = JobStatusEvent(
        event_id=job_event_id("c01", "u1", 3),
        change="transition",
        sequence=3,
        epoch=1,
        job=JobRef(
            cluster_id="c01", api_version="batch/v1", kind="Job", kind_key="job",
            namespace="default", name="job-41000-0013", uid="u1", resource_version="7",
        ),
        phase=phase,
        sub_phase=sub_phase,
        terminal=terminal,
        observed_at=datetime(2026, 12, 1, 12, 0, tzinfo=UTC),
    )  # fmt: skip
    facts = JobFacts(event, "c01", job_link("http://dash", event), "en", None)
    return Received(token="ml", body=feishu.message_body(facts, "card"), received_at=0.0)


@pytest.mark.parametrize(
    ("phase", "sub_phase", "terminal"),
    [
        (Phase.FAILED, SubPhase.ABORTING, False),  # read as "never true" when the title gained it
        (Phase.SUCCEEDED, SubPhase.FINISHING, False),
        (Phase.SUCCEEDED, None, False),  # "(finishing)" without a sub-phase
        (Phase.FAILED, None, True),
        (Phase.FAILED, SubPhase.ABORTING, True),  # terminal: the sub-phase is not shown
        (Phase.PENDING, SubPhase.QUEUED, False),
        (Phase.RUNNING, None, False),
    ],
)
def test_a_rendered_cards_phase_and_terminality_are_read_back(
    phase: Phase, sub_phase: SubPhase | None, terminal: bool
) -> None:
    parsed = parse_card(rendered(phase, sub_phase, terminal))
    assert parsed is not None
    uid, seen = parsed
    assert uid == "u1"
    assert (seen.phase, seen.terminal) == (phase.value, terminal)
