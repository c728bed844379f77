"""The coordinator of one queue: lead, list, reconcile, plan and publish, one tick at a time.

A tick costs a bounded number of requests whatever the backlog: one LIST of tickets, one of
the inbox, at most ``scan_pages`` of messages from the cursor, and one PUT per new ticket.

Race that fixes the order of the LISTs:

    worker     apply outcomes (delete msg) --- DELETE ticket
    leader                 LIST tickets ................. LIST msg/
Tickets are listed first. A ticket missing from that LIST was deleted before it, after its
outcomes were applied, so the later LIST of messages cannot show its finished messages as new.
A steady leader sends both LISTs at once and judges its read by the tickets it knew before
either went out (`Sight`): a ticket is live, then gone, never live again, so the previous
tick's LIST plays the first LIST's part; a listed ticket it did not know sends it back to the
order above (docs/protocol.md, "Both LISTs at once").
Reading the folders is folders.py's; planning, planning.py's; publishing (and parking a
ticket behind a live one when every slot is taken), publishing.py's; what the LIST of tickets
says, reconcile.py's; whether there is work at all, probe.py's. This module keeps the tick's
order, the lease, and the way out: each folder's cursor moved on or back.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from functools import partial

from s3queue.common.clock import Clock, SystemClock, ms
from s3queue.common.concurrency import Raised, RunAll, Threads, beside
from s3queue.common.events import Emitter, Listener
from s3queue.contract.settings import CoordinatorSettings, QueueSettings
from s3queue.dispatching import sizing
from s3queue.dispatching.cursor import Cursors
from s3queue.dispatching.folders import (
    adopt_frontiers,
    discover_beside,
    frontiers,
    inbox_and_partitions,
    read_tick,
    undo,
)
from s3queue.dispatching.gate import Gate
from s3queue.dispatching.holds import HoldReport
from s3queue.dispatching.limits import Limits
from s3queue.dispatching.planning import budgets_of, plan_round
from s3queue.dispatching.probe import probe
from s3queue.dispatching.publishing import Publisher, block_size
from s3queue.dispatching.reconcile import Invoker, Known, Reconciled, Reconciler, Send
from s3queue.dispatching.view import (
    Memory,
    Part,
    Sight,
    TickResult,
    count_refs,
    live_refs,
    oldest_ready,
    parking_spots,
    queued,
    running,
    ticket_refs,
)
from s3queue.protocol.keys import QueueKeys, check_queue_name
from s3queue.protocol.lease import LeaderLease
from s3queue.storage.base import Entry, Storage, iter_keys

__all__ = ["Coordinator", "Invoker", "Known", "RunAll", "TickResult"]


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
            first_block=block_size(self.config),
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
        """How the tick's LISTs and a block of publications run (threads by default)."""
        return self.publisher.run_all

    @run_all.setter
    def run_all(self, run_all: RunAll) -> None:
        self.publisher.run_all = run_all

    def _fresh(self, epoch: int = 0) -> Memory:
        doc, cursors = self.lease.doc, Cursors(self.keys, self.config)
        reserved = doc.blocks.get(epoch, (0, 0))[1] if doc and epoch else 0  # by the takeover
        return Memory(cursors, epoch=epoch, limits=Limits.of(self.settings), reserved=reserved)

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
        overlap, self.memory.overlap = self.memory.overlap and self._may_overlap(), False
        result = self._overlapped() if overlap else self._in_turn()  # overlap: if it ends well
        # and busy (a quiet queue's read beside the LIST takes the CPU of the invokes just sent)
        full = result.live_tickets >= self.settings.max_in_flight_tickets
        busy = full or result.dispatched >= self.settings.batch_size or result.waiting > 0
        self.memory.overlap = result.leader and busy
        return result

    def _may_overlap(self) -> bool:
        """May this tick read beside its LIST of tickets? If a slot is free (else the read is
        likely wasted), the pace known (it sizes the read), no seal pending, no FIFO group live
        (its next message goes out in the tick that sees its ticket gone)."""
        if running(self.memory.known) >= self.settings.max_in_flight_tickets:
            return False
        if self.pace.ms_per_message is None or self.lease.pending_seals():
            return False
        refs = live_refs(self.memory, self.keys).values()
        return not any(r.parsed is not None and r.parsed.group for rs in refs for r in rs)

    def _in_turn(self) -> TickResult:
        """The LIST of tickets, then the reads: a first tick, after a failed or quiet one."""
        memory, started = self.memory, self.clock.now_ms()
        beside_ = (self.storage, self.keys, memory, self.run_all, self.reconciler.send, started)
        listed = discover_beside(self._list_tickets, *beside_)  # the discovery, on a first tick
        if self._deposed(listed):
            return TickResult(leader=False)
        reconciled, queued_ = self._reconcile(listed)
        self._rewind(reconciled)
        return self._dispatch(reconciled.reaped, queued_)

    def _overlapped(self) -> TickResult:
        """The LIST of tickets and the reads at once, the reads judged by the tickets known
        before both (`Sight`); used only if every ticket listed was known before, else read
        again after the LIST. Finished tickets' rewinds wait for the reads to settle."""
        now = self.clock.now_ms()
        sight = Sight.of(live_refs(self.memory, self.keys), self.keys)
        # As many as every slot could take: which tickets finished, the LIST will tell.
        want = self.settings.max_in_flight_tickets * sizing.most(self.settings, self.pace)
        read = partial(self._read, sight, now, want)
        listed, parts = beside(self.run_all, self._list_tickets, read)
        if isinstance(parts, Raised):
            raise parts.error  # a failed read undid its parts (_read)
        if isinstance(listed, Raised):
            undo(parts)
            raise listed.error
        if self._deposed(listed):
            undo(parts)
            return TickResult(leader=False)
        try:
            reconciled, queued_ = self._reconcile(listed)
        except BaseException:
            undo(parts)
            raise
        if reconciled.unknown:
            undo(parts)
            self._rewind(reconciled)
            return self._dispatch(reconciled.reaped, queued_)
        try:
            return self._dispatch(reconciled.reaped, queued_, (sight, parts, now))
        finally:
            self._rewind(reconciled)

    def _deposed(self, listed: list[Entry]) -> bool:
        """A later epoch's ticket, or a seal that failed: stand down (reconcile.py)."""
        judge = self.reconciler
        if judge.outranked(listed) or (self.lease.pending_seals() and not judge.seal(listed)):
            self.memory = self._fresh()
            return True
        return False

    def _reconcile(self, listed: list[Entry]) -> tuple[Reconciled, int]:
        """Judge the listed tickets (reconcile.py), the controls and the pace; and how many
        live tickets wait for a worker (`queued`)."""
        known = self.memory.known
        reconciled = self.reconciler.reconcile(listed, known, self.run_all)
        self.gate.observe(listed)
        now = self.clock.now_ms()
        for key, gone in reconciled.finished.items():
            refs = self.memory.parsed.get(key) or ticket_refs(gone.ticket, self.keys)
            self.pace.finished(count_refs(refs), now - gone.started_ms)
        return reconciled, queued(listed, known, now)

    def _rewind(self, reconciled: Reconciled) -> None:
        """The finished tickets' groups' next messages: read from there (`Cursors.finished`)."""
        for gone in reconciled.finished.values():
            self.memory.cursors.finished(r.key for r in gone.ticket.refs)

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

    def _dispatch(
        self, reaped: int, queued: int, read: tuple[Sight, list[Part], int] | None = None
    ) -> TickResult:
        """Read each partition's cursor (folders.py; `read`: done beside the LIST of tickets),
        share the capacity fairly and plan (planning.py), publish: into free slots, or parked
        behind live tickets when every slot is taken and this leader parks (`chain`)."""
        memory = self.memory
        capacity = self.settings.max_in_flight_tickets - running(memory.known)
        spots = parking_spots(memory.known) if self.chain and capacity <= 0 else []
        capacity = max(capacity, 0) or len(spots)
        if capacity <= 0 or self.gate.paused:
            undo(read[1] if read is not None else [])
            return replace(self._result(reaped), paused=capacity > 0)
        if read is None:
            now, sight = self.clock.now_ms(), Sight.of(live_refs(self.memory, self.keys), self.keys)
            want = capacity * sizing.most(self.settings, self.pace, queued)
            parts = self._read(sight, now, want)
        else:
            sight, parts, now = read
        try:
            budgets = budgets_of(memory, now, sight.live)
            plan_round(
                memory,
                self.settings,
                self.pace,
                parts,
                live_tickets=[] if spots else live_refs(self.memory, self.keys).values(),
                now=now,
                capacity=capacity,
                in_flight=sight.in_flight,
                origins=sight.origins,
                queued=queued,
                budgets=budgets,
            )
            slots = self.settings.max_in_flight_tickets
            dispatched = self.publisher.publish_parts(
                memory, parts, now, spots, chain=self.chain, slots=slots
            )
        except BaseException:
            undo(parts)
            raise
        for part in parts:
            part.cursor.delete_done(self.storage)
        candidates = [c for part in parts for c in part.candidates]
        result = self._result(
            reaped,
            dispatched,
            sum(part.plan.waiting for part in parts),
            oldest_ready(candidates, sight.in_flight, now),
        )
        if budgets is None:
            return result
        self.holds.update(budgets.held, now)
        return replace(result, held=budgets.held)

    def _read(self, sight: Sight, now: int, want: int) -> list[Part]:
        every, send = round(self.config.discover_interval * 1000), self.reconciler.send
        inbox = inbox_and_partitions(
            self.storage, self.keys, self.memory, self.run_all, now, every, send
        )
        per_tick, batch_size = self.config.partitions_per_tick, self.settings.batch_size
        reading = (self.storage, self.memory, self.run_all, inbox, per_tick, batch_size)
        return read_tick(*reading, sight=sight, now=now, want=want)

    def _result(
        self, reaped: int, dispatched: int = 0, waiting: int = 0, oldest: int | None = None
    ) -> TickResult:
        return TickResult(
            leader=True,
            dispatched=dispatched,
            live_tickets=len(self.memory.known),
            waiting=waiting,
            reaped=reaped,
            in_flight=sum(count_refs(refs) for refs in live_refs(self.memory, self.keys).values()),
            oldest_ready_ms=oldest,
        )
