"""Which channels the bots refuse outright (a wrong secret or token, a webhook that is gone).

Such a refusal is the channel's configuration, not the message: every notification of the channel
gets the same answer until someone fixes it. So the notifier is not ready while a channel is
refused, /readyz says which and why, and the log says it once a minute with a count, not once per
dead-lettered notification. The next accepted request clears it (the rules file is hot-reloaded:
fixing the secret there needs no restart).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

LOG_EVERY_SECONDS = 60.0


@dataclass
class Refusal:
    reason: str
    detail: str
    since: float  # wall clock, for /readyz
    count: int = 1  # refusals since the channel was last accepted
    logged_count: int = 0  # of them, how many the log has told
    logged_at: float = -float("inf")  # monotonic


class ChannelHealth:
    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        log_every: float = LOG_EVERY_SECONDS,
    ) -> None:
        self._clock = clock
        self._wall_clock = wall_clock
        self._log_every = log_every
        self._refused: dict[str, Refusal] = {}

    def refused(self, channel: str, reason: str, detail: str) -> None:
        refusal = self._refused.get(channel)
        if refusal is None or refusal.reason != reason:
            refusal = self._refused[channel] = Refusal(reason, detail[:200], since=self._wall_clock())
        else:
            refusal.count += 1
            refusal.detail = detail[:200]
        now = self._clock()
        if now - refusal.logged_at >= self._log_every:
            log.warning(
                "the bot refuses every request of this channel: fix its configuration",
                extra={
                    "channel": channel,
                    "reason": reason,
                    "detail": refusal.detail,
                    "refusals": refusal.count,
                    "since_last_line": refusal.count - refusal.logged_count,
                },
            )
            refusal.logged_at, refusal.logged_count = now, refusal.count

    def accepted(self, channel: str) -> None:
        refusal = self._refused.pop(channel, None)
        if refusal is not None:
            log.info(
                "the bot accepts this channel's requests again",
                extra={"channel": channel, "reason": refusal.reason, "refusals": refusal.count},
            )

    def forget(self, keep: set[str]) -> None:
        """Channels the rules no longer have (a reload removed or renamed them)."""
        for channel in set(self._refused) - keep:
            del self._refused[channel]

    def check(self) -> str:
        """The readiness check: "ok", or each refused channel with its reason."""
        if not self._refused:
            return "ok"
        parts = []
        for channel, refusal in sorted(self._refused.items()):
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(refusal.since))
            parts.append(
                f"channel {channel} refused by its bot: {refusal.reason} ({refusal.count} since {since})"
            )
        return "; ".join(parts)
