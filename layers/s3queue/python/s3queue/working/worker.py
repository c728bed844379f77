"""The worker: claim a ticket, run the handler on each message, heartbeat, commit, apply.

    claim     GET lease (fencing check), PUT ticket If-Match   -> state claimed, lease_until
              (an invoked ticket's first objects' GETs already going: start.py)
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
from functools import partial

from s3queue.common.clock import Clock, SystemClock
from s3queue.common.concurrency import RunAll, Threads
from s3queue.common.events import Emitter, Listener
from s3queue.contract.settings import CoordinatorSettings, QueueSettings
from s3queue.errors import LeaseLost
from s3queue.protocol.keys import QueueKeys, check_queue_name
from s3queue.protocol.tickets import Invocation, Ref, Ticket
from s3queue.storage.base import Storage
from s3queue.working.apply import apply_ticket
from s3queue.working.behind import Behind
from s3queue.working.claim import Beating, Claim
from s3queue.working.guard import Guard
from s3queue.working.handle import Handler, Runner
from s3queue.working.load import Loaded
from s3queue.working.readahead import READ_AHEAD, Reader, Stream
from s3queue.working.start import Begun, Start, Status, WorkResult
from s3queue.working.throttle import Throttle
from s3queue.working.typed import bind
from s3queue.working.walk import Walk

__all__ = ["Handler", "Status", "WorkResult", "Worker"]

APPLY_RESERVE_MS = 1000
"""An apply records its progress and stops when less than this is left of the invocation."""


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
        chain: bool = False,
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
        self.chain = chain
        """Take the successor the leader parked behind a ticket after it (`Ticket.after`): the
        worker Lambda's way, where a slot otherwise waits for the leader to see the ticket
        gone, publish the next one and invoke a worker on it."""
        self.chain_ms = self.time_margin_ms + round(
            min(self.settings.ticket_seconds, self.settings.timeout / 2) * 1000
        )
        """Time left that a successor needs: a grown ticket's work and the margin."""
        self.runner = Runner(
            storage, self.keys, self.settings, clock=self.clock, rng=self.rng, emit=self.emit
        )
        self._bound: tuple[Handler, Handler] | None = None
        """The last handler given to `process`, and it bound (typed.py): inspected once."""
        self.start = Start(self)
        """Everything up to the claim, and the successor's pointer (start.py)."""

    def process(
        self,
        invocation: Invocation,
        handler: Handler,
        *,
        remaining_ms: Callable[[], int] | None = None,
    ) -> WorkResult:
        """Work one ticket a coordinator sent (an `Invocation`: {queue, ticket, etag, doc}),
        then, with `chain`, each successor the leader parked behind it, in turn
        (`WorkResult.chained`)."""
        begun = self.start.begin(invocation, remaining_ms)
        if isinstance(begun, WorkResult):
            return begun
        result, after = self._run(begun, handler, remaining_ms)
        while after is not None:
            if isinstance(after, WorkResult):
                result.chained.append(after)
                break
            chained, after = self._run(after, handler, remaining_ms)
            result.chained.append(chained)
        return result

    def _run(
        self, begun: Begun, handler: Handler, remaining_ms: Callable[[], int] | None
    ) -> tuple[WorkResult, Begun | WorkResult | None]:
        """Work a claimed ticket; and what became of its successor, if it had one."""
        try:
            guard = Guard(self._bind(handler), remaining_ms, self.settings.timeout)
            return self._work(begun.claim, guard, remaining_ms, begun.throttle, begun.stream)
        finally:
            if begun.stream is not None:
                begun.stream.close()

    def _bind(self, handler: Handler) -> Handler:
        """`handler` with its body model applied, if it declares one (typed.py)."""
        bound = self._bound
        if bound is None or bound[0] is not handler:
            bound = self._bound = (handler, bind(handler))
        return bound[1]

    def _work(
        self,
        claim: Claim,
        guard: Guard,
        remaining_ms: Callable[[], int] | None,
        throttle: Throttle | None = None,
        stream: Stream | None = None,
    ) -> tuple[WorkResult, Begun | WorkResult | None]:
        """Run the claimed ticket's messages (`stream`: their reads, if started), commit,
        apply; and begin its successor if the leader parked one behind it (`Start.successor`,
        just before the apply deletes the ticket)."""
        key = claim.key
        try:
            with Beating(claim, self.heartbeat_thread):
                Walk(self, claim, guard, remaining_ms, throttle, stream).run()
            claim.commit()
        except LeaseLost:
            self.emit("lease_lost", self.clock.now_ms(), ticket=key, owner=self.owner)
            guard.reraise()
            return WorkResult(key, "lost", list(claim.ticket.outcomes)), None
        self.emit(
            "commit",
            self.clock.now_ms(),
            ticket=key,
            outcomes=[(o.id, o.kind) for o in claim.ticket.outcomes],
        )
        successor: Begun | WorkResult | None = None

        def look() -> None:
            nonlocal successor
            successor = self.start.successor(key, claim.ticket, remaining_ms)

        chains = self.chain and claim.ticket.chain and self.behind is None
        apply = partial(
            self._apply,
            key,
            claim.ticket,
            claim.etag,
            Reader(self, claim.loaded),
            remaining_ms,
            before_delete=look if chains else None,
        )
        try:
            if self.behind is not None:
                self.behind.submit(key, apply)
            else:
                apply()
        except BaseException:
            if isinstance(successor, Begun) and successor.stream is not None:
                successor.stream.close()
            raise
        guard.reraise()  # a Ctrl-C in the main thread, now that nothing waits on a lease
        return WorkResult(key, "committed", list(claim.ticket.outcomes)), successor

    def _apply(
        self,
        key: str,
        ticket: Ticket,
        etag: str,
        loader: Callable[[Ref], Loaded | None],
        remaining_ms: Callable[[], int] | None,
        *,
        helper: bool = False,
        before_delete: Callable[[], object] | None = None,
    ) -> bool:
        """Apply a committed ticket while the invocation has time (apply.py); whether done.
        Outcomes are committed, so no handler needs the handlers' margin any more: the apply
        stops only `APPLY_RESERVE_MS` short of the end, to record its progress."""
        out_of_time = None
        if remaining_ms is not None:
            margin, left = min(APPLY_RESERVE_MS, self.time_margin_ms), remaining_ms
            out_of_time = lambda: left() < margin  # noqa: E731
        extra = {"helper": True} if helper else {}
        done = apply_ticket(
            self.storage,
            self.keys,
            ticket,
            etag,
            loader,
            out_of_time=out_of_time,
            before_delete=before_delete,
            now_ms=self.clock.now_ms,
        )
        if done:
            self.emit("applied", self.clock.now_ms(), ticket=key, **extra)
            return True
        self.emit("apply_paused", self.clock.now_ms(), ticket=key, applied=ticket.applied)
        return False
