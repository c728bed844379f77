"""Producer pacing: every sender of one S3 client slows down together when S3 answers
``503 SlowDown``, to the rate S3 accepted, however many threads share the client.

`Queue`'s own client runs every attempt through a `Pacer` (`s3queue.storage.clients.pace`).
Until the first throttle it only counts; after it, each attempt takes the next free slot at the
paced rate, and an attempt whose slot is more than `max_wait_s` away raises `Throttled` at once,
with nothing sent: the caller's clear signal to send again later (nothing is lost or dropped
silently: an enqueue either returns its id or raises).

Why not botocore's adaptive retry mode (which `Queue` used before): its `RateClocker` measures
the send rate only when a half-second slot closes, smoothed over the slots before. A throttle
that comes before the first slot closes (a fresh client whose 1,000 senders meet the first 503
within 0.4 s) takes 0 as the rate it was sending at: the token bucket falls to its floor,
0.5 requests a second, and CUBIC grows back from zero as 0.4 t³ (1,638 a second after 16 s);
after an idle spell the same measure is mostly the idle gap's (3,000 a second before a minute
of idle, 428 after a throttle in the first slot). The simulation's 1,000 producers fell to 675
enqueues a second that way, where 400 (whose first 503 came after the first slot) held the
partition's 3,500. So this pacer:

- measures the rate S3 *accepted* (answers that were not throttles) over the last second of
  activity, counted from when the senders began (`_Accepted`): right from the first answers;
- cuts to ``beta`` times that rate on a throttle of an attempt sent after the last cut; the
  answers to attempts already in flight at a cut carry no news, so they cut nothing (hundreds
  are in flight with many senders; TCP likewise reacts once per window);
- grows back on CUBIC's curve, C (t - K)³ + W (the AWS SDKs' adaptive mode: C = 0.4,
  beta = 0.7), W the accepted rate at the cut; past W, never above twice the rate accepted now
  (a rate the senders do not use tells nothing), but never below W either, so that senders
  back from an idle spell start at the last rate S3 gave (botocore's cap, twice its measure,
  holds them near zero then);
- gives each attempt its own slot (FIFO, one sleep each), where a token bucket wakes every
  waiter at every token.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from s3queue.errors import Throttled

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PacingState:
    """What a `Pacer` is doing: for a dashboard, a log line, a test."""

    paced: bool
    """False until S3 first throttled this client."""
    rate: float | None
    """Attempts a second it lets through now (None: not paced)."""
    accepted: float
    """Answers a second S3 accepted, over the last second of activity."""
    throttles: int
    cuts: int
    refused: int
    """Attempts that raised `Throttled` because their slot was more than max_wait_s away."""


class _Accepted:
    """Answers S3 accepted over the last `window_s`, from when the current stretch of sending
    began: the rate S3 gives, right from the first answers after a start or an idle spell."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.times: deque[float] = deque()
        self.since = -math.inf
        """When the senders began this stretch (none sent for a window before)."""
        self.last_sent = -math.inf

    def sent(self, now: float) -> None:
        if now - self.last_sent > self.window_s:
            self.since = now
        self.last_sent = now

    def add(self, now: float) -> None:
        self.times.append(now)
        self._forget(now)

    def rate(self, now: float) -> float:
        self._forget(now)
        span = min(self.window_s, now - self.since)
        return len(self.times) / max(span, self.window_s / 20)

    def _forget(self, now: float) -> None:
        while self.times and self.times[0] <= now - self.window_s:
            self.times.popleft()


class Pacer:
    """Paces the attempts of one client's senders (see the module docstring). Thread-safe; a
    sender sleeps only outside the lock. `clock` and `sleep` in seconds (tests and the
    simulation run it on their own time)."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        max_wait_s: float = 10.0,
        beta: float = 0.7,
        scale: float = 0.4,
        min_rate: float = 10.0,
        window_s: float = 1.0,
    ) -> None:
        self._clock, self._sleep = clock, sleep
        self.max_wait_s, self.beta, self.scale, self.min_rate = max_wait_s, beta, scale, min_rate
        self._lock = threading.Lock()
        self._accepted = _Accepted(window_s)
        self._paced = False
        self._next_s = -math.inf
        self._w_max = 0.0
        self._k = 0.0
        self._cut_at = -math.inf
        self._throttles = self._cuts = self._refused = 0

    def before_send(self) -> float:
        """Wait for this attempt's slot; its send time, for `answered`. Raises `Throttled`
        (nothing sent) when the slot is more than `max_wait_s` away."""
        now = self._clock()
        with self._lock:
            self._accepted.sent(now)
            if not self._paced:
                return now
            rate = self._rate(now)
            slot = max(now, self._next_s)
            wait = slot - now
            if wait > self.max_wait_s:
                self._refused += 1
                raise Throttled(
                    f"S3 is throttling this client: it sends {rate:.0f} requests a second and "
                    f"the next free slot is {wait:.1f} s away (over max_wait_s="
                    f"{self.max_wait_s:g}); nothing was sent: send it again later, or put "
                    "many messages in one request (enqueue_many, batching)"
                )
            self._next_s = slot + 1.0 / rate
        if wait > 0:
            self._sleep(wait)
        return slot

    def answered(self, sent_s: float, *, throttled: bool) -> None:
        """An attempt sent at `sent_s` (`before_send`'s value) was answered: accepted, or
        throttled (which cuts the rate unless the attempt was sent before the last cut)."""
        now = self._clock()
        with self._lock:
            if not throttled:
                self._accepted.add(now)
                return
            self._throttles += 1
            if sent_s < self._cut_at:
                return
            self._w_max = max(self._accepted.rate(now), self.min_rate)
            self._k = (self._w_max * (1 - self.beta) / self.scale) ** (1 / 3)
            self._cut_at = now
            self._cuts += 1
            first, self._paced = not self._paced, True
            rate = self._rate(now)
        log = _log.warning if first else _log.debug
        log("S3 throttled: pacing this client's requests at %.0f a second", rate)

    def _rate(self, now: float) -> float:
        """CUBIC's rate `now` after the last cut; past W, at most twice the accepted rate."""
        cubic = self.scale * (now - self._cut_at - self._k) ** 3 + self._w_max
        ceiling = max(2 * self._accepted.rate(now), self._w_max)
        return max(min(cubic, ceiling), self.min_rate)

    def state(self) -> PacingState:
        now = self._clock()
        with self._lock:
            return PacingState(
                paced=self._paced,
                rate=self._rate(now) if self._paced else None,
                accepted=self._accepted.rate(now),
                throttles=self._throttles,
                cuts=self._cuts,
                refused=self._refused,
            )
