"""Starting a ticket: everything a worker does before it walks the messages, and the successor.

    ticket    the invocation's document, or a GET when it was too large to send
    reads     an invoked first delivery's first objects, read while it is fenced and claimed
    fence     GET lease: rejected below its epoch's seal, deferred while the seal is pending
    throttle  a rate-limited ticket's starts, taken before the claim (throttle.py)
    claim     PUT ticket If-Match (claim.py): the ticket is this worker's

A ticket published while every slot was taken (`Ticket.chain`) may have a successor parked
behind it (`Ticket.after`): its worker, once it has applied the ticket and before it deletes
it, waits about one of the leader's ticks for the successor's pointer, then starts the
successor the same way (`Start.successor`): no invoke, no Lambda start, no wait for the
leader to see the slot free. Claimed before the ticket is deleted, so a leader that sees the
ticket gone and its successor still pending knows nobody took it, and invokes a worker on it.

Apart from worker.py, which walks, commits and applies what this module claimed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, cast

from s3queue.common.concurrency import settled
from s3queue.errors import LeaseLost
from s3queue.protocol.lease import read_lease
from s3queue.protocol.tickets import Invocation, Outcome, OutcomeKind, Ticket
from s3queue.working.claim import Claim
from s3queue.working.load import Loaded
from s3queue.working.readahead import Reader, Stream, stalled_window
from s3queue.working.throttle import Throttle

if TYPE_CHECKING:
    from s3queue.common.clock import Clock
    from s3queue.common.concurrency import RunAll
    from s3queue.common.events import Emitter
    from s3queue.protocol.keys import QueueKeys
    from s3queue.storage.base import Storage
    from s3queue.working.worker import Worker

CHAIN_POLLS_MS = (0, 50, 50, 100, 100, 100)
"""How a worker waits for the pointer to its ticket's successor: a GET after each of these
pauses, about one of the leader's ticks in all (`Start.successor`)."""
Status = Literal["committed", "applied", "paused", "rejected", "deferred", "busy", "lost", "gone"]
"""``paused``: a committed ticket's apply ran out of time; the next invocation goes on."""


@dataclass(slots=True)
class WorkResult:
    """What became of one ticket in this worker."""

    ticket: str
    status: Status
    outcomes: list[Outcome] = field(default_factory=list)
    chained: list[WorkResult] = field(default_factory=list)
    """The successors this worker took after it, in order (`Worker.chain`)."""

    def count(self, kind: OutcomeKind) -> int:
        return sum(1 for o in self.outcomes if o.kind == kind)

    def each(self) -> list[WorkResult]:
        """This ticket's result, then each chained successor's."""
        return [self, *self.chained]


@dataclass(slots=True)
class Begun:
    """A claimed ticket, ready to walk."""

    claim: Claim
    throttle: Throttle | None
    stream: Stream | None


