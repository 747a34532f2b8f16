"""TaskMap reports and stops tasks the way every owner of tasks does (trainwatch_common.tasks)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from trainwatch_common.testing import eventually
from trainwatch_watcher.taskmap import TaskMap


async def test_a_crash_is_logged_with_the_task_name_and_traceback(caplog: pytest.LogCaptureFixture) -> None:
    async def run(key: str, spec: int) -> None:
        raise RuntimeError(f"informer {key} broke")

    tasks: TaskMap[str, int] = TaskMap(run, lambda key: f"informer {key}")
    with caplog.at_level(logging.ERROR, logger="trainwatch_common.tasks"):
        await tasks.reconcile({"a": 1})
        await eventually(lambda: len(tasks) == 0, message="the crashed task dropped")
    (record,) = [r for r in caplog.records if getattr(r, "task", None) == "informer a"]
    assert "crashed" in record.getMessage()
    assert "next reconcile" in record.getMessage()
    assert record.exc_info is not None
    assert str(record.exc_info[1]) == "informer a broke"


async def test_a_task_failing_in_its_clean_up_is_logged_and_the_stop_completes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started = asyncio.Event()

    async def run(key: str, spec: int) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            raise RuntimeError("clean-up failed")

    tasks: TaskMap[str, int] = TaskMap(run, lambda key: f"informer {key}")
    await tasks.reconcile({"a": 1})
    await eventually(started.is_set, message="started")
    with caplog.at_level(logging.ERROR, logger="trainwatch_common.tasks"):
        await tasks.stop("a")
    assert len(tasks) == 0
    assert any("failed while stopping" in r.getMessage() for r in caplog.records)


async def test_a_task_that_swallows_its_cancellation_is_cancelled_again_until_it_stops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started, swallowed = asyncio.Event(), asyncio.Event()

    async def run(key: str, spec: int) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            swallowed.set()  # as redis-py's wait_for on Python 3.11 may: the task goes on
        await asyncio.Event().wait()

    tasks: TaskMap[str, int] = TaskMap(run, lambda key: f"informer {key}", recancel_after=0.05)
    await tasks.reconcile({"a": 1})
    await started.wait()
    with caplog.at_level(logging.WARNING, logger="trainwatch_watcher.taskmap"):
        async with asyncio.timeout(5):  # without the second cancellation this stop never returns
            await tasks.stop("a")
    assert swallowed.is_set()
    assert len(tasks) == 0
    assert any("cancelling it again" in r.getMessage() for r in caplog.records)
