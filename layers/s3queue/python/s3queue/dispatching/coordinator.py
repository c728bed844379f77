"""The coordinator of one queue: lead, list, reconcile, plan and publish, one tick at a time.

A tick costs a bounded number of requests whatever the backlog: one LIST of tickets, one of
the inbox, at most ``scan_pages`` of messages from the cursor, and one PUT per new ticket.

Race that fixes the order of the LISTs:

    worker     apply outcomes (delete msg) --- DELETE ticket
    leader                 LIST tickets ................. LIST msg/
Tickets are listed first. A ticket missing from that LIST was deleted before it, after its
outcomes were applied, so the later LIST of messages cannot show its finished messages as new.
Reading the folders is folders.py's; planning, planning.py's; publishing (and parking a
ticket behind a live one when every slot is taken), publishing.py's; what the LIST of tickets
says, reconcile.py's; whether there is work at all, probe.py's. This module keeps the tick's
order, the lease, and the way out: each folder's cursor moved on or back.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace

from s3queue.common.clock import Clock, SystemClock, ms
from s3queue.common.concurrency import RunAll, Threads
from s3queue.common.events import Emitter, Listener
from s3queue.contract.settings import CoordinatorSettings, QueueSettings
from s3queue.dispatching import sizing
from s3queue.dispatching.cursor import Cursors
from s3queue.dispatching.folders import (
    adopt_frontiers,
    discover_beside,
    frontiers,
    inbox_and_partitions,
    read_round,
)
from s3queue.dispatching.gate import Gate
from s3queue.dispatching.holds import HoldReport
from s3queue.dispatching.limits import Limits
from s3queue.dispatching.planning import budgets_of, plan_round
from s3queue.dispatching.probe import probe
from s3queue.dispatching.publishing import Publisher
from s3queue.dispatching.reconcile import Invoker, Known, Reconciler, Send
from s3queue.dispatching.view import (
    LiveRef,
    Memory,
    Part,
    count_refs,
    interleaved,
    oldest_ready,
    parking_spots,
    queued,
    running,
)
from s3queue.protocol.keys import QueueKeys, check_queue_name
from s3queue.protocol.lease import LeaderLease
from s3queue.protocol.tickets import Ticket
from s3queue.storage.base import Entry, Storage, iter_keys

__all__ = ["Coordinator", "Invoker", "Known", "RunAll", "TickResult"]


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
    paused: bool = False
    """The queue is paused (gate.py): this tick dispatched nothing new and scanned nothing."""
    held: dict[str, int] = field(default_factory=dict)
    """Ready messages held back this tick, by the limit that held them (limits.py)."""

    @property
    def idle(self) -> bool:
        return self.leader and not (self.dispatched or self.live_tickets or self.waiting)


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
        run_all: RunAll | None = None,
        pace: sizing.Pace | None = None,
        in_process: bool = False,
        send: Send | None = None,
        chain: bool = False,
    ) -> None:
        self.storage = storage
        self.chain = chain
        """Park tickets behind live ones once every slot is taken, for their workers to take
        next (`Ticket.after`, the worker's `chain`): the coordinator Lambda's way."""
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
            pace=self._pace_state,
            frontiers=lambda: frontiers(self.memory),
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
            in_process=in_process,
            send=send,
        )
        self.pace = pace or sizing.Pace()
        """How fast tickets have been finishing: about the handler, so kept across epochs (and
        across runs, by the coordinator Lambda; and from leader to leader in the lease, for a
        run in another container: `LeaseDoc.pace`)."""
        self.publisher = Publisher(
            storage,
            self.keys,
            self.config,
            self.lease,
            self.reconciler,
            run_all or Threads(self.config.publish_concurrency, "s3queue-publish"),
            self.emit,
        )
        self.gate = Gate(storage, self.keys, self.settings)
        self.holds = HoldReport(storage, self.keys.holds)
        """Flow control: whether this tick may dispatch (gate.py)."""
        self.memory = self._fresh()

    @property
    def run_all(self) -> RunAll:
        """How the tick's LISTs and a block of publications run: threads (at most
        `publish_concurrency`) by default; tests set one that runs them one by one, in a chosen
        order (concurrency.py)."""
        return self.publisher.run_all

    @run_all.setter
    def run_all(self, run_all: RunAll) -> None:
        self.publisher.run_all = run_all

    def _fresh(self, epoch: int = 0) -> Memory:
        limits = Limits.of(self.settings)
        return Memory(Cursors(self.keys, self.config), epoch=epoch, limits=limits)

    def tick(self) -> TickResult:
        """Lead if possible, then reconcile tickets and dispatch what is ready."""
        if not self.lease.ensure():
            self.memory = self._fresh()
            self.emit("not_leader", self.clock.now_ms(), owner=self.owner)
            return TickResult(leader=False)
        if self.lease.epoch != self.memory.epoch:
            self.memory = self._fresh(self.lease.epoch)
            self.pace.adopt(self.lease.inherited)
            adopt_frontiers(self.memory, self.lease.inherited_frontiers, self.clock.now_ms())
            self.emit("takeover", self.clock.now_ms(), epoch=self.lease.epoch, owner=self.owner)
        reconciler, memory, started = self.reconciler, self.memory, self.clock.now_ms()
        beside = (self.storage, self.keys, memory, self.run_all, reconciler.send, started)
        listed = discover_beside(self._list_tickets, *beside)  # the discovery, on a first tick
        if reconciler.outranked(listed) or (
            self.lease.pending_seals() and not reconciler.seal(listed)
        ):
            self.memory = self._fresh()
            return TickResult(leader=False)
        known = self.memory.known
        reconciled = reconciler.reconcile(listed, known, self.memory.cursors, self.run_all)
        self.gate.observe(listed)
        now = self.clock.now_ms()
        for key, gone in reconciled.finished.items():
            refs = self.memory.parsed.get(key) or self._refs(gone.ticket)
            self.pace.finished(count_refs(refs), now - gone.started_ms)
        return self._dispatch(reconciled.reaped, queued(listed, known, now))

    def probe(self) -> bool:
        """Is there anything to do? About one LIST, no lease (probe.py)."""
        return probe(self.storage, self.keys, self.clock)

    def release(self) -> None:
        """Give up the lease now (end of a Lambda invocation) so the next run takes over at once."""
        if self.lease.leading:
            self.lease.release(self.memory.next_seq - 1)
            self.emit("release", self.clock.now_ms(), epoch=self.memory.epoch)
        self.memory = self._fresh()

    def _pace_state(self) -> tuple[float, ...]:
        return self.pace.state()

    def _ticket_epochs(self) -> set[int]:
        return {p[0] for e in self._list_tickets() if (p := self.keys.parse_ticket(e.key))}

    def _list_tickets(self) -> list[Entry]:
        return list(iter_keys(self.storage, self.keys.tickets))

    def _dispatch(self, reaped: int, queued: int) -> TickResult:
        """Read each partition's cursor (folders.py), share the capacity fairly and plan
        (planning.py), publish: into free slots, or parked behind live tickets when every
        slot is taken and this leader parks (`chain`)."""
        memory, now = self.memory, self.clock.now_ms()
        capacity = self.settings.max_in_flight_tickets - running(memory.known)
        spots = parking_spots(memory.known) if self.chain and capacity <= 0 else []
        capacity = max(capacity, 0) or len(spots)
        if capacity <= 0:
            return self._result(reaped)
        if self.gate.paused:
            return replace(self._result(reaped), paused=True)
        tickets = self._ticket_refs()
        live = [r for refs in tickets.values() for r in refs]
        in_flight = {r.key for r in live}
        every = round(self.config.discover_interval * 1000)
        inbox = inbox_and_partitions(
            self.storage, self.keys, memory, self.run_all, now, every, self.reconciler.send
        )
        parts: list[Part] = []
        want = capacity * sizing.most(self.settings, self.pace, queued)
        try:
            # Every folder (partition, lane, shard) at once: each is its own cursor's LIST.
            read, failed = read_round(
                self.storage,
                memory,
                self.run_all,
                inbox,
                per_tick=self.config.partitions_per_tick,
                now=now,
                want=want,
                batch_size=self.settings.batch_size,
                in_flight=in_flight,
                live=live,
            )
            parts += read
            if failed is not None:
                raise failed
            budgets = budgets_of(memory, now, live)
            plan_round(
                memory,
                self.keys,
                self.settings,
                self.pace,
                parts,
                live_tickets=[] if spots else tickets.values(),
                now=now,
                capacity=capacity,
                in_flight=in_flight,
                queued=queued,
                budgets=budgets,
            )
            dispatched = self._publish_parts(parts, now, spots)
        except BaseException:
            # A partition read before the failure used up its rewind and wake-ups: the next
            # tick must read its messages again, in their place in line (Cursor.restore).
            for part in parts:
                part.cursor.restore(part.saved)
            raise
        for part in parts:
            part.cursor.delete_done(self.storage)
        candidates = [c for part in parts for c in part.candidates]
        result = self._result(
            reaped,
            dispatched,
            sum(part.plan.waiting for part in parts),
            oldest_ready(candidates, in_flight, now),
        )
        if budgets is None:
            return result
        self.holds.update(budgets.held, now)
        return replace(result, held=budgets.held)

    def _publish_parts(self, parts: list[Part], now: int, spots: list[str]) -> int:
        """Publish the batches (a partition at a time in turn), each parked behind one of
        `spots` if any (every slot is taken); move each partition's cursor on if all its
        batches went out, else back to where it was before this tick."""
        order = interleaved([part.plan.batches for part in parts])
        batches = [batch for _, batch in order]
        limits, permits = self.memory.limits, None
        if limits is not None and limits.permit(0) is not None:
            permits = [limits.permit(sum(c.count for c in b)) for b in batches]
        afters: list[str | None] = [*spots[: len(batches)]] if spots else [None] * len(batches)
        # Tickets that take every slot left: a parking leader marks them for a successor.
        full = running(self.memory.known) + len(batches) >= self.settings.max_in_flight_tickets
        chain = self.chain and full
        published = self.publisher.publish_all(self.memory, batches, now, permits, afters, chain)
        done: dict[int, list[int]] = {i: [] for i in range(len(parts))}
        for (i, _), count in zip(order, published, strict=True):
            done[i].append(count)
        for i, part in enumerate(parts):
            if all(done[i]):
                part.cursor.advance(part.plan, part.stopped, now)
            else:  # a batch did not go out: read its messages again, in their place in line
                part.cursor.restore(part.saved)
        return sum(sum(published) for published in done.values())

    def _result(
        self, reaped: int, dispatched: int = 0, waiting: int = 0, oldest: int | None = None
    ) -> TickResult:
        return TickResult(
            leader=True,
            dispatched=dispatched,
            live_tickets=len(self.memory.known),
            waiting=waiting,
            reaped=reaped,
            in_flight=sum(count_refs(refs) for refs in self._ticket_refs().values()),
            oldest_ready_ms=oldest,
        )

    def _ticket_refs(self) -> dict[str, list[LiveRef]]:
        """Each live ticket's refs, parsed: each ticket once, not at every tick."""
        memory = self.memory
        parsed = memory.parsed
        for key in parsed.keys() - memory.known.keys():
            del parsed[key]
        for key, known in memory.known.items():
            if key not in parsed:
                parsed[key] = self._refs(known.ticket)
        return parsed

    def _refs(self, ticket: Ticket) -> list[LiveRef]:
        return [
            LiveRef(r.key, keys.partition, keys.parse_msg(r.key))
            for r in ticket.refs
            for keys in (self.keys.owning(r.key),)
        ]
