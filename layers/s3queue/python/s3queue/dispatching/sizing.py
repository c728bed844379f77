"""How many messages a ticket carries: `batch_size` while workers are free, more under a backlog.

A ticket costs the same whatever it carries (one PUT to publish it, a lease GET, a claim and a
commit PUT, an invoke) and holds one of the queue's `max_in_flight_tickets` slots from its
dispatch to its apply. When a tick finds more ready messages than its free slots can take at
`batch_size` each, small tickets leave the rest waiting for a slot while every slot pays the
fixed cost again; the tick sizes its tickets to the backlog instead (elastic tickets), so the
cost and the time a slot spends outside a handler are shared by more messages. Two bounds keep
a grown ticket from doing harm:

- **Time.** A grown ticket holds about `ticket_seconds` of work, at the pace recent tickets
  went from their creation to their apply (`Pace`: moving sums, so it includes the dispatch;
  until a ticket has finished, tickets do not grow). Slow handlers keep tickets small: a
  worker never approaches its Lambda timeout and releases the rest (one copy PUT each), and a
  slot still turns over every few seconds. Never more than `max_batch_size`.
- **Growth in one step, not by doubling.** A ticket's life is a fixed part (its PUT, the
  invoke, a Lambda start, the claim, the next tick seeing it gone: about a second on AWS) plus
  a part per message. Sized by the ratio of the two sums alone, a ticket is at most about
  twice the last ones while the fixed part dominates, and a backlog waits through six or
  seven generations of tickets before they reach their size (issue 22: ~8 s of a 10 s window
  in the AWS simulation). `Pace.fit` separates the two parts (a least-squares line over the
  same moving sums, once tickets of different sizes have finished), so the next tickets are
  sized to `ticket_seconds` directly; at most `GROWTH` times the recent tickets' mean, so one
  misleading fit cannot make a ticket far longer than intended.
- **Memory.** A grown ticket's objects add up to at most `GROWN_BYTES` (by the sizes the
  LIST gave); its first object always goes in, whatever its size.
- **Workers, not tickets, short.** A live ticket no worker has claimed for `QUEUED_MS` means
  the tickets wait for workers (the local runtime keeps more tickets in flight than it has
  threads; on Lambda, the concurrency is taken): then nothing grows, as larger tickets would
  only queue behind them and leave a backlog's tail to a few threads. (The LIST of tickets
  says it for free: a claim changes a ticket's ETag.)
- **A quick lane.** Grown tickets never take the last slot: one stays for tickets of
  `batch_size` at most, so a partition, a FIFO group or a message that arrives behind a
  backlog gets a slot within about one small ticket's time, not a grown one's.
- **Slots for the next ticks.** Tickets are no smaller than the arrival rate needs to keep
  the slots at most `SLOT_SHARE` busy (`least`): a tick that spread its messages over every
  free slot left the next ticks none (issue 22's p99 at half capacity).

Packed objects count their messages: a pack of 100 fits a grown ticket beside others, which
is what lets packed enqueues share tickets (one claim for many objects).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from s3queue.contract.settings import QueueSettings

SMOOTHING = 0.3
"""Weight of the newest finished ticket in `Pace`."""
QUEUED_MS = 2000
"""A ticket unclaimed this long after its dispatch waits for a worker (a Lambda start and a
claim take about half a second)."""
GROWTH = 4
"""A fitted size is at most this many times the recent tickets' mean (`Pace.fit`)."""
SPREAD = 0.25
"""`Pace.fit` is trusted only when the recent sizes' standard deviation is at least this share
of their mean: tickets all of one size say nothing about the part per message."""
GROWN_BYTES = 16 * 1024 * 1024
"""A grown ticket's objects add up to at most this many bytes (a worker holds a ticket's
objects until its apply): packs of large messages grow less."""


