"""The coordinator of one queue: lead, list, reap, plan and publish tickets, one tick at a time.

A tick costs a bounded number of requests whatever the backlog: one LIST of tickets, one of
the inbox, at most ``scan_pages`` of messages from the cursor, and one PUT per new ticket.

Race that fixes the order of the LISTs:

    worker     apply outcomes (delete msg) --- DELETE ticket
    leader                 LIST tickets ................. LIST msg/
Tickets are listed first. A ticket missing from that LIST was deleted before it, after its
outcomes were applied, so the later LIST of messages cannot show its finished messages as new.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from s3queue import scan
from s3queue.clock import Clock, SystemClock
from s3queue.config import CoordinatorSettings, QueueSettings
from s3queue.cursor import Cursor, msg_keys
from s3queue.errors import Conflict, MalformedMessage
from s3queue.events import Emitter, Listener
from s3queue.keys import MsgKey, QueueKeys, check_queue_name, parse_msg_name
from s3queue.lease import LeaderLease
from s3queue.model import Ref, Ticket
from s3queue.storage.base import Entry, Storage, new_token

PROBE_PAGES = 3
"""LIST pages an idle probe reads past tombstones and retries in backoff before it gives up."""

Invoker = Callable[[dict[str, Any]], None]
"""Starts a worker on a ticket payload (Lambda ``Event`` invoke, or a local pool)."""


@dataclass(slots=True)
class Known:
    """A live ticket as the leader last saw it."""

    ticket: Ticket
    etag: str
    invoked_ms: int


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
        self.invoker = invoker
        self.emit = Emitter(queue, listener)
        self.owner = owner or uuid.uuid4().hex[:12]
        self.lease = LeaderLease(
            storage,
            self.keys.lease,
            owner=self.owner,
            clock=self.clock,
            ttl_ms=_ms(self.config.lease_ttl),
            skew_ms=_ms(self.config.skew_tolerance),
            epochs=self._ticket_epochs,
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
        if self._outranked(listed) or (self.lease.pending_seals() and not self._seal(listed)):
            self.memory = self._fresh()
            return TickResult(leader=False)
        reaped = self._reconcile(listed)
        return self._dispatch(reaped)

    def probe(self) -> bool:
        """Is there anything to do (inbox, ready messages, live tickets)? One LIST, or two when
        a full page of delayed messages hides whether tickets follow.

        What an idle queue costs per scheduled run. Delayed messages alone are not work.
        """
        start = self.keys.live_start
        for _ in range(PROBE_PAGES):
            page = self.storage.list(self.keys.root, start_after=start)
            now = self.clock.now_ms()
            if any(self._is_work(entry, now) for entry in page.entries):
                return True
            if not page.truncated or not page.entries:
                return False
            last = self.keys.parse_msg(page.entries[-1].key)
            if last is not None and last.sort_ms > now:
                # Keys sort by sort time, so every msg/ key after this one is future too (a
                # retry in backoff may sort early, but never late): only tickets could be work.
                return bool(self.storage.list(self.keys.tickets, limit=1).entries)
            # A page of tombstones, or of retries in backoff sorted in the past: read on.
            start = page.entries[-1].key
        return True  # cannot tell within the budget: a tick will look

    def _is_work(self, entry: Entry, now: int) -> bool:
        name = entry.key[len(self.keys.root) :]
        if name.startswith(("inbox/", "tickets/")):
            return True
        if not name.startswith("msg/") or entry.size == 0:
            return False  # a tombstone (apply.py), or no live work
        parsed = parse_msg_name(name[4:])
        return parsed is None or parsed.ready_ms <= now

    def release(self) -> None:
        """Give up the lease now (end of a Lambda invocation) so the next run takes over at once."""
        if self.lease.leading:
            self.lease.release(self.memory.next_seq - 1)
            self.emit("release", self.clock.now_ms(), epoch=self.memory.epoch)
        self.memory = self._fresh()

    def _ticket_epochs(self) -> set[int]:
        return {p[0] for e in self._list_tickets() if (p := self.keys.parse_ticket(e.key))}

    def _list_tickets(self) -> list[Entry]:
        entries: list[Entry] = []
        start: str | None = None
        while True:
            page = self.storage.list(self.keys.tickets, start_after=start)
            entries.extend(page.entries)
            if not page.truncated or not page.entries:
                return entries
            start = page.entries[-1].key

    def _outranked(self, listed: list[Entry]) -> bool:
        """A ticket of a later epoch: another leader took over while we were paused (our lease
        renewal was not due yet, so we had not noticed). Stand down without touching anything:
        our lease document is stale, and judging its tickets by it would be wrong."""
        epoch = self.lease.epoch
        newer = [p for e in listed if (p := self.keys.parse_ticket(e.key)) and p[0] > epoch]
        if newer:
            self.lease.abdicate()
            self.emit("deposed", self.clock.now_ms(), epoch=epoch, newer=newer[0][0])
        return bool(newer)

    def _seal(self, listed: list[Entry]) -> bool:
        """Fix the highest valid seq of every taken-over epoch, and forget empty epochs."""
        doc = self.lease.doc
        assert doc is not None
        highest: dict[int, int] = {}
        for entry in listed:
            parsed = self.keys.parse_ticket(entry.key)
            if parsed is not None:
                highest[parsed[0]] = max(highest.get(parsed[0], -1), parsed[1])
        seals = {
            epoch: highest[epoch] if seal < 0 else seal
            for epoch, seal in doc.seals.items()
            if epoch in highest
        }
        sealed = self.lease.update_seals(seals)
        self.emit("seal", self.clock.now_ms(), epoch=doc.epoch, seals=seals, ok=sealed)
        return sealed

    def _reconcile(self, listed: list[Entry]) -> int:
        """Learn unknown tickets, drop fenced ones, forget finished ones, reap expired ones."""
        doc = self.lease.doc
        assert doc is not None
        memory, now, reaped = self.memory, self.clock.now_ms(), 0
        seen: set[str] = set()
        for entry in listed:
            parsed = self.keys.parse_ticket(entry.key)
            if parsed is None:
                continue
            if doc.accepts(*parsed) is False:  # below its epoch's seal: no worker ever runs it
                self._drop_fenced(entry)
                continue
            seen.add(entry.key)
            known = memory.known.get(entry.key) or self._learn(entry, now)
            if known is not None:
                reaped += self._check(entry, known, now)
        for key in [k for k in memory.known if k not in seen]:
            self._forget(key)
        return reaped

    def _drop_fenced(self, entry: Entry) -> None:
        # No worker ever accepts it (LeaseDoc.accepts is stable while the ticket exists).
        try:
            self.storage.delete(entry.key, if_match=entry.etag)
        except Conflict:
            return
        self.emit("fenced", self.clock.now_ms(), ticket=entry.key)

    def _learn(self, entry: Entry, now: int, *, invoked_ms: int | None = None) -> Known | None:
        obj = self.storage.get(entry.key)
        if obj is None:
            return None
        try:
            ticket = Ticket.decode(obj.body)
        except MalformedMessage:
            self.emit("corrupt_ticket", now, ticket=entry.key)
            return None
        known = Known(ticket, obj.etag, invoked_ms=now if invoked_ms is None else invoked_ms)
        self.memory.known[entry.key] = known
        return known

    def _forget(self, key: str) -> None:
        known = self.memory.known.pop(key)
        self.memory.cursor.finished(msg_keys(self.keys, (r.key for r in known.ticket.refs)))

    def _check(self, entry: Entry, known: Known, now: int) -> int:
        """Re-invoke a ticket nobody works on; reap one whose claim expired. 1 if reaped."""
        timeout = _ms(self.config.dispatch_timeout)
        if entry.etag != known.etag:
            # Changed since we read it (claim, heartbeat, commit): read it again only once it
            # has been quiet for a while, so a healthy ticket costs no GET at all.
            quiet = now - entry.last_modified_ms
            expiry = _ms(self.settings.visibility_timeout + self.config.skew_tolerance)
            if quiet < min(expiry, timeout):
                return 0
            fresh = self._learn(entry, now, invoked_ms=known.invoked_ms)
            if fresh is None:
                return 0
            known = fresh
        ticket = known.ticket
        if ticket.state == "claimed":
            if ticket.lease_until_ms + _ms(self.config.skew_tolerance) < now:
                return self._reap(entry.key, known, now)
            return 0
        if now - known.invoked_ms >= timeout:
            self._invoke(entry.key, known, now, reason=f"{ticket.state} for {timeout} ms")
        return 0

    def _reap(self, key: str, known: Known, now: int) -> int:
        """Expired claim: CAS the ticket to a new generation, then invoke a worker again."""
        # Work on a copy: if the PUT fails, memory must still hold the ticket as it is in S3.
        ticket, owner = Ticket.decode(known.ticket.encode("")), known.ticket.owner
        ticket.expire(now)
        token = new_token()
        try:
            etag = self.storage.put(key, ticket.encode(token), if_match=known.etag, token=token)
        except Conflict:
            # The holder heartbeat or committed first: its lease is valid again. The ticket
            # stays known (its messages in flight); the next quiet spell reads it afresh.
            self.emit("lost_race", now, ticket=key, op="reap")
            known.etag = ""
            return 0
        known.ticket, known.etag = ticket, etag
        self.emit("expire", now, ticket=key, generation=ticket.generation, owner=owner)
        self._invoke(key, known, now, reason="redeliver")
        return 1

    def _dispatch(self, reaped: int) -> TickResult:
        memory, now = self.memory, self.clock.now_ms()
        live = len(memory.known)
        capacity = self.settings.max_in_flight_tickets - live
        if capacity <= 0:
            return TickResult(
                leader=True, live_tickets=live, reaped=reaped, in_flight=self._in_flight_messages()
            )
        in_flight = {r.key for k in memory.known.values() for r in k.ticket.refs}
        busy = self._busy_groups()
        want = capacity * self.settings.batch_size
        memory.cursor.first_page = min(1000, 2 * want + 100)

        def enough(found: Iterable[scan.Candidate]) -> bool:
            return _dispatchable(found, in_flight, busy, self.settings.batch_size) >= want

        saved = memory.cursor.snapshot()
        candidates, stopped = memory.cursor.read(self.storage, now, enough)
        # A group whose waiting message this tick did not read is blocked: its later messages
        # may not overtake it (FIFO), wherever the cursor is.
        absent = memory.cursor.absent_heads(candidates)
        planner = scan.Planner(
            now_ms=now,
            batch_size=self.settings.batch_size,
            capacity=capacity,
            in_flight=in_flight,
            busy_groups=busy | absent,
            live_origins={key.rsplit("/", 1)[1] for key in memory.known},
        )
        plan = planner.run(candidates)
        memory.cursor.settle_held(plan, absent, stopped)
        try:
            published = [self._publish(batch, now) for batch in plan.batches]
        except BaseException:
            memory.cursor.restore(saved)
            raise
        if all(published):
            memory.cursor.advance(plan, stopped, now)
        else:  # a batch did not go out: read its messages again, in their place in line
            memory.cursor.restore(saved)
        dispatched = sum(published)
        done = memory.cursor.expired + memory.cursor.notices
        if done:
            self.storage.delete_many(done)
            memory.cursor.expired, memory.cursor.notices = [], []
        ready = [
            c.ready_ms
            for c in candidates
            if c.key not in in_flight and c.ready_ms <= now and c.target is None
        ]
        return TickResult(
            leader=True,
            dispatched=dispatched,
            live_tickets=len(memory.known),
            waiting=plan.waiting,
            reaped=reaped,
            in_flight=self._in_flight_messages(),
            oldest_ready_ms=min(ready) if ready else None,
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
        self._invoke(key, known, now, reason="new")
        return count

    def _invoke(self, key: str, known: Known, now: int, *, reason: str) -> None:
        known.invoked_ms = now
        try:
            self.invoker(known.ticket.to_payload(key, known.etag))
        except Exception as exc:  # noqa: BLE001 - a lost invoke is retried after dispatch_timeout
            self.emit("invoke_failed", now, ticket=key, error=repr(exc))
            return
        if reason != "new":
            self.emit("reinvoke", now, ticket=key, reason=reason)


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


@dataclass(frozen=True, slots=True)
class _Ref:
    key: str
    parsed: MsgKey | None

    @property
    def count(self) -> int:
        return self.parsed.count if self.parsed is not None else 1


def _ms(seconds: float) -> int:
    return round(seconds * 1000)
