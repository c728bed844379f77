"""The rate of a queue's last minutes, from the counts the dashboard reads as it refreshes.

S3 keeps no counter of handled messages (a done message is deleted), so the dashboard shows
how the backlog (pending + delayed + in flight) and the dead letters changed per minute over
the samples of the last `WINDOW_MS`, taken whenever it read the queue's stats.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

WINDOW_MS = 5 * 60_000
MIN_SPAN_MS = 10_000
"""Less than this between the first and last sample says too little to extrapolate a minute."""


@dataclass(frozen=True, slots=True)
class Rate:
    """Change per minute over `span_s` seconds of samples."""

    backlog: float
    dead: float
    span_s: float


@dataclass
class Trend:
    """The samples of one queue, oldest first, within the window."""

    samples: deque[tuple[int, int, int]] = field(default_factory=deque)

    def add(self, at_ms: int, backlog: int, dead: int) -> None:
        self.samples.append((at_ms, backlog, dead))
        while len(self.samples) > 2 and at_ms - self.samples[1][0] >= WINDOW_MS:
            self.samples.popleft()

    def rate(self) -> Rate | None:
        """None until two samples at least `MIN_SPAN_MS` apart."""
        if len(self.samples) < 2:
            return None
        (t0, b0, d0), (t1, b1, d1) = self.samples[0], self.samples[-1]
        if t1 - t0 < MIN_SPAN_MS:
            return None
        minutes = (t1 - t0) / 60_000
        return Rate((b1 - b0) / minutes, (d1 - d0) / minutes, (t1 - t0) / 1000)
