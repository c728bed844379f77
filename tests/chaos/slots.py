"""Recurring schedules in a chaos run: the coordinators themselves make messages, and the checks.

The chaos queue declares a schedule as a handler module would (``Config.schedule``, e.g.
``{"schedule": 5, "schedule_catch_up": 3}``), so every coordinator process enqueues each slot
(dispatching/schedules.py) beside the producer's workload, under the same faults, crashes,
freezes and per-process clocks (skewed, drifting, stepping). The schedule runs while the
producer does: once it is done (``producer_done``) the coordinators enqueue no more slots, so
a drained run ends with nothing new coming in.

Each process's `Schedules` is a `Watched` one, which records, around each try of the queue's
latest slot (`Schedules._enqueue_latest`, the one reading of the process's clock it goes by):

    slot_check      before: ``now``, the process's clock
    slot_result     after: ``now`` and ``result``: put (this call's PUT created the message),
                    found (the slot's message was there: another process put it), none
                    (nothing tried: this process tried the slot already, or it was older than
                    the catch-up), error (an S3 error: the process tries again at its next step)
    explicit_id     the slot's id, once per process: an explicit id (exactly-once; the checker
                    never excuses its second run as a resent PUT)
    enqueue_failed  the slot's id, when the try raised or the process died in it (it may have
                    applied: a run of it is no phantom)

The checker (`check`) judges each try by the clock of the process that made it (a slot is due
when that clock says so: skew between processes moves only *when* a slot goes in) and by the
schedule's own arithmetic (an interval's slots are the multiples of it since the epoch):

    slot_twice       the slot's handler ran twice with no lease expiry of a ticket holding it
                     (two tries may each *put* it: one whose PUT was held up until the slot had
                     run and its message was deleted puts it again, and the worker retires
                     that stale copy unrun, ``skip``, by its ``done`` marker: the chaos run
                     found this; protocol.md, explicit ids)
    slot_missing     a try found its latest slot due (at most ``schedule_catch_up`` old), not
                     tried before by its process, and put nothing without an S3 error; or a slot
                     put or found never ran (a drained run)
    slot_catch_up    a try enqueued another slot than its latest (missed slots collapse into the
                     latest), or one older than ``schedule_catch_up``
    slot_early       a slot enqueued before its time by the reference clock, beyond the run's
                     clock bound (``Expect.skew_ms``)
    slot_attribute   a handler saw a ``schedule-slot`` attribute or body other than its slot's
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from s3queue.common.clock import Clock
from s3queue.contract.schedule import Schedule, slot_id
from s3queue.contract.settings import QueueSettings
from s3queue.dispatching.coordinator import Coordinator
from s3queue.dispatching.schedules import Schedules
from s3queue.errors import StorageError

from chaos import timeline as tl
from chaos.history import Entry, History
from chaos.report import Expect, Report
from chaos.timeline import Timeline

PREFIX = "schedule-"


def scheduled(settings: QueueSettings, declared: Mapping[str, Any]) -> QueueSettings:
    """`settings` with the schedule a handler module declares in its ``SETTINGS``."""
    if not declared:
        return settings
    parsed = QueueSettings.from_mapping(declared)
    return replace(settings, **{name: getattr(parsed, name) for name in declared})


class Watched(Schedules):
    """A process's `Schedules` that records each try of a slot (module docstring)."""

    def __init__(self, clock: Clock, history: History, owner: str, closed: threading.Event):
        super().__init__(clock)
        self.history, self.owner, self.closed = history, owner, closed
        self._ids: set[str] = set()

    def _enqueue_latest(
        self, coordinator: Coordinator, schedule: Schedule, now: int
    ) -> bool | None:
        if self.closed.is_set():
            return None
        message_id = slot_id(schedule.latest(now))
        if message_id not in self._ids:
            self._ids.add(message_id)
            self.history.record("explicit_id", self.owner, id=message_id)
        self.history.record("slot_check", self.owner, now=now)
        try:
            written = super()._enqueue_latest(coordinator, schedule, now)
        except StorageError as exc:
            self._failed(message_id, f"{type(exc).__name__}: {exc}")
            self.history.record("slot_result", self.owner, now=now, result="error")
            raise
        except BaseException:  # the process died in it: the slot may have gone in
            self._failed(message_id, "crashed")
            raise
        result = "none" if written is None else "put" if written else "found"
        self.history.record("slot_result", self.owner, now=now, result=result)
        return written

    def _failed(self, message_id: str, error: str) -> None:
        self.history.record("enqueue_failed", self.owner, ids=[message_id], error=error)


