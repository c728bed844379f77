"""The coordinator of one queue: lead, list, reconcile, plan and publish, one tick at a time.

A tick costs a bounded number of requests whatever the backlog: one LIST of tickets, one of
the inbox, at most ``scan_pages`` of messages from the cursor, and one PUT per new ticket.

Race that fixes the order of the LISTs:

    worker     apply outcomes (delete msg) --- DELETE ticket
    leader                 LIST tickets ................. LIST msg/
Tickets are listed first. A ticket missing from that LIST was deleted before it, after its
outcomes were applied, so the later LIST of messages cannot show its finished messages as new.

This module keeps the tick's order, the lease, and the way out: reading the cursor, planning,
publishing. What the LIST of tickets says (a newer leader, epochs to seal, tickets to learn,
fence, re-invoke, reap or forget) is reconcile.py's; whether there is work at all, probe.py's.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from s3queue import scan
from s3queue.admin import iter_keys
from s3queue.clock import Clock, SystemClock, ms
from s3queue.config import CoordinatorSettings, QueueSettings
from s3queue.cursor import Cursor
from s3queue.errors import Conflict
from s3queue.events import Emitter, Listener
from s3queue.keys import MsgKey, QueueKeys, check_queue_name
from s3queue.lease import LeaderLease
from s3queue.model import Ref, Ticket
from s3queue.probe import probe
from s3queue.reconcile import Invoker, Known, Reconciler
from s3queue.storage.base import Entry, Storage, new_token

__all__ = ["Coordinator", "Invoker", "Known", "TickResult"]


@dataclass(frozen=True, slots=True)
class TickResult:
    """What one tick did and saw."""

    leader: bool
    dispatched: int = 0
    live_tickets: int = 0
    waiting: int = 0
    """Ready messages it could not dispatch yet (backpressure or busy groups)."""
    reaped: int = 0
    in_flight: int = 0
    """Messages in live tickets (a packed object counts all its messages)."""
    oldest_ready_ms: int | None = None
    """Visible time of the oldest ready message not in flight, if the tick scanned."""

    @property
    def idle(self) -> bool:
        return self.leader and not (self.dispatched or self.live_tickets or self.waiting)


@dataclass(slots=True)
class _Memory:
    """The leader's view; rebuilt from S3 at every new epoch."""

    cursor: Cursor
    epoch: int = 0
    next_seq: int = 0
    known: dict[str, Known] = field(default_factory=dict)