@dataclass(slots=True)
class Pace:
    """Milliseconds per message of finished tickets, from creation to gone: moving sums of
    durations and of messages, so a large ticket weighs more than a small one; and the sums a
    least-squares line of duration over messages needs (`fit`)."""

    _ms: float = 0.0
    _messages: float = 0.0
    _weight: float = 0.0
    _squares: float = 0.0
    """Moving sum of messages squared."""
    _products: float = 0.0
    """Moving sum of messages times duration."""

    def finished(self, messages: int, took_ms: int) -> None:
        if messages <= 0:
            return
        keep, took = 1.0 - SMOOTHING, max(1, took_ms)
        self._ms = keep * self._ms + SMOOTHING * took
        self._messages = keep * self._messages + SMOOTHING * messages
        self._weight = keep * self._weight + SMOOTHING
        self._squares = keep * self._squares + SMOOTHING * messages * messages
        self._products = keep * self._products + SMOOTHING * messages * took

    def state(self) -> tuple[float, ...]:
        """The moving sums, to hand to the next leader (`LeaseDoc.pace`); none before any
        ticket finished."""
        if not self._weight:
            return ()
        return (self._ms, self._messages, self._weight, self._squares, self._products)

    def adopt(self, state: tuple[float, ...]) -> bool:
        """Start from a predecessor's `state` if this pace has seen no ticket finish yet (and
        the state makes sense); whether it did."""
        if self._weight or len(state) != 5 or min(state) < 0 or not state[1] or not state[2]:
            return False
        self._ms, self._messages, self._weight, self._squares, self._products = state
        return True

    @property
    def ms_per_message(self) -> float | None:
        return self._ms / self._messages if self._messages else None

    @property
    def mean_messages(self) -> float:
        """The recent tickets' mean size (0 before any finished)."""
        return self._messages / self._weight if self._weight else 0.0

    def fit(self) -> tuple[float, float] | None:
        """(fixed ms, ms per message) of a ticket's life, by a least-squares line over the
        recent tickets; None while their sizes are too alike to tell (`SPREAD`) or the line
        makes no sense (no positive part per message, or a negative fixed part)."""
        w, n = self._weight, self._messages
        if not w:
            return None
        mean = n / w
        variance = self._squares / w - mean * mean
        if variance < (SPREAD * mean) ** 2:
            return None
        per = (self._products / w - mean * self._ms / w) / variance
        fixed = self._ms / w - per * mean
        if per <= 0 or fixed < 0:
            return None
        return fixed, per


SLOT_SHARE = 0.7
"""Share of the slots that arrivals may keep busy on average (`least`): the rest absorbs
bursts, so a tick rarely finds every slot taken."""


@dataclass(frozen=True, slots=True)
class Sizes:
    """A tick's ticket sizes: the first `grown` new tickets may carry up to `grown_size`
    messages, every other one up to `batch_size`."""

    batch_size: int
    grown_size: int
    grown: int

    def limit(self, index: int) -> tuple[int, int | None]:
        """Messages the tick's `index`-th new ticket may carry, and bytes (None: no bound)."""
        if index < self.grown:
            return self.grown_size, GROWN_BYTES
        return self.batch_size, None


def sizes(
    settings: QueueSettings,
    pace: Pace,
    *,
    ready: int,
    free: int,
    live_grown: int,
    queued: int = 0,
    rate: float | None = None,
    folders: int = 1,
) -> Sizes:
    """Ticket sizes for a tick that found `ready` dispatchable messages in `folders` folders,
    with `free` slots, `live_grown` grown tickets still live and `queued` waiting for a
    worker; `rate`: how many arrive a second.

    Fewer, larger tickets when `rate` needs them (`least`): a tick that spread what it found
    over every free slot left the next ticks none, and their messages waited for a slot (issue
    22's p99 at half capacity). Each folder still gets its ticket."""
    small = settings.batch_size
    lanes = max(0, settings.max_in_flight_tickets - 1 - live_grown)
    grown = min(free, lanes)
    floor = least(settings, pace, rate, queued)
    if floor > small and grown > 0:
        grown = min(grown, max(folders, math.ceil(ready / floor)))
    elif grown <= 0 or ready <= free * small:
        return Sizes(small, small, 0)
    size = min(most(settings, pace, queued), math.ceil(ready / grown))
    return Sizes(small, size, grown) if size > small else Sizes(small, small, 0)


def least(settings: QueueSettings, pace: Pace, rate: float | None, queued: int = 0) -> int:
    """The smallest ticket that keeps the slots from filling up at `rate` arrivals a second:
    each ticket holds a slot for its fixed part plus its messages' (`Pace.fit`), so `rate / n`
    tickets a second keep ``rate * (fixed / n + per)`` slots busy, at most `SLOT_SHARE` of
    them. `batch_size` when the pace cannot tell (and the largest when nothing smaller does)."""
    line = pace.fit()
    if rate is None or line is None or queued:
        return settings.batch_size
    fixed, per = line
    spare = SLOT_SHARE * settings.max_in_flight_tickets - rate * per / 1000
    largest = most(settings, pace, queued)
    if spare <= 0:
        return largest
    return max(settings.batch_size, min(largest, math.ceil(rate * fixed / 1000 / spare)))


def most(settings: QueueSettings, pace: Pace, queued: int = 0) -> int:
    """The largest ticket worth making now: `ticket_seconds` of work, within bounds;
    `batch_size` while `queued` tickets wait for a worker, or before any ticket finished."""
    per_message = pace.ms_per_message
    if per_message is None or queued:
        return settings.batch_size
    seconds = min(settings.ticket_seconds, settings.timeout / 2)
    fits = int(seconds * 1000 / per_message)
    line = pace.fit()
    if line is not None:  # sized to `ticket_seconds` at once (module docstring)
        fixed, per = line
        fitted = int((seconds * 1000 - fixed) / per)
        fits = max(fits, min(fitted, int(GROWTH * pace.mean_messages)))
    return max(settings.batch_size, min(settings.max_batch_size, fits))