def schedules_for(history: History) -> Callable[[str, Clock], Schedules]:
    """What makes each coordinator process's `Watched` schedules; they close together once the
    producer is done."""
    closed = threading.Event()

    def close(e: Entry) -> None:
        if e.kind == "producer_done":
            closed.set()

    history.watchers.append(close)
    return lambda owner, clock: Watched(clock, history, owner, closed)


def slot_of(message_id: str) -> int | None:
    """The slot (UTC ms) a ``schedule-20261203T085000Z`` id names; None for any other id."""
    if not message_id.startswith(PREFIX):
        return None
    at = datetime.strptime(message_id[len(PREFIX) :], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    return round(at.timestamp() * 1000)


def text_of(slot: int) -> str:
    """The slot's time as its attribute gives it: ISO 8601 UTC to the second."""
    return datetime.fromtimestamp(slot / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check(entries: list[Entry], t: Timeline, expect: Expect, report: Report) -> None:
    """The schedule's invariants (module docstring), in a run with a schedule."""
    if not expect.schedule_ms:
        return
    settled = _check_tries(entries, expect, report)
    ran: dict[int, int] = {}
    for e in t.execs:
        slot = slot_of(str(e["id"]))
        if slot is not None:
            ran[slot] = ran.get(slot, 0) + 1
            _check_attribute(e, slot, report)
    for run in t.runs:  # a run that failed and was retried is one delivery, not a second slot
        slot = slot_of(run.id)
        if slot is not None and run.outcome == "retry" and run.committed:
            ran[slot] -= 1
    for slot, runs in sorted(ran.items()):
        expired = any(slot_id(slot) in t.ticket_ids(ticket) for ticket in t.reaps)
        if runs > 1 and not expired:
            report.add("slot_twice", slot_id(slot), f"ran {runs} times with no lease expiry")
    for slot in sorted(settled) if expect.drained else ():
        if not ran.get(slot) and not tl.maybe_purged(t, slot_id(slot)):  # (a purge may take it)
            report.add("slot_missing", slot_id(slot), "enqueued, never ran")


def _check_tries(entries: list[Entry], expect: Expect, report: Report) -> set[int]:
    """Each try against the schedule's arithmetic; the slots put or found."""
    every, catch_up = expect.schedule_ms, expect.schedule_catch_up_ms
    latest: dict[str, int] = {}
    """process -> the latest slot it tried (put, found or skipped as too old)."""
    open_check: dict[str, int] = {}
    """process -> the slot of its try in progress."""
    settled: set[int] = set()
    for e in entries:
        if e.kind == "slot_check":
            open_check[e.actor] = int(e["now"]) // every * every
        elif e.kind == "enqueue" and e.actor in open_check:
            _check_enqueue(e, open_check[e.actor], expect, report)
        elif e.kind == "slot_result":
            open_check.pop(e.actor, None)
            now, result = int(e["now"]), e["result"]
            slot = now // every * every
            old = now - slot > catch_up
            if result in ("put", "found"):
                settled.add(slot)
                latest[e.actor] = max(latest.get(e.actor, slot), slot)
                if old:
                    report.add("slot_catch_up", slot_id(slot), f"{e.actor} enqueued it at {now}")
            elif result == "none" and old:
                latest[e.actor] = max(latest.get(e.actor, slot), slot)
            elif result == "none" and slot > latest.get(e.actor, -1):
                why = f"{e.actor} found it due at {now} and enqueued nothing"
                report.add("slot_missing", slot_id(slot), why)
    return settled


def _check_enqueue(e: Entry, slot: int, expect: Expect, report: Report) -> None:
    """An enqueue inside a try: of the try's latest slot, and not before its time."""
    enqueued = slot_of(str(e["message_id"]))
    if enqueued is None:
        return
    if enqueued != slot:
        why = f"{e.actor} enqueued it while its latest slot was {slot_id(slot)}"
        report.add("slot_catch_up", slot_id(enqueued), why)
    if e.true_ms < enqueued - expect.skew_ms:
        why = f"enqueued at {e.true_ms}, {enqueued - e.true_ms} ms before its time"
        report.add("slot_early", slot_id(enqueued), why)


def _check_attribute(e: Entry, slot: int, report: Report) -> None:
    text = text_of(slot)
    if e.get("slot") != text or e.get("body_slot") != text:
        seen = f"attribute {e.get('slot')!r}, body {e.get('body_slot')!r}"
        report.add("slot_attribute", slot_id(slot), f"{seen}, slot {text!r}")
