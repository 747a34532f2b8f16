"""ServiceTasks: named tasks, crashes logged and restarted, readiness, ordered and bounded stop."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from trainwatch_common.observability.health import health_app, health_routes
from trainwatch_common.tasks import LoopFactory, ServiceTasks
from trainwatch_common.testing import eventually

NEVER = 3600.0  # a restart back-off no test waits for: the crashed task stays down


async def forever() -> None:
    await asyncio.Event().wait()


async def test_a_crash_is_logged_with_the_name_and_traceback_and_makes_the_service_not_ready(
    caplog: pytest.LogCaptureFixture,
) -> None:
    crash = asyncio.Event()

    async def consumer() -> None:
        await crash.wait()
        raise RuntimeError("a bad message")

    async with ServiceTasks(restart_initial=NEVER, restart_max=NEVER) as tasks:
        tasks.start("unit-relay", forever)
        task = tasks.start("unit-consumer", consumer)
        assert task.get_name() == "unit-consumer"
        await eventually(lambda: tasks.ready, message="both running")
        with caplog.at_level(logging.ERROR, logger="trainwatch_common.tasks"):
            crash.set()
            await eventually(lambda: not tasks.ready, message="not ready after the crash")
        assert tasks.states() == {"unit-relay": "running", "unit-consumer": "restarting"}
        assert tasks.crashes("unit-consumer") == 1
        (record,) = [r for r in caplog.records if getattr(r, "task", None) == "unit-consumer"]
        assert "crashed" in record.getMessage()
        assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)  # noqa: PT018


async def test_a_crashed_task_is_restarted_and_the_service_is_ready_again() -> None:
    runs = 0

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise RuntimeError("first run fails")
        await forever()

    async with ServiceTasks(restart_initial=0.01, restart_max=1.0) as tasks:
        tasks.start("unit-flaky", flaky)
        await eventually(lambda: runs == 2 and tasks.ready, message="restarted and ready")
        assert tasks.crashes("unit-flaky") == 1


async def test_a_loop_that_returns_is_restarted_like_a_crash(caplog: pytest.LogCaptureFixture) -> None:
    runs = 0

    async def returns_once() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            return
        await forever()

    with caplog.at_level(logging.ERROR, logger="trainwatch_common.tasks"):
        async with ServiceTasks(restart_initial=0.01) as tasks:
            tasks.start("unit-returns", returns_once)
            await eventually(lambda: runs == 2 and tasks.ready, message="restarted")
    assert any("ended on its own" in r.getMessage() for r in caplog.records)


async def test_stop_cancels_the_tasks_newest_first() -> None:
    stopped: list[str] = []
    running: set[str] = set()

    def loop(name: str) -> LoopFactory:
        async def run() -> None:
            running.add(name)
            try:
                await forever()
            except asyncio.CancelledError:
                stopped.append(name)
                raise

        return run

    tasks = ServiceTasks()
    owned = [tasks.start(name, loop(name)) for name in ("unit-bus", "unit-relay", "unit-consumer")]
    await eventually(lambda: len(running) == 3, message="all started")
    await tasks.stop()
    assert stopped == ["unit-consumer", "unit-relay", "unit-bus"]
    assert all(task.cancelled() for task in owned)
    assert set(tasks.states().values()) == {"stopped"}
    assert not tasks.ready
    with pytest.raises(RuntimeError):
        tasks.start("unit-late", forever)


async def test_stop_gives_up_on_a_task_that_ignores_cancellation(caplog: pytest.LogCaptureFixture) -> None:
    release = asyncio.Event()
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def stubborn() -> None:
        started.set()
        try:
            await forever()
        except asyncio.CancelledError:
            cancelled.set()
        while not release.is_set():  # ignores every cancellation until released
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue

    tasks = ServiceTasks(stop_timeout=0.2)
    task = tasks.start("unit-stubborn", stubborn)
    await eventually(started.is_set, message="started")
    try:
        with caplog.at_level(logging.ERROR, logger="trainwatch_common.tasks"):
            await asyncio.wait_for(tasks.stop(), timeout=10)
        assert cancelled.is_set()
        assert not task.done(), "stop() returned before its timeout was up"
        [record] = [r for r in caplog.records if "did not stop in time" in r.getMessage()]
        # Where it is stuck, down to what it awaits: the line that swallows the cancellation.
        where = record.waiting_in
        assert where[0].endswith(" _supervise"), where  # ServiceTasks' wrapper, then the task's own
        assert where[1].endswith(" stubborn"), where
        assert "test_tasks.py:" in where[1], where
        assert where[2].endswith(" wait"), where  # release.wait(), awaiting a future
        assert where[-1] == "FutureIter", where
    finally:
        release.set()
    await asyncio.wait({task}, timeout=10)
    assert task.cancelled()  # the swallowed cancellation still ends it, not a restart
    assert tasks.crashes("unit-stubborn") == 0


async def test_a_cancellation_turned_into_another_error_still_stops_the_task() -> None:
    started = asyncio.Event()

    async def like_nats_py() -> None:
        started.set()
        try:
            await forever()
        except asyncio.CancelledError:
            raise TimeoutError from None  # what nats-py sometimes does with a cancellation

    tasks = ServiceTasks(restart_initial=0.01)
    task = tasks.start("unit-nats", like_nats_py)
    await eventually(started.is_set, message="started")
    await asyncio.wait_for(tasks.stop(), timeout=10)
    assert task.cancelled()
    assert tasks.crashes("unit-nats") == 0


async def test_a_stop_that_is_cancelled_still_cancels_every_task() -> None:
    release = asyncio.Event()
    first_stopped = asyncio.Event()
    started: set[str] = set()

    async def first() -> None:
        started.add("first")
        try:
            await forever()
        finally:
            first_stopped.set()

    async def slow_to_stop() -> None:
        started.add("slow")
        try:
            await forever()
        except asyncio.CancelledError:
            await release.wait()
            raise

    tasks = ServiceTasks(stop_timeout=NEVER)
    first_task = tasks.start("unit-first", first)
    slow_task = tasks.start("unit-slow", slow_to_stop)
    await eventually(lambda: len(started) == 2, message="both started")
    stopping = asyncio.create_task(tasks.stop(), name="unit stopping")
    await eventually(lambda: slow_task.cancelling() > 0, message="the newest is being stopped")
    stopping.cancel()
    await asyncio.gather(stopping, return_exceptions=True)
    await eventually(first_stopped.is_set, message="the older task cancelled too")
    assert first_task.cancelled()
    release.set()
    await asyncio.wait({slow_task}, timeout=10)
    assert slow_task.cancelled()


async def test_readyz_names_each_task_and_fails_while_one_is_down() -> None:
    crash = asyncio.Event()

    async def consumer() -> None:
        await crash.wait()
        raise RuntimeError("boom")

    async with ServiceTasks(restart_initial=NEVER, restart_max=NEVER) as tasks:
        app = health_app()
        app.router.routes[:] = health_routes({"nats": lambda: True}, tasks=tasks)
        tasks.start("unit-consumer", consumer)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            ready = await client.get("/readyz")
            assert ready.status_code == 200
            assert ready.json() == {
                "ready": True,
                "checks": {"nats": "ok", "tasks": "ok"},
                "tasks": {"unit-consumer": "running"},
            }
            crash.set()
            await eventually(lambda: not tasks.ready, message="crashed")
            down = await client.get("/readyz")
            assert down.status_code == 503
            assert down.json()["tasks"] == {"unit-consumer": "restarting"}
            assert down.json()["checks"]["tasks"] == "not running: unit-consumer restarting"
