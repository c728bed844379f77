"""One delivery's walk over its claimed ticket's messages: which start, which are released.

Apart from the ticket flow (worker.py) because this is where a delivery's order rules live, one
message at a time: a message an earlier delivery recorded is skipped, a FIFO group stays failed
once one of its messages failed, no handler starts on a lapsed lease or short of time or beyond
the ticket's permit, and whatever may not start is released. Running one message and judging
its outcome is handle.py's; the ticket's writes, claim.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from s3queue.common.clock import Clock
from s3queue.common.events import Emitter
from s3queue.protocol.records import Record
from s3queue.protocol.tickets import Outcome, Ref
from s3queue.working.claim import Claim
from s3queue.working.guard import Guard
from s3queue.working.handle import Runner
from s3queue.working.readahead import Reader, Source, Stream, stalled_window
from s3queue.working.throttle import Throttle

__all__ = ["Walk", "Walker"]


class Walker(Source, Protocol):
    """What a walk needs of the worker that walks (read when used, not copied)."""

    clock: Clock
    emit: Emitter
    runner: Runner
    time_margin_ms: int


@dataclass(frozen=True, slots=True)
class Walk:
    """One delivery of `claim`: its messages in order, each run, settled or released."""

    worker: Walker
    claim: Claim
    guard: Guard
    remaining_ms: Callable[[], int] | None
    throttle: Throttle | None
    stream: Stream | None = None
    """The claim's reads, if they started before it (worker.py, `_early_stream`)."""

    def run(self) -> None:
        """Record an outcome on the claim for every message this delivery has not recorded."""
        claim, throttle = self.claim, self.throttle
        partition = claim.ticket.tenant(self.worker.keys)
        recorded = {(o.ref, o.id): o.kind for o in claim.ticket.outcomes}
        failed_groups: set[str] = set()
        left = claim.ticket.permit_messages
        for ref, index, record, error in self._messages():
            left -= 1
            if self._judged(ref, index, record, error, recorded, failed_groups):
                continue
            stop = self.stop_reason()
            if stop is None and record.group is not None and record.group in failed_groups:
                stop = "earlier message of its group failed"
            if stop is None and throttle is not None and not throttle.may_start():
                stop = self._permit(throttle, left + 1)
            if stop is not None:
                self._release(ref, record, stop)
                continue
            runner = self.worker.runner
            outcome = runner.settle(ref, index, record, error)
            if outcome is None:  # it runs: noted as running with no I/O before its start
                self._before_start(ref, index, record)
                if throttle is not None:
                    throttle.started()
                outcome = runner.start(
                    self.guard,
                    ref,
                    index,
                    record,
                    redelivered=claim.ticket.generation > 0,
                    partition=partition,
                )
            if outcome.kind == "retry" and record.group is not None:
                failed_groups.add(record.group)
            claim.record(outcome)

    def _judged(
        self,
        ref: Ref,
        index: int,
        record: Record,
        error: str | None,
        recorded: Mapping[tuple[str, str], str],
        failed_groups: set[str],
    ) -> bool:
        """Whether this message is settled before anything may hold it back."""
        if (ref.key, record.id) in recorded:
            # Recorded by an earlier delivery's heartbeat: a group whose message failed
            # there stays failed here, or the next one would overtake its retry.
            if recorded[(ref.key, record.id)] == "retry" and record.group is not None:
                failed_groups.add(record.group)
            return True
        if error is None:
            return False
        # Malformed: dead without a start, whatever else holds the ticket back (time, a
        # failed group, a permit). A release would copy it as a well-formed record, whose
        # bytes a later delivery would hand to the handler (judged with no I/O: `settle`).
        settled = self.worker.runner.settle(ref, index, record, error)
        assert settled is not None
        self.claim.record(settled)
        return True

    def stop_reason(self) -> str | None:
        """Why no further handler of this ticket may start, if none may."""
        if self.guard.interrupt is not None:
            return "worker interrupted"
        remaining_ms = self.remaining_ms
        if remaining_ms is not None and remaining_ms() < self.worker.time_margin_ms:
            return "time short"
        return None

    def _permit(self, throttle: Throttle, want: int) -> str | None:
        """More starts for a ticket that outlasted its grant, heartbeating while it waits."""
        claim, clock = self.claim, self.worker.clock

        def beat() -> None:
            if clock.now_ms() >= claim.next_beat_ms:
                claim.beat()

        return throttle.acquire(want, self.stop_reason, beat)

    def _before_start(self, ref: Ref, index: int, record: Record) -> None:
        """Never start a handler on a lapsed lease: renew first if a heartbeat is overdue (a
        worker that was frozen finds out here that it was reaped); that heartbeat saves the
        outcomes so far and notes which message starts, so a lease expiry counts a delivery
        for it and for no other message (Ticket.expire). On a redelivered ticket, where a
        worker-killing message is likely, note it before every start (one PUT each)."""
        claim = self.claim
        noted = claim.note_running(ref.key, index, record.id)
        redelivered = claim.ticket.generation > 0
        if (redelivered and not noted) or self.worker.clock.now_ms() >= claim.next_beat_ms:
            claim.beat()

    def _messages(self) -> Iterator[tuple[Ref, int, Record, str | None]]:
        """The claim's messages, each as soon as its own object's read returned (the first
        object may have been read before the claim): in order; or, for a ticket of ungrouped
        library messages (`_unordered`), an object whose read returned before an earlier
        one's goes first, so that one slow GET does not hold back every message behind it
        (issue 22's p99). An object's own messages always go in order."""
        refs = self.claim.ticket.refs
        stream = self.stream or Stream.of(
            Reader(self.worker, self.claim.loaded), refs, stalled_window(self.claim.ticket)
        )
        try:
            order = self._order(stream) if self._unordered() else ((i, i) for i in range(len(refs)))
            for at, base in order:
                result = stream.read(at, base)
                if result is None:
                    continue
                for index, record in enumerate(result.records):
                    yield refs[at], index, record, result.error
        finally:
            stream.close()

    def _order(self, stream: Stream) -> Iterator[tuple[int, int]]:
        """The objects' indexes, each the first one (within the read-ahead window) whose read
        has returned, waiting for the first of them to return if none has; each with the
        first one left (the window counts from it)."""
        left = list(range(len(stream.refs)))
        while left:
            base = left[0]
            stream.read_ahead_from(base)
            window = left[: stream.window]
            stream.wait_any(window)
            at = next((i for i in window if stream.ready(i)), base)
            left.remove(at)
            yield at, base

    def _unordered(self) -> bool:
        """Whether no order binds this ticket's objects: every one a library message of no
        FIFO group (a plain PUT's object in the inbox may carry a group in its body)."""
        keys = self.worker.keys
        for ref in self.claim.ticket.refs:
            parsed = keys.owning(ref.key).parse_msg(ref.key)
            if parsed is None or parsed.group is not None:
                return False
        return True

    def _release(self, ref: Ref, record: Record, why: str) -> None:
        now = self.worker.clock.now_ms()
        self.worker.emit("release", now, ticket=self.claim.key, message_id=record.id, reason=why)
        self.claim.record(Outcome(ref.key, record.id, "release", now, why))
