"""`ServerClock`: S3's own time, as this process can know it from the answers it gets.

Every S3 answer carries a ``Date`` (whole seconds). An answer sent at local time ``s`` and
received at ``r`` with ``Date: d`` says S3's clock read between ``d`` and ``d + 1 s`` at some
moment between ``s`` and ``r``, so S3's time minus the local clock lies in
``[d - r, d + 1 s - s]``. The tightest bounds over the recent answers give S3's time now within
an interval that narrows to about one round trip as answers arrive at different fractions of a
second (a single answer: 1 s plus one round trip). The local clock is a monotonic one, so a
wall clock that steps or runs minutes off changes nothing.

Producers key grouped messages with it (issue 19.6), and wait out the interval before an
enqueue returns (`wait_past`, a *commit wait*): a key is the latest time S3 can read now, and the
enqueue returns only once S3's time has certainly passed it, so a later enqueue, on any host, with
any wall clock, draws a later key::

    producer A   kA = latest(now) --- PUT --- wait until earliest(now) > kA --- return
    producer B                                                   start: kB = latest(now) > kA
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from s3queue.common.clock import Clock, SystemClock
from s3queue.storage.responses import served

RESOLUTION_MS = 1000
"""``Date`` counts whole seconds."""
WINDOW_MS = 600_000
"""Answers older than this no longer count: the local clock may drift a little from S3's."""
MAX_SAMPLES = 64
NARROW_MS = 200
"""A commit wait facing a wider interval than this asks S3 (a HEAD) to narrow it."""
PROBES = 4
"""At most this many such HEADs per commit wait."""


class MonotonicClock:
    """The wall clock's reading at creation, then advanced by the monotonic clock: never steps."""

    def __init__(self) -> None:
        self._origin_ms = time.time_ns() // 1_000_000
        self._start = time.monotonic_ns()

    def now_ms(self) -> int:
        return self._origin_ms + (time.monotonic_ns() - self._start) // 1_000_000

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class ServerClock:
    """S3's time: `now_ms` is the earliest it can be now, `latest.now_ms` the latest (module doc).

    Before any answer arrived it is its local clock; `calibrate` asks `probe` (one cheap
    request) once for an answer. Without answers `wait_past` waits for nothing.
    """

    def __init__(self, base: Clock | None = None, *, probe: Callable[[], None] | None = None):
        self.base: Clock = base or MonotonicClock()
        self.probe = probe
        self._calibrated = False
        self._marks = [0, 0]
        """The highest earliest and latest read: bounds fall as answers narrow them."""
        self.latest = Latest(self)
        """The same time as its latest possible reading: a grouped key's clock."""
        self._lock = threading.Lock()
        self._samples: deque[tuple[int, int, int]] = deque(maxlen=MAX_SAMPLES)
        """(received, low, high): S3's time minus the local clock lies in [low, high]."""

    def local_ms(self) -> int:
        return self.base.now_ms()

    def observe(self, served_ms: int, sent_ms: int, received_ms: int) -> None:
        """An answer with ``Date`` `served_ms`, sent and received at these local times."""
        low, high = served_ms - received_ms, served_ms + RESOLUTION_MS - sent_ms
        with self._lock:
            bounds = self._bounds(received_ms)
            if bounds is not None and (low > bounds[1] or high < bounds[0]):
                self._samples.clear()  # S3's clock or ours jumped: start over
            self._samples.append((received_ms, low, high))

    def observe_answer(self, answer: Any, sent_ms: int) -> None:
        """`observe` a boto3 response dict (or a `ClientError`'s), or a record with its
        ``served_ms``, sent at local time `sent_ms`."""
        if isinstance(answer, dict):
            date = served(answer)
        else:
            date = int(getattr(answer, "served_ms", 0) or 0)
        if date:
            self.observe(date, sent_ms, self.base.now_ms())

    def _bounds(self, now: int) -> tuple[int, int] | None:
        recent = [(low, high) for at, low, high in self._samples if now - at <= WINDOW_MS]
        if not recent:
            return None
        return max(low for low, _ in recent), min(high for _, high in recent)

    def offsets(self) -> tuple[int, int] | None:
        """S3's time minus the local clock: its lowest and highest possible values."""
        now = self.base.now_ms()
        with self._lock:
            return self._bounds(now)

    def calibrate(self) -> None:
        """Ask S3 once (`probe`) if no answer has told its time yet."""
        if self.offsets() is None and self.probe is not None and not self._calibrated:
            self._calibrated = True
            self.probe()

    def now_ms(self) -> int:
        """The earliest S3's clock can read now (never less than an earlier reading): a time
        S3 has certainly reached, for anything but a grouped key (`latest`)."""
        return self._read(0)

    def _read(self, side: int) -> int:
        offsets = self.offsets()
        if offsets is None:
            return self.base.now_ms()  # the local clock until S3 answers: no mark from it
        value = self.base.now_ms() + offsets[side]
        with self._lock:
            self._marks[side] = max(self._marks[side], value)
            return self._marks[side]

    @property
    def calibrated(self) -> bool:
        """Whether an answer has told S3's time (else it reads the local clock)."""
        return self.offsets() is not None

    def wait_past(self, s3_ms: int) -> None:
        """Return once S3's clock has certainly passed `s3_ms` (the commit wait).

        While the interval is wide (one answer tells S3's time within a second), the wait asks
        S3 (a HEAD) at the moment its next second begins if the offset is the interval's middle:
        whether the answer's ``Date`` shows the new second or not halves the interval. So a
        process's commit waits shrink to about a round trip within its first waits, instead of
        after many answers at random fractions of a second."""
        probes = PROBES
        while True:
            offsets = self.offsets()
            if offsets is None:
                return
            low, high = offsets
            now = self.base.now_ms()
            left = s3_ms - (now + low)
            if left < 0:
                return
            if probes and self.probe is not None and high - low > NARROW_MS:
                middle = (low + high) // 2
                pause = -(-(now + middle) // RESOLUTION_MS) * RESOLUTION_MS - middle - now
                if 0 <= pause < left:
                    probes -= 1
                    self.base.sleep(pause / 1000)
                    self.probe()
                    continue
            self.base.sleep((left + 1) / 1000)

    def sleep(self, seconds: float) -> None:
        self.base.sleep(seconds)


class Latest:
    """A `ServerClock` read at the latest S3's clock can be now (never less than before)."""

    def __init__(self, clock: ServerClock) -> None:
        self.clock = clock

    def now_ms(self) -> int:
        return self.clock._read(1)

    @property
    def calibrated(self) -> bool:
        return self.clock.calibrated

    def sleep(self, seconds: float) -> None:
        self.clock.sleep(seconds)


def server_time(storage: object) -> Clock:
    """The clock of S3's time for a storage: its ``server_clock`` (`S3Storage`'s estimate,
    `MemoryStorage`'s own clock), else the system clock."""
    clock = getattr(storage, "server_clock", None)
    return clock if clock is not None else SystemClock()
