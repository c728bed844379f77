"""Time as an injected dependency: logic never reads the wall clock directly."""

from __future__ import annotations

import threading
import time
from typing import Protocol


def ms(seconds: float) -> int:
    """Seconds (settings) as the milliseconds the logic counts in."""
    return round(seconds * 1000)


class Clock(Protocol):
    """Milliseconds since the epoch, and a way to wait."""

    def now_ms(self) -> int: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """A clock that moves only when told to; `sleep` advances it instantly."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += round(seconds * 1000)

    def sleep(self, seconds: float) -> None:
        self.advance(max(seconds, 0.0))
