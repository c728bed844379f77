"""When a read is raced by a second one: after its own recent 95th percentile, within a budget.

"For latency-sensitive applications, Amazon S3 advises tracking and aggressively retrying
slower operations. When you retry a request, we recommend using a new connection"; for
requests of a steady size, "identify the slowest 1 percent of requests and to retry them. Even
a single retry is frequently effective at reducing latency" (AWS whitepaper *Best practices
design patterns: optimizing Amazon S3 performance*, "Timeouts and retries for
latency-sensitive applications"). A read (GET, HEAD, LIST) writes nothing, and either answer
is S3's state at some moment after the call began, so racing a second copy of it changes
nothing but which answer comes first. `transport.Transport` sends the second on another
connection once the first has been out longer than `after_ms`, uses whichever answers first
(the other if the first to answer is a 5xx), on the caller's thread (no pool, no handoff),
and reads the other's answer later to keep its connection. The AWS simulation races them the
same way in virtual time (bench/sims3.py).

`after_ms` is the 95th percentile of the last `SAMPLES` answers of that kind, at least
`FLOOR_MS` (a nearby server's answers in a millisecond or two are never raced: a slow one
there is this machine's CPU, which a second request would only load more); none before
`WARMUP` answers. At most `BUDGET` of the reads are raced, counted over the last ones: a
hedge is one more request, and S3 past its budget answers 503 at once (never slow), so
throttling sends none.
"""

from __future__ import annotations

import threading
from collections import deque

SAMPLES = 256
"""Answers of one kind the percentile is taken over."""
WARMUP = 32
"""No race before this many answers of a kind."""
QUANTILE = 0.95
FLOOR_MS = 25.0
"""Never raced sooner: S3's median for a small read is in the tens of milliseconds; a server
that answers faster than this is near, and a slow answer from it is this machine's load."""
BUDGET = 0.08
"""The most of a kind's reads raced, over its last `SAMPLES` (a little above the 5 % that
`QUANTILE` races when the latency holds still)."""
READS = frozenset({"GetObject", "HeadObject", "ListObjectsV2"})
_REFRESH = 32
"""The percentile is taken again every this many answers."""


class Hedging:
    """One client's latency record and race decisions (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kinds: dict[str, _Kind] = {}

    def after_ms(self, operation: str) -> float | None:
        """How long a read of this kind waits before its race starts; None: never raced (not
        a read, too few answers yet, or the budget spent)."""
        if operation not in READS:
            return None
        with self._lock:
            kind = self._kinds.get(operation)
            if kind is None or kind.after_ms is None:
                return None
            if kind.spent + 1 > BUDGET * SAMPLES:
                return None
            return kind.after_ms

    def observe(self, operation: str, latency_ms: float, *, raced: bool) -> None:
        """A read of this kind answered after `latency_ms` (the first attempt's, or the time
        to whichever answered first); `raced`: a second one was sent."""
        if operation not in READS:
            return
        with self._lock:
            kind = self._kinds.get(operation)
            if kind is None:
                kind = self._kinds[operation] = _Kind()
            kind.add(latency_ms, raced)


class _Kind:
    __slots__ = ("after_ms", "count", "latencies", "raced", "spent")

    def __init__(self) -> None:
        self.latencies: deque[float] = deque(maxlen=SAMPLES)
        self.raced: deque[int] = deque(maxlen=SAMPLES)
        self.spent = 0
        """Races among the last `SAMPLES` reads (the sum of `raced`)."""
        self.after_ms: float | None = None
        self.count = 0

    def add(self, latency_ms: float, raced: bool) -> None:
        self.latencies.append(latency_ms)
        if len(self.raced) == SAMPLES:
            self.spent -= self.raced[0]
        self.raced.append(1 if raced else 0)
        self.spent += 1 if raced else 0
        self.count += 1
        if self.count >= WARMUP and (self.after_ms is None or self.count % _REFRESH == 0):
            ordered = sorted(self.latencies)
            at = ordered[min(len(ordered) - 1, int(QUANTILE * len(ordered)))]
            self.after_ms = max(FLOOR_MS, at)
