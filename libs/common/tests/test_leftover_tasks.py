"""The leftover-task check of the test plugin fails a test that leaves any task of ours running."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""

LEAKS = """
import asyncio
import contextlib


async def forever() -> None:
    await asyncio.Event().wait()


async def test_leaves_an_unnamed_task() -> None:
    asyncio.create_task(forever())  # noqa: RUF006


async def test_leaves_a_named_task() -> None:
    asyncio.create_task(forever(), name="my worker")  # noqa: RUF006


async def test_stops_what_it_started() -> None:
    task = asyncio.create_task(forever())
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
"""


def test_unnamed_and_named_leftover_tasks_fail_and_a_clean_test_passes(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_leaks=LEAKS)
    result = pytester.runpytest_subprocess("-p", "trainwatch_common.testing.plugin", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines_random(
        [
            "E * test left tasks running: ?'Task-* (forever)'?",
            "E * test left tasks running: ?'my worker (forever)'?",
        ]
    )
    # Where it waits, down to the await that never ends: what a test cut short by its timeout needs.
    result.stdout.fnmatch_lines(["E * my worker (forever) waits at:", "E */test_leaks.py:6 in forever"])
