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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import partial

from s3queue.common.clock import Clock, SystemClock, ms
from s3queue.common.concurrency import RunAll, Threads, attempted, settled
from s3queue.common.events import Emitter, Listener
from s3queue.contract.settings import CoordinatorSettings, QueueSettings
from s3queue.dispatching import scan, sizing
from s3queue.dispatching.cursor import Cursors
from s3queue.dispatching.gate import Gate
from s3queue.dispatching.holds import HoldReport
from s3queue.dispatching.limits import Budgets, Limits
from s3queue.dispatching.probe import probe
from s3queue.dispatching.publishing import Publisher
from s3queue.dispatching.reconcile import Invoker, Known, Reconciler
from s3queue.dispatching.shares import folder_shares
from s3queue.dispatching.view import (
    LiveRef,
    Memory,
    Part,
    busy_groups,
    by_priority,
    count_refs,
    dispatchable,
    interleaved,
    oldest_ready,
    queued,
)
from s3queue.protocol.keys import QueueKeys, check_queue_name, is_folder_name, split_lane
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
        self.pace = pace or sizing.Pace()
        """How fast tickets have been finishing: about the handler, so kept across epochs (and
        across runs, by the coordinator Lambda)."""
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
            self.emit("takeover", self.clock.now_ms(), epoch=self.lease.epoch, owner=self.owner)
        listed = self._list_tickets()
        reconciler = self.reconciler
        if reconciler.outranked(listed) or (
            self.lease.pending_seals() and not reconciler.seal(listed)
        ):
            self.memory = self._fresh()
            return TickResult(leader=False)
        known = self.memory.known
        before = dict(known)
        reaped = reconciler.reconcile(listed, known, self.memory.cursors)
        self.gate.observe(listed)
        now = self.clock.now_ms()
        for key in before.keys() - known.keys():
            refs = self.memory.parsed.get(key) or self._refs(before[key].ticket)
            self.pace.finished(count_refs(refs), now - before[key].ticket.created_ms)
        return self._dispatch(reaped, queued(listed, known, now))

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

    def _dispatch(self, reaped: int, queued: int) -> TickResult:
        """Read each partition's cursor, share the capacity fairly, plan, publish."""
        memory, now = self.memory, self.clock.now_ms()
        capacity = self.settings.max_in_flight_tickets - len(memory.known)
        if capacity <= 0:
            return self._result(reaped)
        if self.gate.paused:
            return replace(self._result(reaped), paused=True)
        live = [r for refs in self._ticket_refs().values() for r in refs]
        in_flight = {r.key for r in live}
        inbox = self._inbox_and_partitions(now)
        parts: list[Part] = []
        want = capacity * sizing.most(self.settings, self.pace, queued)
        try:
            # Every folder (partition, lane, shard) at once: each is its own cursor's LIST.
            reads: list[Callable[[], Part]] = [
                partial(self._read, folder, now, want, in_flight, live, inbox.get(folder, []))
                for folder in self._round(inbox)
            ]
            read, failed = attempted(self.run_all, reads)
            parts += read
            if failed is not None:
                raise failed
            budgets = self._budgets(now, live)
            self._plan(parts, now, capacity, in_flight, queued, budgets)
            dispatched = self._publish_parts(parts, now)
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

    def _budgets(self, now: int, live: list[LiveRef]) -> Budgets | None:
        """This tick's budgets under the queue's limits (None: it has none)."""
        limits = self.memory.limits
        if limits is None:
            return None
        in_flight: Counter[str | None] = Counter()
        for ref in live:
            in_flight[split_lane(ref.partition)[0]] += count_refs([ref])
        return limits.budgets(now, in_flight)

    def _inbox_and_partitions(self, now: int) -> dict[str | None, list[scan.Candidate]]:
        """The inbox, and the partition folders when due, listed at once (neither needs the
        other; both come after the LIST of tickets, as the module docstring requires)."""
        memory = self.memory
        every = round(self.config.discover_interval * 1000)
        if memory.discovered_ms is not None and now - memory.discovered_ms < every:
            return self._inbox()
        inbox, folders = settled(
            self.run_all, [self._inbox, partial(self.storage.list_folders, self.keys.parts)]
        )
        named = [folder[len(self.keys.parts) : -1] for folder in folders]
        memory.partitions = [None, *(p for p in named if is_folder_name(p))]
        memory.discovered_ms = now
        return inbox  # type: ignore[no-any-return]

    def _inbox(self) -> dict[str | None, list[scan.Candidate]]:
        """The inbox's first page (listed once a tick, from its start), by partition."""
        found: dict[str | None, list[scan.Candidate]] = {}
        for entry in self.storage.list(self.keys.inbox).entries:
            lane = self.keys.lane_of(entry.key)
            found.setdefault(lane, []).append(scan.inbox_candidate(entry))
        return found

    def _round(self, inbox: dict[str | None, list[scan.Candidate]]) -> list[str | None]:
        """The partitions this tick reads, starting at this tick's turn: every partition found
        in ``parts/`` (listed every `discover_interval`) or the inbox, and the default one;
        at most `partitions_per_tick` of them, the next ones first at the next tick. Priority
        lanes come first, the highest first (`by_priority`)."""
        memory = self.memory
        known = set(memory.partitions)
        everyone = memory.partitions + sorted(p for p in inbox if p not in known and p)
        start = everyone.index(memory.served) + 1 if memory.served in everyone else 0
        rotated = by_priority(everyone[start:] + everyone[:start])
        return rotated[: max(1, self.config.partitions_per_tick)]

    def _read(
        self,
        partition: str | None,
        now: int,
        want: int,
        in_flight: set[str],
        live: list[LiveRef],
        inbox: list[scan.Candidate],
    ) -> Part:
        """One partition's candidates, read until there are `want` messages to dispatch."""
        cursor = self.memory.cursors.of(partition)
        batch_size = self.settings.batch_size
        busy = busy_groups(live, partition)

        def enough(found: Iterable[scan.Candidate]) -> bool:
            return dispatchable(found, in_flight, busy, batch_size) >= want

        saved = cursor.snapshot()
        candidates, stopped = cursor.read(self.storage, now, enough, want=want, inbox=inbox)
        # A group whose waiting message this tick did not read is blocked: its later messages
        # may not overtake it (FIFO), wherever the cursor is.
        absent = cursor.absent_heads(candidates)
        return Part(partition, cursor, saved, candidates, stopped, busy | absent, absent)

    def _plan(
        self,
        parts: list[Part],
        now: int,
        capacity: int,
        in_flight: set[str],
        queued: int,
        budgets: Budgets | None,
    ) -> None:
        """Each partition's plan, within its fair share of `capacity`: every partition with
        ready work gets a ticket in turn before any gets a second (round-robin). Under a
        backlog the first tickets grow (sizing.py). A limited queue's partitions each plan
        within what their limits leave (limits.py), the highest priority first."""
        origins = {self.keys.ticket_origin(key) for key in self.memory.known}
        batch_size = self.settings.batch_size
        ready = sum(
            dispatchable(part.candidates, in_flight, part.blocked, batch_size) for part in parts
        )
        grown = sum(1 for refs in self._ticket_refs().values() if count_refs(refs) > batch_size)
        sizes = sizing.sizes(
            self.settings, self.pace, ready=ready, free=capacity, live_grown=grown, queued=queued
        )
        offset = 0

        def plan(part: Part, tickets: int) -> scan.Plan:
            tenant = split_lane(part.partition)[0]
            budget = None if budgets is None else budgets.left(tenant)[0]
            whole = budgets is not None and budgets.whole(tenant)
            return scan.Planner(
                now_ms=now,
                limit=lambda n: sizes.limit(offset + n),
                capacity=tickets,
                in_flight=in_flight,
                busy_groups=part.blocked,
                live_origins=origins,
                budget=budget,
                whole=whole,
            ).run(part.candidates)

        wanted = [plan(part, capacity) for part in parts]
        folders = [part.partition for part in parts]
        shares = folder_shares([len(w.batches) for w in wanted], folders, capacity)
        for part, want, share in zip(parts, wanted, shares, strict=True):
            if budgets is not None:  # what the limits leave, to each in turn (highest first)
                part.plan = plan(part, share)
                tenant = split_lane(part.partition)[0]
                budgets.spend(tenant, part.plan.spent, part.plan.limited)
            elif share == len(want.batches) and not offset:
                part.plan = want
            else:
                part.plan = plan(part, share)
            offset += len(part.plan.batches)
            part.cursor.settle_held(part.plan, part.absent, part.stopped)
            if share:
                self.memory.served = part.partition
        if len(parts) < len(self.memory.partitions) and not any(shares):
            self.memory.served = parts[-1].partition  # nothing to do here: read the next ones

    def _publish_parts(self, parts: list[Part], now: int) -> int:
        """Publish the batches (a partition at a time in turn); move each partition's cursor on
        if all its batches went out, else back to where it was before this tick."""
        order = interleaved([part.plan.batches for part in parts])
        batches = [batch for _, batch in order]
        limits, permits = self.memory.limits, None
        if limits is not None and limits.permit(0) is not None:
            permits = [limits.permit(sum(c.count for c in b)) for b in batches]
        published = self.publisher.publish_all(self.memory, batches, now, permits)
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
