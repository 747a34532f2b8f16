"""The rules file, reloaded when it changes; a bad file is refused and the previous rules stay.

The file's (mtime, size, inode) is polled: cheap, and it works on every filesystem and with
editors that replace the file instead of writing in place. The content's hash decides whether
anything changed, so touching a file does not count as a reload.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

from trainwatch_notifier import metrics
from trainwatch_notifier.ruleset import RulesError, Ruleset, parse_ruleset

log = logging.getLogger(__name__)


class RulesSource:
    def __init__(
        self,
        path: Path,
        *,
        poll_seconds: float = 1.0,
        on_change: Callable[[Ruleset], None] | None = None,
    ) -> None:
        self.path = path
        self.poll_seconds = poll_seconds
        self.on_change = on_change
        self._signature: tuple[int, int, int] | None = None
        self._digest: str | None = None
        self.current: Ruleset | None = None
        self.last_error: str | None = None
        self.version = 0

    def load(self) -> Ruleset:
        """Load the file now; raises RulesError (with the previous rules kept) if it is bad."""
        try:
            stat = self.path.stat()
            content = self.path.read_bytes()
        except OSError as exc:
            self._signature = None
            self._refuse(f"cannot read {self.path}: {exc.strerror}")
        self._signature = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        digest = hashlib.sha256(content).hexdigest()
        if digest == self._digest and self.current is not None:
            return self.current
        self._digest = digest
        try:
            ruleset = parse_ruleset(content.decode("utf-8", errors="replace"), dict(os.environ))
        except RulesError as exc:
            self._refuse(str(exc))
        self.current = ruleset
        self.last_error = None
        self.version += 1
        metrics.RULES_RELOADS.labels("loaded").inc()
        metrics.RULES_VALID.set(1)
        metrics.RULES_COUNT.set(len(ruleset.rules))
        log.info(
            "rules loaded",
            extra={"path": str(self.path), "rules": len(ruleset.rules), "channels": sorted(ruleset.channels)},
        )
        if ruleset.unconfigured_channels:
            log.warning(
                "channels without a url are not routed to",
                extra={"channels": ruleset.unconfigured_channels},
            )
        if self.on_change is not None:
            self.on_change(ruleset)
        return ruleset

    def _refuse(self, reason: str) -> None:
        self.last_error = reason
        metrics.RULES_RELOADS.labels("refused").inc()
        metrics.RULES_VALID.set(0)
        log.error(
            "rules file refused; the previous rules stay in force",
            extra={"path": str(self.path), "reason": reason, "in_force": self.current is not None},
        )
        raise RulesError(reason)

    def changed(self) -> bool:
        try:
            stat = self.path.stat()
        except OSError:
            return self._signature is not None  # deleted: report once, the load refuses it
        return (stat.st_mtime_ns, stat.st_size, stat.st_ino) != self._signature

    def poll(self) -> None:
        if self.changed():
            # A refusal is logged and counted by _refuse; nothing else to do until the file changes.
            with contextlib.suppress(RulesError):
                self.load()

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(self.poll_seconds)
            self.poll()
