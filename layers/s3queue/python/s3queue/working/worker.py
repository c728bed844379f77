"""The worker: claim a ticket, run the handler on each message, heartbeat, commit, apply.

    claim     GET lease (fencing check), PUT ticket If-Match   -> state claimed, lease_until
              (an invoked ticket's first objects' GETs already going: `_early_stream`)
    run       GET each message object; handler per message; heartbeats record finished outcomes
    commit    PUT ticket If-Match with every outcome            -> the commit point
    apply     copies, deletes, DELETE ticket (apply.py): inline, or behind the thread while
              it takes its next ticket (behind.py)

Every write to the ticket is a CAS on the ETag of the previous one, so once the coordinator
reaps an expired claim (a new generation), the old holder's next heartbeat or commit fails
with `LeaseLost` and nothing it did after the last successful heartbeat counts.

This module is the ticket flow: the fencing check, the claim, the commit and the apply. The
walk over the ticket's messages (which may start, which are released) is walk.py's; reading
its objects ahead of the handler, readahead.py's; the claimed ticket's writes and heartbeat,
claim.py's; running one message and judging its outcome, handle.py's.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from s3queue.common.clock import Clock, SystemClock
from s3queue.common.concurrency import RunAll, Threads, settled
from s3queue.common.events import Emitter, Listener
from s3queue.contract.settings import CoordinatorSettings, QueueSettings
from s3queue.errors import LeaseLost
from s3queue.protocol.keys import QueueKeys, check_queue_name
from s3queue.protocol.lease import read_lease
from s3queue.protocol.tickets import Invocation, Outcome, OutcomeKind, Ref, Ticket
from s3queue.storage.base import Storage
from s3queue.working.apply import apply_ticket
from s3queue.working.behind import Behind
from s3queue.working.claim import Beating, Claim
from s3queue.working.guard import Guard
from s3queue.working.handle import Handler, Runner
from s3queue.working.load import Loaded
from s3queue.working.readahead import READ_AHEAD, Reader, Stream
from s3queue.working.throttle import Throttle
from s3queue.working.typed import bind
from s3queue.working.walk import Walk

__all__ = ["Handler", "Status", "WorkResult", "Worker"]

APPLY_RESERVE_MS = 1000
"""An apply records its progress and stops when less than this is left of the invocation."""

Status = Literal["committed", "applied", "paused", "rejected", "deferred", "busy", "lost", "gone"]
"""``paused``: a committed ticket's apply ran out of time; the next invocation goes on."""


@dataclass(slots=True)
class WorkResult:
    """What became of one ticket in this worker."""

    ticket: str
    status: Status
    outcomes: list[Outcome] = field(default_factory=list)

    def count(self, kind: OutcomeKind) -> int:
        return sum(1 for o in self.outcomes if o.kind == kind)


