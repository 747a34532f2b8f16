"""SIGUSR1: log every asyncio task of the process with where it is waiting.

A service that stops making progress without failing (a wait that never ends, an event nobody
sets) shows nothing in its logs, and a thread dump shows every thread in the event loop's select.
Its tasks' await chains say where each one waits. ``kill -USR1 <pid>`` logs them, one record per
task, and the process goes on.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

_MAX_DEPTH = 40


def install(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Log a dump of the running loop's tasks on each SIGUSR1."""
    (loop or asyncio.get_running_loop()).add_signal_handler(signal.SIGUSR1, dump_tasks)


def dump_tasks() -> None:
    tasks = sorted(asyncio.all_tasks(), key=lambda task: task.get_name())
    log.warning("task dump: %d tasks", len(tasks))
    for task in tasks:
        chain = "\n".join(f"  {where}" for where in await_chain(task.get_coro()))
        log.warning("task %s waits at\n%s", task.get_name(), chain, extra={"task": task.get_name()})


def await_chain(awaitable: Any) -> list[str]:
    """Where a suspended coroutine waits, outermost first: each coroutine, generator or async
    generator it awaits, down to the innermost (``Task.get_stack`` gives only the outermost)."""
    return [
        f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        for frame in await_chain_frames(awaitable)
    ]


def await_chain_frames(awaitable: Any) -> list[FrameType]:
    """The frames of ``await_chain``, outermost first."""
    frames: list[FrameType] = []
    current = awaitable
    while current is not None and len(frames) < _MAX_DEPTH:
        frame = (
            getattr(current, "cr_frame", None)
            or getattr(current, "gi_frame", None)
            or getattr(current, "ag_frame", None)
        )
        if frame is not None:
            frames.append(frame)
        current = (
            getattr(current, "cr_await", None)
            or getattr(current, "gi_yieldfrom", None)
            or getattr(current, "ag_await", None)
        )
    return frames
