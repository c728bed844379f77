"""How many messages a ticket carries: `batch_size` while workers are free, more under a backlog.

A ticket costs the same whatever it carries (one PUT to publish it, a lease GET, a claim and a
commit PUT, an invoke) and holds one of the queue's `max_in_flight_tickets` slots from its
dispatch to its apply. When a tick finds more ready messages than its free slots can take at
`batch_size` each, small tickets leave the rest waiting for a slot while every slot pays the
fixed cost again; the tick sizes its tickets to the backlog instead (elastic tickets), so the
cost and the time a slot spends outside a handler are shared by more messages. Two bounds keep
a grown ticket from doing harm:

- **Time.** A grown ticket holds about `ticket_seconds` of work, at the pace recent tickets
  went from their creation to their apply (`Pace`: a ratio of moving sums, so it includes the
  dispatch; until a ticket has finished, tickets do not grow). Slow handlers keep tickets
  small: a worker never approaches its Lambda timeout and releases the rest (one copy PUT
  each), and a slot still turns over every few seconds. Never more than `max_batch_size`.
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

Packed objects count their messages: a pack of 100 fits a grown ticket beside others, which
is what lets packed enqueues share tickets (one claim for many objects).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from s3queue.contract.settings import QueueSettings

SMOOTHING = 0.3
"""Weight of the newest finished ticket in `Pace`."""
QUEUED_MS = 1000
"""A ticket unclaimed this long after its dispatch waits for a worker (a Lambda start and a
claim take about half a second)."""
GROWN_BYTES = 16 * 1024 * 1024
"""A grown ticket's objects add up to at most this many bytes (a worker holds a ticket's
objects until its apply): packs of large messages grow less."""


@dataclass(slots=True)
class Pace:
    """Milliseconds per message of finished tickets, from creation to gone: moving sums of
    durations and of messages, so a large ticket weighs more than a small one."""

    _ms: float = 0.0
    _messages: float = 0.0

    def finished(self, messages: int, took_ms: int) -> None:
        if messages <= 0:
            return
        keep = 1.0 - SMOOTHING
        self._ms = keep * self._ms + SMOOTHING * max(1, took_ms)
        self._messages = keep * self._messages + SMOOTHING * messages

    @property
    def ms_per_message(self) -> float | None:
        return self._ms / self._messages if self._messages else None


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
) -> Sizes:
    """Ticket sizes for a tick that found `ready` dispatchable messages, with `free` slots,
    `live_grown` grown tickets still live and `queued` waiting for a worker."""
    small = settings.batch_size
    lanes = max(0, settings.max_in_flight_tickets - 1 - live_grown)
    grown = min(free, lanes)
    if grown <= 0 or ready <= free * small:
        return Sizes(small, small, 0)
    size = min(most(settings, pace, queued), math.ceil(ready / grown))
    return Sizes(small, size, grown) if size > small else Sizes(small, small, 0)


def most(settings: QueueSettings, pace: Pace, queued: int = 0) -> int:
    """The largest ticket worth making now: `ticket_seconds` of work, within bounds;
    `batch_size` while `queued` tickets wait for a worker, or before any ticket finished."""
    per_message = pace.ms_per_message
    if per_message is None or queued:
        return settings.batch_size
    seconds = min(settings.ticket_seconds, settings.timeout / 2)
    fits = int(seconds * 1000 / per_message)
    return max(settings.batch_size, min(settings.max_batch_size, fits))