class Worker:
    """Processes tickets of one queue with one handler callable."""

    def __init__(
        self,
        storage: Storage,
        queue: str,
        *,
        prefix: str = "s3queue",
        settings: QueueSettings | None = None,
        # Unused: callers hand both roles the same settings, and a worker needs none of them.
        coordination: CoordinatorSettings | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        owner: str | None = None,
        listener: Listener | None = None,
        time_margin: float = 5.0,
        heartbeat_thread: bool = False,
        read_ahead: RunAll | None = None,
        behind: Behind | None = None,
    ) -> None:
        self.storage = storage
        self.keys = QueueKeys(prefix, check_queue_name(queue))
        self.settings = settings or QueueSettings()
        self.clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.owner = owner or uuid.uuid4().hex[:12]
        self.emit = Emitter(queue, listener)
        self.visibility_ms = round(self.settings.visibility_timeout * 1000)
        # At most a quarter of the invocation: a margin as long as the whole `timeout` would
        # release every message, every time, and the queue would never move.
        self.time_margin_ms = min(round(time_margin * 1000), round(self.settings.timeout * 250))
        self.heartbeat_thread = heartbeat_thread
        self.read_ahead: RunAll = read_ahead or Threads(READ_AHEAD, "s3queue-read")
        """How the next `READ_WINDOW` objects of a ticket are read, `READ_AHEAD` at a time
        (concurrency.py, readahead.py)."""
        self.behind = behind
        """Where a committed ticket's apply runs while the thread takes its next ticket
        (behind.py); None: `process` applies before it returns (a Lambda invocation)."""
        self.runner = Runner(
            storage, self.keys, self.settings, clock=self.clock, rng=self.rng, emit=self.emit
        )
        self._bound: tuple[Handler, Handler] | None = None
        """The last handler given to `process`, and it bound (typed.py): inspected once."""

    def process(
        self,
        invocation: Invocation,
        handler: Handler,
        *,
        remaining_ms: Callable[[], int] | None = None,
    ) -> WorkResult:
        """Work one ticket a coordinator sent (an `Invocation`: {queue, ticket, etag, doc})."""
        key = str(invocation["ticket"])
        found = self._ticket(invocation, key)
        if found is None:
            return WorkResult(key, "gone")
        ticket, etag = found
        preloaded: dict[str, Loaded | None] = {}
        stream = None if invocation.get("pulled") else self._early_stream(ticket, preloaded)
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
            guard = Guard(self._bind(handler), remaining_ms, self.settings.timeout)
            return self._work(claim, guard, remaining_ms, throttle, stream)
        finally:
            if stream is not None:
                stream.close()

    def _early_stream(self, ticket: Ticket, preloaded: dict[str, Loaded | None]) -> Stream | None:
        """A first delivery's read-ahead, started before the fencing check and the claim: its
        first objects are read while the lease is read and the ticket claimed, not after (a
        read changes nothing; a fenced or lost ticket's reads not yet started are dropped).
        None for a redelivery (its walk skips what was recorded) or a ticket not pending; and
        `process` starts none for a pulled ticket, which other processes race to claim (a lost
        race would have read a window for nothing)."""
        if ticket.generation > 0 or not ticket.refs or ticket.state != "pending":
            return None
        return Stream.of(Reader(self, preloaded), ticket.refs)

    def _throttle(self, ticket: Ticket) -> Throttle | None:
        """A pending rate-limited ticket's throttle (None: nothing limits its starts)."""
        permit = ticket.permit
        if permit is None or not permit.limited or ticket.state != "pending" or not ticket.refs:
            return None
        return Throttle.of(self.storage, self.keys, self.clock, permit, ticket.tenant(self.keys))

    def _time_short(self, remaining_ms: Callable[[], int] | None) -> str | None:
        if remaining_ms is not None and remaining_ms() < self.time_margin_ms:
            return "time short"
        return None

    def _bind(self, handler: Handler) -> Handler:
        """`handler` with its body model applied, if it declares one (typed.py)."""
        bound = self._bound
        if bound is None or bound[0] is not handler:
            bound = self._bound = (handler, bind(handler))
        return bound[1]

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
            jobs: list[Callable[[], Any]] = [lease_read, partial(Reader(self, preloaded), first)]
            lease = settled(self.read_ahead, jobs)[0]
        verdict = lease.accepts(ticket.epoch, ticket.seq) if lease else False
        if verdict:
            return None
        status: Status = "deferred" if verdict is None else "rejected"
        self.emit("reject", self.clock.now_ms(), ticket=key, status=status)
        return WorkResult(key, status)

    def _work(
        self,
        claim: Claim,
        guard: Guard,
        remaining_ms: Callable[[], int] | None,
        throttle: Throttle | None = None,
        stream: Stream | None = None,
    ) -> WorkResult:
        """Run the claimed ticket's messages (`stream`: their reads, if started), commit,
        apply."""
        key = claim.key
        try:
            with Beating(claim, self.heartbeat_thread):
                Walk(self, claim, guard, remaining_ms, throttle, stream).run()
            claim.commit()
        except LeaseLost:
            self.emit("lease_lost", self.clock.now_ms(), ticket=key, owner=self.owner)
            guard.reraise()
            return WorkResult(key, "lost", list(claim.ticket.outcomes))
        self.emit(
            "commit",
            self.clock.now_ms(),
            ticket=key,
            outcomes=[(o.id, o.kind) for o in claim.ticket.outcomes],
        )
        apply = partial(
            self._apply, key, claim.ticket, claim.etag, Reader(self, claim.loaded), remaining_ms
        )
        if self.behind is not None:
            self.behind.submit(key, apply)
        else:
            apply()
        guard.reraise()  # a Ctrl-C in the main thread, now that nothing waits on a lease
        return WorkResult(key, "committed", list(claim.ticket.outcomes))

    def _apply(
        self,
        key: str,
        ticket: Ticket,
        etag: str,
        loader: Callable[[Ref], Loaded | None],
        remaining_ms: Callable[[], int] | None,
        *,
        helper: bool = False,
    ) -> bool:
        """Apply a committed ticket while the invocation has time (apply.py); whether done.
        Outcomes are committed, so no handler needs the handlers' margin any more: the apply
        stops only `APPLY_RESERVE_MS` short of the end, to record its progress."""
        out_of_time = None
        if remaining_ms is not None:
            margin, left = min(APPLY_RESERVE_MS, self.time_margin_ms), remaining_ms
            out_of_time = lambda: left() < margin  # noqa: E731
        extra = {"helper": True} if helper else {}
        if apply_ticket(self.storage, self.keys, ticket, etag, loader, out_of_time=out_of_time):
            self.emit("applied", self.clock.now_ms(), ticket=key, **extra)
            return True
        self.emit("apply_paused", self.clock.now_ms(), ticket=key, applied=ticket.applied)
        return False

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
                loader = Reader(self, {})
                if not self._apply(key, ticket, etag, loader, remaining_ms, helper=True):
                    return WorkResult(key, "paused", list(ticket.outcomes))
                return WorkResult(key, "applied", list(ticket.outcomes))
            if ticket.state == "claimed":
                return WorkResult(key, "busy")
            first = self._first(ticket, preloaded, remaining_ms)
            claim = Claim(self, key, ticket, etag)
            claim.loaded = preloaded  # the early stream's cache: what it reads, the walk finds
            try:
                claim.take(self.owner, first)
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
                owner=self.owner,
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
        if remaining_ms is not None and remaining_ms() < self.time_margin_ms:
            return None  # it will be released, not started
        ref = ticket.refs[0]
        first = Reader(self, preloaded)(ref)
        # An explicit id reads (and starts) its marker before it runs: not noted here, so that
        # a crash in that I/O counts no delivery for it (`Runner.settle`).
        if first is None or not first.records or first.error is not None:
            return None
        return None if first.records[0].dedup else (ref.key, first.records[0].id)
