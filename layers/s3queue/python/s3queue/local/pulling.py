"""The pull loop: a runtime's worker threads take pending tickets of its queues from S3.

Every runtime runs it, leader or not, so any number of processes on any hosts share one queue's
work (see `s3queue.working.pull`).
It polls only while a thread is free, at once when one frees up after a poll that found work,
and backs off to `PULL_IDLE` seconds while it finds nothing (a thread freed meanwhile waits for
the next poll due, not sooner: the leader's coordinator offers its own threads new tickets
directly): an idle runtime costs one LIST per queue per `PULL_IDLE` (12 a minute per queue with
the default 5 s). A poll that took nothing but listed tickets others work backs off only to
`PULL_SEEN`: the queue is busy, its next tickets come soon, and a process with free threads
that waited 5 s for them would add nothing to a fleet (issue 22, item 4). Nor does a loop
ramp towards `PULL_IDLE` in its first `PULL_JOINING` seconds: a fleet started together
(``s3queue dev`` beside ``s3queue worker``s) finds no ticket until the leader's first tick, and
a worker that had backed off to 1.6-3.2 s by then joined the drain 2-4 s late.

What the runtime knows is not asked of S3: a ticket its coordinator published while no thread
was free is `hold`-en here and handed to the next free thread without a LIST or a GET
(`Puller.learn`), and the tickets its threads are working are never read by its own polls.
While other processes claim the queue's tickets too (`Puller.contested`: a poll saw one, or a
thread lost a claim, `lost`), what a poll or the coordinator told is trusted for a fifth of a
second only, and a freed thread's ticket costs a LIST rather than a likely lost claim.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from queue import Empty, SimpleQueue

from s3queue.common.concurrency import Threads
from s3queue.errors import StorageError
from s3queue.local.pool import WorkerPool
from s3queue.protocol.keys import QueueKeys
from s3queue.protocol.tickets import Invocation
from s3queue.storage.base import Storage
from s3queue.working.pull import Puller

log = logging.getLogger(__name__)

PULL_BUSY = 0.2
"""Seconds between polls while they find work (sooner when a thread frees up)."""
PULL_SEEN = 0.8
"""The longest wait between polls that find tickets, none of them free to take."""
PULL_IDLE = 5.0
"""The longest wait between polls that find nothing (the idle cost, and how long an idle
standby takes to join in when work appears)."""
PULL_READS = 8
"""Tickets one poll reads at once (`Puller`'s `run_all`): new tickets of a busy queue are read
in a round trip or two, not one after another."""
PULL_JOINING = 5.0
"""Seconds after the loop starts in which a poll that found nothing waits at most `PULL_SEEN`:
a process started with (or just before) its queue's coordinator finds the first tickets within
`PULL_SEEN` of their publication. The price, once per process start: 12 LISTs per queue in
its first 20 idle seconds where the ramp made 7 (polls at 0, 0.4, 1.2, 2, ... 5.2, 6.8, 10, 15
s against 0, 0.4, 1.2, 2.8, 6, 11, 16 s); an idle process then costs one LIST per `PULL_IDLE`
per queue as before."""


def next_delay(delay: float, found: bool, busy_elsewhere: bool, idle: float = PULL_IDLE) -> float:
    """The wait before the next poll after one that waited `delay`: `PULL_BUSY` after work was
    found, else twice as long, up to `PULL_SEEN` while others work the queue's tickets (or the
    loop is joining: `PULL_JOINING`), up to `idle` while it has none."""
    if found:
        return PULL_BUSY
    return min(max(delay, PULL_BUSY) * 2, PULL_SEEN if busy_elsewhere else idle)


class PullLoop:
    """Feeds `pool` with the pending tickets of `queues`, fairly, until `stop` is set."""

    def __init__(
        self,
        storage: Storage,
        prefix: str,
        queues: list[str],
        pool: WorkerPool,
        stop: threading.Event,
        *,
        idle: float = PULL_IDLE,
        applying: Callable[[], frozenset[str]] = frozenset,
    ) -> None:
        reads = Threads(PULL_READS, "s3queue-pull-read")
        self.pullers: Mapping[str, Puller] = {
            name: Puller(storage, QueueKeys(prefix, name), run_all=reads) for name in queues
        }
        self.pool, self.stop, self.idle = pool, stop, idle
        self.applying = applying
        """The tickets this process applies behind its threads (behind.py): its own writes."""
        self._turn = 0
        self.started = time.monotonic()
        self._held: SimpleQueue[Invocation] = SimpleQueue()

    def hold(self, payload: Invocation) -> None:
        """A ticket this runtime's coordinator published and no thread was free to take: the
        next free thread takes it from here (any thread may call this)."""
        self._held.put(payload)
        self.pool.freed.set()

    def run(self) -> None:
        delay, due, deadline = PULL_BUSY, 0.0, 0.0
        self.started = time.monotonic()
        while not self.stop.is_set():
            self.pool.freed.clear()  # before looking: a thread freed from now on wakes the wait
            self.hand_out()
            now = time.monotonic()
            stale = any(puller.stale() for puller in self.pullers.values())
            if (now >= due or stale) and self.pool.free():
                found = self.poll_once()
                soon = self.busy_elsewhere() or self.joining(now)
                delay = next_delay(delay, found > 0, soon, self.idle)
                # After work found, a freed thread polls at once; after none, at the deadline.
                due, deadline = (now if found else now + delay), now + delay
            wait = max(deadline - now, 0.0) if self.pool.free() else self.idle
            self.pool.freed.wait(wait)

    def lost(self, queue: str) -> None:
        """A thread found a ticket of `queue` it was given claimed or gone: another process
        works the queue (`Puller.lost`)."""
        puller = self.pullers.get(queue)
        if puller is not None:
            puller.lost()

    def joining(self, now: float) -> bool:
        """Whether the loop started less than `PULL_JOINING` seconds before `now`."""
        return now - self.started < PULL_JOINING

    def busy_elsewhere(self) -> bool:
        """Whether the last poll listed tickets other processes work (`Puller.others`)."""
        return any(puller.others for puller in self.pullers.values())

    def tickets_listed(self, within_ms: int = 1000) -> bool:
        """Whether a poll made within `within_ms` listed tickets this process does not work."""
        return any(
            puller.others and puller.clock.now_ms() - puller.listed_ms < within_ms
            for puller in self.pullers.values()
        )

    def hand_out(self) -> int:
        """Give free threads the tickets known to be pending (held, or seen by a poll)."""
        while True:
            try:
                payload = self._held.get_nowait()
            except Empty:
                break
            puller = self.pullers.get(str(payload.get("queue")))
            if puller is not None:
                puller.learn(payload)
        taken = 0
        for name, puller in self.pullers.items():
            free = self.pool.free()
            if free <= 0:
                break
            taken += self._offer(name, puller.take(free))
        return taken

    def _offer(self, name: str, payloads: list[Invocation]) -> int:
        taken = 0
        for payload in payloads:
            if self.pool.offer(payload):
                taken += 1
            else:  # a thread was taken meanwhile: it stays for the next poll
                self.pullers[name].forget(payload)
        return taken

    def poll_once(self) -> int:
        """One poll of each queue, starting with a different one each time; payloads taken."""
        names = list(self.pullers)
        self._turn = (self._turn + 1) % max(len(names), 1)
        taken = 0
        for name in names[self._turn :] + names[: self._turn]:
            free = self.pool.free()
            if free <= 0 or self.stop.is_set():
                break
            try:
                payloads = self.pullers[name].poll(free, self.pool.working() | self.applying())
            except StorageError as exc:  # S3 trouble: the next poll tries again
                log.warning("queue %s: pulling tickets failed: %s", name, exc)
                continue
            taken += self._offer(name, payloads)
        return taken
