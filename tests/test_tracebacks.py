"""Unit: a failed handler's traceback in the message's error history, bounded, and logged."""

from __future__ import annotations

import json
import logging
import traceback

import pytest
from harness import Harness, Recorder
from s3queue.contract.settings import QueueSettings
from s3queue.message import Message
from s3queue.protocol import deadletters
from s3queue.protocol.deadletters import CUT, TRACEBACK_CHARS, format_traceback
from s3queue.protocol.tickets import (
    SHORT_TRACEBACK_CHARS,
    TICKET_TRACEBACK_CHARS,
    Outcome,
    Ticket,
)


def charge_card(amount: int) -> None:
    raise ValueError(f"card declined for {amount}")


def test_every_failure_keeps_its_traceback_through_retries_into_the_dead_letter() -> None:
    h = Harness(settings=QueueSettings(max_retries=2, backoff_base=0.1, backoff_cap=0.5))
    h.queue.enqueue({"amount": 42})

    def handle(message: Message) -> None:
        charge_card(message.body["amount"])

    h.drain(handle, step=0.5)
    [dead] = h.queue.dead_letters()
    assert [e["attempt"] for e in dead["errors"]] == [1, 2, 3]
    for entry in dead["errors"]:
        trace = entry["traceback"]
        assert trace is not None and trace.startswith("Traceback (most recent call last)")
        assert "in charge_card" in trace and trace.rstrip().endswith("card declined for 42")
        assert "guard.py" not in trace and "handle.py" not in trace  # starts at the handler


def test_a_traceback_keeps_its_last_8_kb() -> None:
    with pytest.raises(RuntimeError) as info:
        raise RuntimeError("x" * 20_000 + " the end")
    full = "".join(traceback.format_exception(info.value))
    assert len(full) > TRACEBACK_CHARS
    kept = format_traceback(info.value)
    assert len(kept) == TRACEBACK_CHARS and kept.startswith(CUT)
    assert kept.endswith(full[-1000:])  # the end: where it was raised


def test_a_ticket_holds_a_bounded_sum_of_tracebacks() -> None:
    ticket = Ticket("jobs", 1, 0, [], 0)
    big = "t" * TRACEBACK_CHARS
    count = 200
    for n in range(count):
        ticket.record(Outcome("k", f"m{n}", "retry", 0, "Error: x", 0, 1, big))
    total = sum(len(o.traceback or "") for o in ticket.outcomes)
    assert TICKET_TRACEBACK_CHARS - SHORT_TRACEBACK_CHARS < total <= TICKET_TRACEBACK_CHARS
    kept = [o.traceback for o in ticket.outcomes if o.traceback]
    assert len(kept) == TICKET_TRACEBACK_CHARS // TRACEBACK_CHARS  # the first ones whole
    assert ticket.outcomes[-1].traceback is None and ticket.outcomes[-1].error == "Error: x"
    # and the document round-trips them
    again = Ticket.decode(ticket.encode("tok"))
    assert [o.traceback for o in again.outcomes] == [o.traceback for o in ticket.outcomes]


def test_the_failure_is_logged_with_its_exception(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(settings=QueueSettings(max_retries=0))
    message_id = h.queue.enqueue("x")
    with caplog.at_level(logging.INFO, logger="s3queue.working.handle"):
        h.drain(Recorder(fail=lambda m: KeyError("missing")))
    [record] = [r for r in caplog.records if r.name == "s3queue.working.handle"]
    assert record.exc_info is not None and isinstance(record.exc_info[1], KeyError)
    assert message_id in record.getMessage() and "(dead)" in record.getMessage()


def test_dead_letters_written_before_tracebacks_read_as_none() -> None:
    old = {
        "id": "a",
        "enqueued_ms": 1,
        "body": 1,
        "errors": [{"attempt": 1, "at": 5, "error": "E"}],
    }
    decoded = deadletters.decode("q/dlq/1-a", json.dumps(old).encode())
    assert decoded["errors"] == [{"attempt": 1, "at": 5, "error": "E", "traceback": None}]