class Start:
    """How one worker starts its tickets (`begin`) and finds a ticket's successor."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    # The worker's own, read at each use: a caller may swap them (a wrapped storage).
    @property
    def storage(self) -> Storage:
        return self.worker.storage

    @property
    def keys(self) -> QueueKeys:
        return self.worker.keys

    @property
    def clock(self) -> Clock:
        return self.worker.clock

    @property
    def emit(self) -> Emitter:
        return self.worker.emit

    @property
    def read_ahead(self) -> RunAll:
        return self.worker.read_ahead

    def begin(
        self, invocation: Invocation, remaining_ms: Callable[[], int] | None
    ) -> Begun | WorkResult:
        """Everything up to the claim: the ticket, its first reads, the fencing check, the
        rate limits' starts, the claim. A `WorkResult` when it is not this worker's to run."""
        key = str(invocation["ticket"])
        found = self._ticket(invocation, key)
        if found is None:
            return WorkResult(key, "gone")
        ticket, etag = found
        preloaded: dict[str, Loaded | None] = {}
        stalls = invocation.get("stalls", 0)
        stalls = stalls if isinstance(stalls, int) else 0
        pulled = invocation.get("pulled")
        stream = None if pulled else self._early_stream(ticket, preloaded, stalls)
        try:
            refused = self._fenced(key, ticket, preloaded, stream)
            if refused is not None:
                return refused
            throttle = self._throttle(ticket)
            if throttle is not None:  # starts taken before the claim (throttle.py)
                stop = throttle.acquire(
                    ticket.permit_messages, partial(self._time_short, remaining_ms)
                )
                if stop is not None:
                    self.emit(
                        "reject", self.clock.now_ms(), ticket=key, status="deferred", why=stop
                    )
                    return WorkResult(key, "deferred")
            claim = self._claim(key, ticket, etag, remaining_ms, preloaded)
            if isinstance(claim, WorkResult):
                if throttle is not None:
                    throttle.give_back()
                return claim
            if stream is not None and claim.ticket.refs != stream.refs:
                stream.close()  # claimed as another generation: the walk reads its own refs
                stream = None
            begun, stream = Begun(claim, throttle, stream), None
            return begun
        finally:
            if stream is not None:
                stream.close()

    def _early_stream(
        self, ticket: Ticket, preloaded: dict[str, Loaded | None], stalls: int = 0
    ) -> Stream | None:
        """A first delivery's read-ahead, started before the fencing check and the claim: its
        first objects are read while the lease is read and the ticket claimed, not after (a
        read changes nothing; a fenced or lost ticket's reads not yet started are dropped).
        None for a redelivery (its walk skips what was recorded) or a ticket not pending; and
        `process` starts none for a pulled ticket, which other processes race to claim (a lost
        race would have read a window for nothing)."""
        if ticket.generation > 0 or not ticket.refs or ticket.state != "pending":
            return None
        window = stalled_window(ticket, stalls)
        return Stream.of(Reader(self.worker, preloaded), ticket.refs, window)

    def _throttle(self, ticket: Ticket) -> Throttle | None:
        """A pending rate-limited ticket's throttle (None: nothing limits its starts)."""
        permit = ticket.permit
        if permit is None or not permit.limited or ticket.state != "pending" or not ticket.refs:
            return None
        return Throttle.of(self.storage, self.keys, self.clock, permit, ticket.tenant(self.keys))

    def _time_short(self, remaining_ms: Callable[[], int] | None) -> str | None:
        if remaining_ms is not None and remaining_ms() < self.worker.time_margin_ms:
            return "time short"
        return None

    def _fenced(
        self,
        key: str,
        ticket: Ticket,
        preloaded: dict[str, Loaded | None],
        stream: Stream | None = None,
    ) -> WorkResult | None:
        """Refuse a ticket the lease does not accept: fenced, or not yet sealed (deferred).
        A first delivery's first object, which the claim reads next (`_first`), is read at
        the same time, and with `stream` the walk's first objects too: a read changes nothing,
        and a fenced ticket is rare."""
        lease_read = partial(read_lease, self.storage, self.keys.lease)
        first = ticket.refs[0] if ticket.refs else None
        if first is None or ticket.generation > 0 or ticket.state != "pending":
            lease = lease_read()
        elif stream is not None:  # the lease first in line, then the objects (a window)
            pending = stream.submit(lease_read)
            stream.read(0)
            lease = pending.result()
        else:
            jobs: list[Callable[[], Any]] = [
                lease_read,
                partial(Reader(self.worker, preloaded), first),
            ]
            lease = settled(self.read_ahead, jobs)[0]
        verdict = lease.accepts(ticket.epoch, ticket.seq) if lease else False
        if verdict:
            return None
        status: Status = "deferred" if verdict is None else "rejected"
        self.emit("reject", self.clock.now_ms(), ticket=key, status=status)
        return WorkResult(key, status)

    def successor(
        self, key: str, ticket: Ticket, remaining_ms: Callable[[], int] | None
    ) -> Begun | WorkResult | None:
        """The ticket the leader parked behind this applied one (`Ticket.after`), claimed
        before this one is deleted, so that the leader, once it sees this ticket gone, knows
        that a successor still pending was not taken (it invokes a worker on it then). The
        pointer is waited for about one of the leader's ticks (`CHAIN_POLLS_MS`): the ticket
        was published while every slot was taken, and the leader parks behind it at its next
        tick. None: no pointer by then, or no time left for a ticket."""
        pointer = self.keys.chain(key)
        for wait in CHAIN_POLLS_MS:
            if remaining_ms is not None and remaining_ms() < self.worker.chain_ms + wait:
                return None
            if wait:
                self.clock.sleep(wait / 1000)
            obj = self.storage.get(pointer)
            if obj is not None:
                break
        else:
            return None
        try:
            invocation = json.loads(obj.body)
            if not isinstance(invocation, dict) or not isinstance(invocation.get("ticket"), str):
                raise ValueError("no ticket")
        except ValueError as exc:  # the leader invokes the successor once this one is gone
            now = self.clock.now_ms()
            self.emit("corrupt_ticket", now, ticket=key, pointer=True, error=str(exc))
            return None
        self.emit("chain", self.clock.now_ms(), ticket=key, successor=invocation["ticket"])
        return self.begin(cast("Invocation", invocation), remaining_ms)

    def _ticket(self, invocation: Invocation, key: str) -> tuple[Ticket, str] | None:
        held, doc, etag = invocation.get("held"), invocation.get("doc"), invocation.get("etag")
        if held is not None and etag:  # the publisher's own copy: this claim's own copy of it
            return held.copy(), str(etag)
        if doc and etag:
            return Ticket.decode(doc), str(etag)
        obj = self.storage.get(key)
        return None if obj is None else (Ticket.decode(obj.body), obj.etag)

    def _claim(
        self,
        key: str,
        ticket: Ticket,
        etag: str,
        remaining_ms: Callable[[], int] | None,
        preloaded: dict[str, Loaded | None],
    ) -> Claim | WorkResult:
        for attempt in range(2):  # a second try when the ticket was reaped into a new generation
            if ticket.state == "committed" and attempt > 0:
                # Committed since our copy was pending: its committer applies it (behind its
                # thread, likely right now). Helping would read each of its objects again for
                # nothing; if the committer dies, the coordinator dispatches it again, committed.
                self.emit("lost_race", self.clock.now_ms(), ticket=key, op="claim")
                return WorkResult(key, "busy")
            if ticket.state == "committed":
                loader = Reader(self.worker, {})
                if not self.worker._apply(key, ticket, etag, loader, remaining_ms, helper=True):
                    return WorkResult(key, "paused", list(ticket.outcomes))
                return WorkResult(key, "applied", list(ticket.outcomes))
            if ticket.state == "claimed":
                return WorkResult(key, "busy")
            first = self._first(ticket, preloaded, remaining_ms)
            claim = Claim(self.worker, key, ticket, etag)
            claim.loaded = preloaded  # the early stream's cache: what it reads, the walk finds
            try:
                claim.take(self.worker.owner, first)
            except LeaseLost:
                obj = self.storage.get(key)
                if obj is None:
                    return WorkResult(key, "gone")
                ticket, etag = Ticket.decode(obj.body), obj.etag
                continue
            self.emit(
                "claim",
                self.clock.now_ms(),
                ticket=key,
                owner=self.worker.owner,
                generation=ticket.generation,
            )
            return claim
        self.emit("lost_race", self.clock.now_ms(), ticket=key, op="claim")
        return WorkResult(key, "busy")

    def _first(
        self,
        ticket: Ticket,
        preloaded: dict[str, Loaded | None],
        remaining_ms: Callable[[], int] | None,
    ) -> tuple[str, str] | None:
        """On a first delivery, read the first object before the claim, so that the claim can
        record its first message as running (it starts next, with no I/O between): a lease
        expiry then counts that delivery for it alone (Ticket.expire), at no extra request.
        That message's ref key and id; None when there is none to note."""
        if ticket.generation > 0 or not ticket.refs:
            return None
        if remaining_ms is not None and remaining_ms() < self.worker.time_margin_ms:
            return None  # it will be released, not started
        ref = ticket.refs[0]
        first = Reader(self.worker, preloaded)(ref)
        # An explicit id reads (and starts) its marker before it runs: not noted here, so that
        # a crash in that I/O counts no delivery for it (`Runner.settle`).
        if first is None or not first.records or first.error is not None:
            return None
        return None if first.records[0].dedup else (ref.key, first.records[0].id)
