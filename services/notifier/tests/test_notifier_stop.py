"""The notifier stops on SIGTERM while events keep arriving (issue 17, the chaos ha run's rolling
restart: the notifier's consumer task did not stop when cancelled, and the process was killed
after its grace).

nats-py's ``fetch`` waits for each message with ``asyncio.wait_for``, which on Python 3.11
swallows a cancellation that arrives just as a message does: the fetch returns the messages, the
task is still marked as cancelling, and a loop that only stops on ``CancelledError`` fetches on.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest
from nats.js import JetStreamContext
from notifier_support import make_event, publish, running, settings_for

from trainwatch_common.streams import ensure_streams
from trainwatch_common.testing import eventually
from trainwatch_notifier.app import Notifier

# A rule matching no event: every event is settled at once, so the consumer fetches all the time.
RULES = """
channels:
  nowhere: {type: feishu, url: "http://127.0.0.1:9/hook", secret: demo, format: card}
rules:
  - {name: nobody, match: {clusters: [no-such-cluster]}, channels: [nowhere]}
"""


@pytest.mark.timeout(180)
async def test_the_notifier_stops_promptly_while_events_keep_arriving(
    js: JetStreamContext, nats_url: str, redis_url: str, tmp_path: Path
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    settings = settings_for(nats_url=nats_url, redis_url=redis_url, rules_file=rules)
    await ensure_streams(js)
    published = 0

    done = asyncio.Event()

    async def publish_forever() -> None:
        nonlocal published
        while not done.is_set():  # a flag, not cancel(): js.publish loses cancellations as fetch does
            await publish(js, make_event(name=f"job-{published}", sequence=0))
            published += 1

    publisher = asyncio.create_task(publish_forever())
    stops: list[float] = []
    try:
        for _ in range(5):  # the race is per stop (the old code failed the 2nd of 8): several stops
            async with contextlib.AsyncExitStack() as stack:
                await stack.enter_async_context(running(Notifier(settings)))
                began = published
                await eventually(
                    lambda began=began: published >= began + 50,
                    timeout=10,
                    message="consuming under the flow",
                )
                stopping = time.monotonic()
            stops.append(time.monotonic() - stopping)
    finally:
        done.set()
        await asyncio.wait_for(publisher, timeout=10)
    # Its shutdown grace is 2 s here (settings_for); a consumer that ignores its cancellation is
    # given up on after 10 s (ServiceTasks), and running() waits 20 s.
    assert max(stops) < 5.0, [round(s, 1) for s in stops]
