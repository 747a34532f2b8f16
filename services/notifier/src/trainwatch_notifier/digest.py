"""Burst detection, with an injected clock: when a channel has sent ``threshold`` messages in
the last ``window_seconds``, further events are collected and sent as one digest."""

from __future__ import annotations

import time
from collections import deque

from trainwatch_notifier.clock import Clock


class BurstDetector:
    def __init__(self, *, threshold: int, window_seconds: float, clock: Clock = time.monotonic) -> None:
        self.threshold = threshold
        self.window_seconds = window_seconds
        self._clock = clock
        self._sent: deque[float] = deque()

    def _expire(self) -> None:
        horizon = self._clock() - self.window_seconds
        while self._sent and self._sent[0] <= horizon:
            self._sent.popleft()

    def record(self, messages: int = 1) -> None:
        now = self._clock()
        self._sent.extend([now] * messages)
        self._expire()

    def in_burst(self, *, waiting: int = 0) -> bool:
        """True if sending one more message now (with ``waiting`` more queued behind it) would
        take the channel past its threshold within the window."""
        self._expire()
        return len(self._sent) + waiting > self.threshold
