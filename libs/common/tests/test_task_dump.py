"""SIGUSR1 logs where each task of a live process waits, down to the innermost await."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

_PROGRAM = textwrap.dedent(
    """
    import asyncio, logging, sys
    from trainwatch_common.observability import task_dump

    async def inner_wait_that_never_ends(never):
        await never.wait()

    async def outer(never):
        await inner_wait_that_never_ends(never)

    async def main():
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")
        task_dump.install()
        never = asyncio.Event()
        stuck = asyncio.create_task(outer(never), name="the-stuck-one")
        print("ready", flush=True)
        await asyncio.wait_for(stuck, timeout=30)

    asyncio.run(main())
    """
)


def test_sigusr1_logs_each_task_down_to_its_innermost_wait_and_the_process_goes_on() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _PROGRAM], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout is not None
            assert process.stderr is not None
            assert process.stdout.readline().strip() == "ready"
            process.send_signal(signal.SIGUSR1)
            lines: list[str] = []
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                line = process.stderr.readline()
                lines.append(line)
                if "inner_wait_that_never_ends" in line:
                    break
            dump = "".join(lines)
            assert "task the-stuck-one waits at" in dump, dump
            assert "in outer" in dump, dump
            assert "in inner_wait_that_never_ends" in dump, dump
            assert process.poll() is None, "the dump must not stop the process"
        finally:
            process.kill()
            process.wait(timeout=10)
