"""Limits, enforced where dispatch happens: how much of the ready backlog a tick may send out.

Three queue settings (QueueSettings), each for every worker on every host together:

- ``rate_limit``: handler starts per second for the whole queue;
- ``partition_rate_limit``: handler starts per second of each partition;
- ``partition_concurrency``: messages of one partition in flight (in live tickets) at once.

The leader is the queue's one dispatcher and knows every live ticket, so a partition's
concurrency is exact here: it plans no more of a partition's messages than its cap leaves
beside those in live tickets. Rates are paced here and kept where handlers start: a tick plans
at most what is left of the current one-second window's budget (the next window's, when less
than `MIN_LEFT_MS` of it remains), of the queue and of the partition, and marks each ticket
with the limits that bind it (`protocol.permits`); its worker takes the starts from the
limits' counters in the bucket (`protocol.budgets`, `working.throttle`) before it claims.
So the starts of a second never exceed a limit (the counters), and the backlog waits in its
place in line at the leader (the pacing), not in tickets: never dropped, dead-lettered or
counted as a delivery. What a tick holds back is counted by the limit that bound it (`Budgets`,
``stats()["held"]``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from s3queue.contract.settings import QueueSettings
from s3queue.protocol.holds import HELD_REASONS
from s3queue.protocol.permits import Permit

WINDOW_MS = 1000
MIN_LEFT_MS = 250
"""A window with less than this left is not planned into: its tickets would miss it."""


@dataclass(slots=True)
class RateWindow:
    """One leader's count of the starts it planned into the current window (pacing only:
    the counters keep the limit, so a new leader that spends a window again wastes nothing
    but a wait at the workers)."""

    limit: int
    start_ms: int | None = None
    used: int = 0

    def left(self, now_ms: int) -> int:
        """Starts this tick may still plan, in the window it plans into."""
        start = now_ms - now_ms % WINDOW_MS
        if start + WINDOW_MS - now_ms < MIN_LEFT_MS:
            start += WINDOW_MS
        if start != self.start_ms:
            self.start_ms, self.used = start, 0
        return max(self.limit - self.used, 0)

    def spend(self, starts: int) -> None:
        self.used += starts


@dataclass(slots=True)
class Limits:
    """A limited queue's limits and the leader's pacing windows (one per partition)."""

    rate: int = 0
    partition_rate: int = 0
    partition_concurrency: int = 0
    queue_window: RateWindow | None = None
    windows: dict[str | None, RateWindow] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: QueueSettings) -> Limits | None:
        """The queue's limits; None when it has none (nothing changes then)."""
        rate, per_rate = settings.rate_limit, settings.partition_rate_limit
        if not (rate or per_rate or settings.partition_concurrency):
            return None
        window = RateWindow(rate) if rate else None
        return cls(rate, per_rate, settings.partition_concurrency, window)

    def permit(self, messages: int) -> Permit | None:
        """What a ticket of `messages` carries (None: no rate binds it)."""
        if not (self.rate or self.partition_rate):
            return None
        return Permit(self.rate, self.partition_rate, messages)

    def budgets(self, now_ms: int, in_flight: Mapping[str | None, int]) -> Budgets:
        """This tick's budgets; `in_flight`: each partition's messages in live tickets."""
        queue = self.queue_window.left(now_ms) if self.queue_window else None
        return Budgets(self, now_ms, queue, dict(in_flight))


@dataclass(slots=True)
class Budgets:
    """What one tick may still plan under each limit, and what the limits held back."""

    limits: Limits
    now_ms: int
    queue: int | None
    in_flight: dict[str | None, int]
    held: dict[str, int] = field(default_factory=lambda: dict.fromkeys(HELD_REASONS, 0))

    def left(self, partition: str | None) -> tuple[int | None, str | None]:
        """The messages `partition` may still have this tick (None: any), and the limit that
        binds it."""
        found = self._found(partition)
        if not found:
            return None, None
        least = min(found)
        return least[0], least[2]

    def whole(self, partition: str | None) -> bool:
        """Is every limit of `partition` untouched (then an object larger than one may go)?"""
        return all(left == full for left, full, _ in self._found(partition))

    def _found(self, partition: str | None) -> list[tuple[int, int, str]]:
        """(left, whole amount, reason) of each limit that binds `partition`."""
        limits = self.limits
        found: list[tuple[int, int, str]] = []
        if self.queue is not None:
            found.append((self.queue, limits.rate, "rate_limit"))
        if limits.partition_rate:
            window = limits.windows.setdefault(partition, RateWindow(limits.partition_rate))
            left = window.left(self.now_ms)
            found.append((left, limits.partition_rate, "partition_rate_limit"))
        if limits.partition_concurrency:
            cap = limits.partition_concurrency
            busy = self.in_flight.get(partition, 0)
            found.append((max(cap - busy, 0), cap, "partition_concurrency"))
        return found

    def spend(self, partition: str | None, planned: int, limited: int) -> None:
        """`partition` was planned `planned` messages; `limited` more were held back."""
        _, reason = self.left(partition)
        if reason is not None and limited:
            self.held[reason] += limited
        if self.queue is not None:
            self.queue = max(self.queue - planned, 0)
            if self.limits.queue_window is not None:
                self.limits.queue_window.spend(planned)
        if self.limits.partition_rate:
            self.limits.windows[partition].spend(planned)
        self.in_flight[partition] = self.in_flight.get(partition, 0) + planned
