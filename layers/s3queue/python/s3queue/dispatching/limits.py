"""Rate limits, enforced where dispatch happens: the budget of handler starts per window.

`rate_limit` (QueueSettings) is a number of handler starts per second for the whole queue,
whichever worker, Lambda or process, runs them. The leader is the queue's one dispatcher, so
it keeps the count: the queue's time is cut into windows of one second (aligned to the clock's
seconds), each with a budget of `rate_limit` starts. A tick plans at most what is left of the
current window's budget (the next window's, when less than `MIN_LEFT_MS` of the current one
remains) and gives each ticket a permit (`protocol.permits`) for that window and for its share
of the budget; a worker starts nothing outside its permit and releases the rest, untouched.
So the starts within one window never exceed its budget, however many workers run them, and
a limited backlog simply waits (`Plan.limited`), never dropped, dead-lettered or counted.

A new leader does not know what its predecessor spent of the windows in progress: it spends
nothing in any window that starts before its first tick + one window + the clock skew it
tolerates (the predecessor may have planned into the next window, by a clock that may differ).
"""

from __future__ import annotations

from dataclasses import dataclass

from s3queue.protocol.permits import Permit

WINDOW_MS = 1000
MIN_LEFT_MS = 250
"""A window with less than this left is not planned into: its tickets would miss it."""


@dataclass(slots=True)
class RateWindow:
    """One leader's count of the starts it planned into the current window."""

    limit: int
    skew_ms: int
    start_ms: int | None = None
    used: int = 0
    blocked_until_ms: int | None = None
    """Windows starting before this are the previous leader's (module docstring)."""

    def open(self, now_ms: int) -> tuple[int, int]:
        """(window start, starts left in it) for what this tick plans."""
        start = now_ms - now_ms % WINDOW_MS
        if start + WINDOW_MS - now_ms < MIN_LEFT_MS:
            start += WINDOW_MS
        if self.blocked_until_ms is None:
            self.blocked_until_ms = now_ms + WINDOW_MS + self.skew_ms
        if start < self.blocked_until_ms:
            return start, 0
        if start != self.start_ms:
            self.start_ms, self.used = start, 0
        return start, max(self.limit - self.used, 0)

    def permits(self, counts: list[int], start: int) -> list[Permit]:
        """Each batch's permit, its messages' starts out of what is left, in order."""
        left = max(self.limit - self.used, 0) if start == self.start_ms else 0
        out = []
        for count in counts:
            starts = min(count, left)
            left -= starts
            out.append(Permit(start, start + WINDOW_MS, starts))
        return out

    def spend(self, starts: int) -> None:
        self.used += starts
