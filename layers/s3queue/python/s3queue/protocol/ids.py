"""Ids and the time in keys: what a producer stamps into the names it writes."""

from __future__ import annotations

import os
import threading
import time
import weakref

from s3queue.common.clock import Clock, SystemClock

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


class _IdGenerator:
    """ULID-like ids: 48-bit ms time + 80 bits, monotonic within a process, sortable."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0
        # A forked child starts afresh: its parent's last id would otherwise make two children
        # of one millisecond both return `_last + 1`, and a lock held at the fork by another
        # thread of the parent would never be released in the child.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def new(self, now_ms: int | None = None) -> str:
        with self._lock:
            value = ((now_ms or time.time_ns() // 1_000_000) << 80) | int.from_bytes(
                os.urandom(10), "big"
            )
            value = max(value, self._last + 1)
            self._last = value
        return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


new_id = _IdGenerator().new


class _KeyClock:
    """The time a producer writes into its keys: its clock, never below the highest reading
    of that clock in this process (every thread, every queue). A wall clock that steps back (an
    NTP correction) would otherwise key a group's later message before its earlier one. Every
    `SystemClock` reads one wall clock, so they share one mark; an injected clock has its own.
    A forked child inherits the marks, which is still right: its keys follow the parent's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marks: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()

    def stamp(self, clock: Clock) -> int:
        owner: object = SystemClock if isinstance(clock, SystemClock) else clock
        now = clock.now_ms()
        if not getattr(clock, "calibrated", True):
            return now  # a clock of S3's time before S3 told it: no mark (servertime.py)
        with self._lock:
            mark = max(self._marks.get(owner, 0), now)
            self._marks[owner] = mark
            return mark


key_time = _KeyClock().stamp
"""`clock`'s time, raised to its high-water mark: the time of every key a producer writes."""
