"""``python -m trainwatch_notifier``: run the notifier from TRAINWATCH_* settings until SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys

from trainwatch_common.observability import task_dump
from trainwatch_common.observability.logging import configure_logging
from trainwatch_notifier.app import Notifier
from trainwatch_notifier.ruleset import RulesError
from trainwatch_notifier.settings import NotifierSettings


async def _main(settings: NotifierSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    task_dump.install(loop)
    await Notifier(settings).run(stop)


def main() -> int:
    settings = NotifierSettings()
    configure_logging(service="notifier", level=settings.log_level, fmt=settings.log_format)
    try:
        asyncio.run(_main(settings))
    except RulesError as exc:
        print(f"notifier: refusing to start, bad rules file {settings.rules_file}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
