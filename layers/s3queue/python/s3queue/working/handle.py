"""Running one message: build the `Message`, call the handler, turn what happened into an
`Outcome` (with its backoff when it is a retry).

Apart from the ticket flow (worker.py) because none of it touches the ticket: it sees one
record and returns one outcome, so what the handler may do (raise, give up, run on a message
delivered too often, or on an explicit id already handled) is judged in one place.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import time
from collections.abc import Callable
from typing import Any

from s3queue.common.backoff import compute_backoff
from s3queue.common.clock import Clock
from s3queue.common.events import Emitter
from s3queue.contract.settings import QueueSettings
from s3queue.errors import Conflict, PayloadMissing, PermanentError, StorageError
from s3queue.message import Message
from s3queue.protocol import markers
from s3queue.protocol.deadletters import format_traceback
from s3queue.protocol.keys import QueueKeys
from s3queue.protocol.payload import open_payload
from s3queue.protocol.records import Record, to_datetime
from s3queue.protocol.tickets import Outcome, OutcomeKind, Ref
from s3queue.storage.base import Storage

Handler = Callable[[Message], object]

_log = logging.getLogger(__name__)

MARKER_ROUNDS = 4
"""Reads of an explicit id's marker before a start gives up (each lost CAS is a real change)."""


class Runner:
    """Runs messages of one queue through a handler, one at a time."""

    def __init__(
        self,
        storage: Storage,
        keys: QueueKeys,
        settings: QueueSettings,
        *,
        clock: Clock,
        rng: random.Random,
        emit: Emitter,
    ) -> None:
        self.storage, self.keys, self.settings = storage, keys, settings
        self.clock, self.rng, self.emit = clock, rng, emit

    def settle(self, ref: Ref, index: int, record: Record, error: str | None) -> Outcome | None:
        """The outcome of a message that does not run: malformed, out of deliveries, or an
        explicit id that is not this record's to run; None if it runs (an explicit id's marker
        is then ``started``). The worker calls this before it notes the message as running in
        its ticket, so that no I/O of this kind lies between that note and the handler's start:
        a lease expiry counts a delivery only for a handler that started (Ticket.expire)."""
        attempt = record.attempt + ref.counted(index)
        now = self.clock.now_ms()
        if error is not None:
            return self.outcome(ref, record, "dead", f"MalformedMessage: {error}", attempt)
        if attempt > self.settings.max_retries + 1:
            expired = ref.counted(index)
            why = (
                f"delivered {attempt - 1} times (its handler started each time; the lease "
                f"expired {expired} of them while it ran)"
            )
            # Not started this time: its attempts are the deliveries that did start.
            return self.outcome(ref, record, "dead", why, attempt - 1)
        if record.dedup:
            return self._explicit(ref, record, attempt, now)
        return None

    def start(
        self,
        handler: Handler,
        ref: Ref,
        index: int,
        record: Record,
        *,
        redelivered: bool,
        partition: str | None,
    ) -> Outcome:
        """Run the handler on a message `settle` let through; its outcome. `partition`: the
        ticket's (`Ticket.tenant`), which the `Message` shows."""
        attempt = record.attempt + ref.counted(index)
        now = self.clock.now_ms()
        try:
            message = self._message(record, attempt, redelivered or record.redelivered, partition)
        except PayloadMissing as exc:
            return self.outcome(ref, record, "dead", _describe(exc), attempt)
        except StorageError as exc:  # reading its payload failed: a failed delivery, retried
            kind: OutcomeKind = "dead" if attempt > self.settings.max_retries else "retry"
            return self.outcome(ref, record, kind, _describe(exc), attempt)
        self.emit(
            "handler_start",
            now,
            message_id=record.id,
            attempt=attempt,
            ref=ref.key,
            redelivered=message.redelivered,
        )
        return self._call(handler, message, ref, record)

    def _message(
        self, record: Record, attempt: int, redelivered: bool, partition: str | None
    ) -> Message:
        """The handler's view of `record`; a stored payload up to `max_message_bytes` is read
        into `body` (one GET), a larger one only if the handler opens it."""
        queue = self.keys.queue
        body, size, opener = record.body, -1, None
        payload = record.payload
        if payload is not None:
            size, opener = payload.size, functools.partial(open_payload, self.storage, payload)
            if payload.size <= self.settings.max_message_bytes:
                with opener() as stream:
                    body = stream.read()
        return Message(
            record.id,
            body,
            attempt,
            to_datetime(record.enqueued_ms),
            record.group,
            queue,
            f"{queue}:{record.id}",
            redelivered,
            partition,
            dict(record.attributes),
            size,
            opener,
        )

    def _call(self, handler: Handler, message: Message, ref: Ref, record: Record) -> Outcome:
        attempt, started = message.attempt, time.perf_counter()
        try:
            handler(message)
        except Exception as exc:  # noqa: BLE001 - any handler failure is a retry, never a crash
            # A payload gone never comes back: like PermanentError, dead at once.
            permanent = isinstance(exc, PermanentError | PayloadMissing)
            last = attempt > self.settings.max_retries
            kind: OutcomeKind = "dead" if permanent or last else "retry"
            failure = _from_handler(exc)
            _log.info(
                "handler of %s message %s failed on attempt %d (%s)",
                self.keys.queue,
                record.id,
                attempt,
                kind,
                exc_info=failure,
                extra={"queue": self.keys.queue, "message_id": record.id},
            )
            outcome = self.outcome(ref, record, kind, _describe(exc), attempt, started)
            outcome.traceback = format_traceback(failure)
            return outcome
        return self.outcome(ref, record, "done", None, attempt, started)

    def outcome(
        self,
        ref: Ref,
        record: Record,
        kind: OutcomeKind,
        error: str | None,
        attempt: int,
        started: float | None = None,
    ) -> Outcome:
        """Record `kind` now, with a backoff delay if it is a retry; emits handler_finish."""
        now = self.clock.now_ms()
        delay = 0
        if kind == "retry":
            s = self.settings
            delay = round(compute_backoff(attempt, s.backoff_base, s.backoff_cap, self.rng) * 1000)
        fields: dict[str, Any] = {"message_id": record.id, "attempt": attempt, "outcome": kind}
        if started is not None:
            fields["duration_ms"] = round((time.perf_counter() - started) * 1000, 3)
        if error is not None:
            fields["error"] = error
        self.emit("handler_finish", now, delay_ms=delay, **fields)
        return Outcome(ref.key, record.id, kind, now, error, delay, attempt, dedup=record.dedup)

    def _explicit(self, ref: Ref, record: Record, attempt: int, now: int) -> Outcome | None:
        """None if the explicit-id message may run; else its outcome without running."""
        try:
            skip = self._start_explicit(record.id, ref.key)
        except StorageError as exc:
            # Its marker could not be read or started: it did not run, so it goes back as it
            # was (released, no delivery counted), to run at a later delivery.
            why = f"explicit id's marker unsettled: {_describe(exc)}"
            self.emit("release", now, message_id=record.id, reason=why)
            return Outcome(ref.key, record.id, "release", now, why)
        if skip is None:
            return None
        # Handled already, moved on to another key (a retry copy that runs in its place; this
        # one was put again by a repeated enqueue), or cancelled: retire it, run nothing.
        self.emit("skip", now, message_id=record.id, reason=skip)
        return Outcome(ref.key, record.id, "skip", now, None, 0, attempt)

    def _start_explicit(self, message_id: str, key: str) -> str | None:
        """Claim an explicit id's run on its marker: None to run the handler, else why not.

        ``pending`` becomes ``started`` by CAS, so a cancel (which CASes ``pending`` to
        ``cancelled``) and this start cannot both win: a cancel that lost says so, and a start
        that lost finds ``cancelled`` and runs nothing. ``started`` is a redelivery: run. A
        marker that names another key means the message moved on (`markers.may_run`). No
        marker (expired by the lifecycle rule): run, as before markers could be cancelled.
        """
        for _ in range(MARKER_ROUNDS):
            found = markers.read(self.storage, self.keys, message_id)
            if not markers.may_run(found, key):
                assert found is not None
                marker = found.marker
                return (
                    "cancelled"
                    if marker.state == markers.CANCELLED
                    else ("explicit id handled" if marker.done else "explicit id handled elsewhere")
                )
            if found is None or found.marker.state == markers.STARTED:
                return None
            try:
                markers.start(self.storage, self.keys, message_id, found)
            except Conflict:
                continue  # cancelled, done or moved meanwhile: read it again
            return None
        raise StorageError(f"the marker of {message_id} kept changing; not started")


_CORE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _from_handler(exc: BaseException) -> BaseException:
    """`exc` with its traceback starting at the handler: the worker's own frames above it
    (this module, the guard) tell an operator nothing."""
    tb = exc.__traceback__
    while (
        tb is not None
        and tb.tb_next is not None
        and tb.tb_frame.f_code.co_filename.startswith(_CORE)
    ):
        tb = tb.tb_next
    return exc.with_traceback(tb)


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 2000 else text[:2000] + "..."