class Coordinator:
    """Dispatches one queue's messages as tickets while it holds the queue's lease."""

    def __init__(
        self,
        storage: Storage,
        queue: str,
        *,
        invoker: Invoker,
        prefix: str = "s3queue",
        settings: QueueSettings | None = None,
        coordination: CoordinatorSettings | None = None,
        clock: Clock | None = None,
        owner: str | None = None,
        listener: Listener | None = None,
    ) -> None:
        self.storage = storage
        self.keys = QueueKeys(prefix, check_queue_name(queue))
        self.settings = settings or QueueSettings()
        self.config = coordination or CoordinatorSettings()
        self.clock = clock or SystemClock()
        self.emit = Emitter(queue, listener)
        self.owner = owner or uuid.uuid4().hex[:12]
        self.lease = LeaderLease(
            storage,
            self.keys.lease,
            owner=self.owner,
            clock=self.clock,
            ttl_ms=ms(self.config.lease_ttl),
            skew_ms=ms(self.config.skew_tolerance),
            epochs=self._ticket_epochs,
        )
        self.reconciler = Reconciler(
            storage,
            self.keys,
            self.settings,
            self.config,
            lease=self.lease,
            clock=self.clock,
            invoker=invoker,
            emit=self.emit,
        )
        self.memory = self._fresh()

    def _fresh(self, epoch: int = 0) -> _Memory:
        return _Memory(Cursor(self.keys, self.config), epoch=epoch)

    def tick(self) -> TickResult:
        """Lead if possible, then reconcile tickets and dispatch what is ready."""
        if not self.lease.ensure():
            self.memory = self._fresh()
            self.emit("not_leader", self.clock.now_ms(), owner=self.owner)
            return TickResult(leader=False)
        if self.lease.epoch != self.memory.epoch:
            self.memory = self._fresh(self.lease.epoch)
            self.emit("takeover", self.clock.now_ms(), epoch=self.lease.epoch, owner=self.owner)
        listed = self._list_tickets()
        reconciler = self.reconciler
        if reconciler.outranked(listed) or (
            self.lease.pending_seals() and not reconciler.seal(listed)
        ):
            self.memory = self._fresh()
            return TickResult(leader=False)
        reaped = reconciler.reconcile(listed, self.memory.known, self.memory.cursor)
        return self._dispatch(reaped)

    def probe(self) -> bool:
        """Is there anything to do? About one LIST, no lease (probe.py)."""
        return probe(self.storage, self.keys, self.clock)

    def release(self) -> None:
        """Give up the lease now (end of a Lambda invocation) so the next run takes over at once."""
        if self.lease.leading:
            self.lease.release(self.memory.next_seq - 1)
            self.emit("release", self.clock.now_ms(), epoch=self.memory.epoch)
        self.memory = self._fresh()

    def _ticket_epochs(self) -> set[int]:
        return {p[0] for e in self._list_tickets() if (p := self.keys.parse_ticket(e.key))}

    def _list_tickets(self) -> list[Entry]:
        return list(iter_keys(self.storage, self.keys.tickets))

    def _dispatch(self, reaped: int) -> TickResult:
        """Read the cursor, plan tickets within capacity, publish them."""
        memory, now = self.memory, self.clock.now_ms()
        capacity = self.settings.max_in_flight_tickets - len(memory.known)
        if capacity <= 0:
            return self._result(reaped)
        in_flight = {r.key for k in memory.known.values() for r in k.ticket.refs}
        busy = self._busy_groups()
        saved = memory.cursor.snapshot()
        candidates, stopped = self._read(now, capacity, in_flight, busy)
        # A group whose waiting message this tick did not read is blocked: its later messages
        # may not overtake it (FIFO), wherever the cursor is.
        absent = memory.cursor.absent_heads(candidates)
        planner = scan.Planner(
            now_ms=now,
            batch_size=self.settings.batch_size,
            capacity=capacity,
            in_flight=in_flight,
            busy_groups=busy | absent,
            live_origins={self.keys.ticket_origin(key) for key in memory.known},
        )
        plan = planner.run(candidates)
        memory.cursor.settle_held(plan, absent, stopped)
        dispatched = self._publish_plan(plan, saved, stopped, now)
        memory.cursor.delete_done(self.storage)
        oldest = _oldest_ready(candidates, in_flight, now)
        return self._result(reaped, dispatched, plan.waiting, oldest)

    def _read(
        self, now: int, capacity: int, in_flight: set[str], busy: set[str]
    ) -> tuple[list[scan.Candidate], str]:
        """The cursor's candidates, read until there are enough to fill `capacity`."""
        batch_size = self.settings.batch_size
        want = capacity * batch_size

        def enough(found: Iterable[scan.Candidate]) -> bool:
            return _dispatchable(found, in_flight, busy, batch_size) >= want

        return self.memory.cursor.read(self.storage, now, enough, want=want)

    def _publish_plan(self, plan: scan.Plan, saved: Cursor, stopped: str, now: int) -> int:
        """Publish every batch; move the cursor on if all went out, else back to `saved`."""
        cursor = self.memory.cursor
        try:
            published = [self._publish(batch, now) for batch in plan.batches]
        except BaseException:
            cursor.restore(saved)
            raise
        if all(published):
            cursor.advance(plan, stopped, now)
        else:  # a batch did not go out: read its messages again, in their place in line
            cursor.restore(saved)
        return sum(published)

    def _result(
        self, reaped: int, dispatched: int = 0, waiting: int = 0, oldest: int | None = None
    ) -> TickResult:
        return TickResult(
            leader=True,
            dispatched=dispatched,
            live_tickets=len(self.memory.known),
            waiting=waiting,
            reaped=reaped,
            in_flight=self._in_flight_messages(),
            oldest_ready_ms=oldest,
        )

    def _parsed(self, ticket: Ticket) -> list[_Ref]:
        return [_Ref(r.key, self.keys.parse_msg(r.key)) for r in ticket.refs]

    def _live_refs(self) -> list[_Ref]:
        return [r for known in self.memory.known.values() for r in self._parsed(known.ticket)]

    def _in_flight_messages(self) -> int:
        return sum(r.count for r in self._live_refs())

    def _busy_groups(self) -> set[str]:
        return {r.parsed.group for r in self._live_refs() if r.parsed and r.parsed.group}

    def _publish(self, batch: list[scan.Candidate], now: int) -> int:
        """Create one ticket (If-None-Match) and start a worker on it; its message count."""
        memory = self.memory
        if not self.lease.ensure() or self.lease.epoch != memory.epoch:
            return 0
        seq = memory.next_seq
        memory.next_seq += 1
        key = self.keys.ticket(memory.epoch, seq)
        ticket = Ticket(
            self.keys.queue,
            memory.epoch,
            seq,
            [Ref(c.key, c.etag, c.size) for c in batch],
            created_ms=now,
        )
        token = new_token()
        try:
            etag = self.storage.put(key, ticket.encode(token), if_none_match=True, token=token)
        except Conflict:
            self.emit("lost_race", now, ticket=key, op="publish")
            return 0
        known = Known(ticket, etag, invoked_ms=now)
        memory.known[key] = known
        count = sum(c.count for c in batch)
        self.emit("dispatch", now, ticket=key, refs=[c.key for c in batch], messages=count)
        self.reconciler.invoke(key, known, now, reason="new")
        return count


def _dispatchable(
    found: Iterable[scan.Candidate], in_flight: set[str], busy: set[str], batch_size: int
) -> int:
    """About how many of `found` a plan could take: a free group gives one batch at most."""
    count, per_group = 0, Counter[str]()
    for candidate in found:
        if candidate.key in in_flight:
            continue
        if candidate.group is None:
            count += candidate.count
        elif candidate.group not in busy and per_group[candidate.group] < batch_size:
            per_group[candidate.group] += 1
            count += 1
    return count


def _oldest_ready(candidates: list[scan.Candidate], in_flight: set[str], now: int) -> int | None:
    """Visible time of the oldest ready message not in flight (late notices are not messages)."""
    ready = [
        c.ready_ms
        for c in candidates
        if c.key not in in_flight and c.ready_ms <= now and c.target is None
    ]
    return min(ready) if ready else None


@dataclass(frozen=True, slots=True)
class _Ref:
    key: str
    parsed: MsgKey | None

    @property
    def count(self) -> int:
        return self.parsed.count if self.parsed is not None else 1
