"""recovery.recover: per job, whichever of checkpoint and stream saw the later sequence."""

from __future__ import annotations

from trainwatch_common.events.jobs import Phase
from trainwatch_watcher.kinds.model import NormalizedStatus
from trainwatch_watcher.records import JobRecord
from trainwatch_watcher.recovery import StreamHead, recover
from trainwatch_watcher.transitions import Slot


def record(sequence: int, phase: Phase = Phase.RUNNING) -> JobRecord:
    slot = Slot("default", "bert", sequence, phase, None, phase in (Phase.SUCCEEDED, Phase.FAILED))
    return JobRecord(slot=slot, last=NormalizedStatus(phase=phase))


def test_a_checkpoint_level_with_the_stream_is_kept_and_resumed() -> None:
    result = recover({"a": record(3)}, {"a": StreamHead(3, record(3))})
    assert result.records == {"a": record(3)}
    assert not result.behind
    assert result.corrected == 0


def test_a_checkpoint_behind_the_stream_takes_the_streams_record_and_relists() -> None:
    result = recover({"a": record(2)}, {"a": StreamHead(4, record(4, Phase.FAILED))})
    assert result.records == {"a": record(4, Phase.FAILED)}
    assert result.behind
    assert result.corrected == 1


def test_a_deletion_in_the_stream_closes_a_job_the_checkpoint_still_has() -> None:
    result = recover({"a": record(2)}, {"a": StreamHead(3, None)})
    assert result.records == {}
    assert result.behind


def test_a_lost_checkpoint_is_rebuilt_from_open_jobs_only() -> None:
    result = recover({}, {"a": StreamHead(5, record(5)), "gone": StreamHead(2, None)})
    assert result.records == {"a": record(5)}
    assert result.behind
    assert result.corrected == 1


def test_a_checkpoint_ahead_of_the_stream_is_kept() -> None:
    # The stream lost messages (purged or aged out): the checkpoint's sequences are still used.
    result = recover({"a": record(6)}, {"a": StreamHead(4, record(4))})
    assert result.records == {"a": record(6)}
    assert not result.behind


def test_an_empty_stream_and_checkpoint_recover_nothing() -> None:
    result = recover({}, {})
    assert result.records == {}
    assert not result.behind


def test_jobs_the_stream_holds_as_deleted_are_remembered_as_closed() -> None:
    result = recover({"open": record(1)}, {"open": StreamHead(1, record(1)), "gone": StreamHead(4, None)})
    assert result.closed == {"gone": 4}
    assert "gone" not in result.records


def test_a_job_back_after_its_deletion_is_created_after_it() -> None:
    from trainwatch_watcher import transitions

    emission = transitions.observe(
        None, NormalizedStatus(phase=Phase.RUNNING), namespace="default", name="bert", closed_at=4
    )
    assert emission is not None
    assert (emission.change, emission.sequence, emission.slot.sequence) == ("created", 5, 5)


def test_the_newest_resource_version_of_the_stream_is_where_a_lost_checkpoint_resumes() -> None:
    heads = {
        "a": StreamHead(2, record(2), resource_version="120"),
        "b": StreamHead(3, None, resource_version="97"),
    }
    assert recover({}, heads).resource_version == "120"


def test_opaque_resource_versions_are_not_compared() -> None:
    heads = {"a": StreamHead(2, record(2), resource_version="120"), "b": StreamHead(1, None, "x9")}
    assert recover({}, heads).resource_version is None


def test_the_jobs_the_stream_is_ahead_of_are_named_so_nothing_is_emitted_from_their_stale_records() -> None:
    """Short chaos seed 1: a resumed informer diagnosed a job from its stale checkpoint record
    (Pending, sequence 0) and emitted a diagnosis update under sequence 1, which the stream held
    as the job's Running; the informer restarted and the Running came twice."""
    checkpoint = {"stale": record(0, Phase.PENDING), "level": record(3), "gone": record(1)}
    stream = {
        "stale": StreamHead(1, record(1)),
        "level": StreamHead(3, record(3)),
        "gone": StreamHead(2, None),
        "new": StreamHead(4, record(4)),
    }
    result = recover(checkpoint, stream)
    assert result.ahead == {"stale", "gone"}  # the checkpoint's own jobs with newer events
    assert result.records["level"] is checkpoint["level"]
    assert recover({"a": record(3)}, {"a": StreamHead(3, record(3))}).ahead == frozenset()
