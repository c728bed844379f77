"""Unit: retries with backoff, the DLQ at exactly max_retries, permanent errors, bad input."""

from __future__ import annotations

import json
import random

import pytest
from harness import Harness, Recorder
from s3queue import PermanentError
from s3queue.common.backoff import backoff_bound, compute_backoff
from s3queue.contract.settings import QueueSettings


def test_backoff_is_full_jitter_within_exponential_bound() -> None:
    rng = random.Random(1)
    assert [backoff_bound(n, 1.0, 10.0) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    for attempt in range(1, 12):
        delays = [compute_backoff(attempt, 0.5, 30.0, rng) for _ in range(200)]
        bound = min(30.0, 0.5 * 2 ** (attempt - 1))
        assert all(0 <= d <= bound for d in delays)
        assert max(delays) > bound * 0.8  # full jitter spreads over the whole range


def test_failure_retries_with_attempt_two_after_backoff() -> None:
    h = Harness(settings=QueueSettings(backoff_base=2.0, backoff_cap=60.0))
    h.queue.enqueue("flaky")
    handler = Recorder(fail=lambda m: RuntimeError("boom") if m.attempt == 1 else None)
    h.tick()
    [work] = h.work(handler)
    assert work.count("retry") == 1
    [outcome] = work.outcomes
    assert 0 <= outcome.delay_ms <= 2000
    [key] = h.keys("msg/")
    assert "~o" in key  # a retry copy, written by the ticket's apply
    h.drain(handler, step=0.25)
    assert [m.attempt for m in handler.seen] == [1, 2]
    assert [m.id for m in handler.seen] == [handler.seen[0].id] * 2
    assert handler.seen[1].idempotency_key == handler.seen[0].idempotency_key
    finishes = [e for e in h.kinds("handler_finish")]
    assert finishes[0].fields["outcome"] == "retry"
    # the retry was not dispatched before its backoff elapsed
    dispatches = h.kinds("dispatch")
    assert dispatches[1].at_ms >= finishes[0].at_ms + outcome.delay_ms


@pytest.mark.parametrize("max_retries", [0, 1, 3])
def test_dead_letter_after_exactly_max_retries(max_retries: int) -> None:
    h = Harness(settings=QueueSettings(max_retries=max_retries, backoff_base=0.5, backoff_cap=4.0))
    h.queue.enqueue({"poison": True})
    handler = Recorder(fail=lambda m: ValueError(f"bad {m.attempt}"))
    h.drain(handler, step=0.5)
    assert [m.attempt for m in handler.seen] == list(range(1, max_retries + 2))
    [dead] = h.queue.dead_letters()
    assert dead["body"] == {"poison": True}
    assert dead["attempts"] == max_retries + 1
    assert [e["error"] for e in dead["errors"]] == [
        f"ValueError: bad {n}" for n in range(1, max_retries + 2)
    ]
    assert h.queue.stats()["dead"] == 1 and h.keys("msg/") == []


def test_permanent_error_dead_letters_at_once() -> None:
    h = Harness()
    h.queue.enqueue("invalid address")
    handler = Recorder(fail=lambda m: PermanentError("no such mailbox"))
    h.drain(handler)
    assert len(handler.seen) == 1
    [dead] = h.queue.dead_letters()
    assert dead["reason"] == "PermanentError: no such mailbox"


def test_redrive_moves_dead_letters_back() -> None:
    h = Harness(settings=QueueSettings(max_retries=0))
    h.queue.enqueue("second chance")
    h.drain(Recorder(fail=lambda m: RuntimeError("down")))
    assert h.queue.redrive() == 1
    handler = Recorder()
    h.drain(handler)
    assert handler.bodies() == ["second chance"] and handler.seen[0].attempt == 1
    assert h.queue.stats()["dead"] == 0


def test_mixed_outcomes_in_a_packed_object() -> None:
    h = Harness(settings=QueueSettings(max_retries=1, backoff_base=0.1))
    h.queue.enqueue_many(range(10))
    handler = Recorder(fail=lambda m: RuntimeError("odd") if m.body % 2 else None)
    h.drain(handler, step=0.5)
    assert sorted(m.body for m in handler.seen if m.attempt == 1) == list(range(10))
    assert sorted(m.body for m in handler.seen if m.attempt == 2) == [1, 3, 5, 7, 9]
    assert sorted(d["body"] for d in h.queue.dead_letters()) == [1, 3, 5, 7, 9]


def test_malformed_inbox_objects_become_messages_or_dead_letters() -> None:
    h = Harness(settings=QueueSettings(max_message_bytes=1000))
    inbox = h.queue.keys.inbox
    h.storage.put(inbox + "empty", b"")
    h.storage.put(inbox + "binary.bin", b"\x89PNG\x00\xff")
    h.storage.put(inbox + "bad.json", b'{"unterminated": ')
    h.storage.put(inbox + "good.json", json.dumps({"ok": 1}).encode())
    h.storage.put(inbox + "huge", b"x" * 5000)
    h.storage.put(h.queue.keys.msg + "0000000000001-garbage", b"not an envelope")
    read: list[bytes] = []
    handler = Recorder(lambda m: None if m.body is not None else read.append(m.open().read()))
    h.drain(handler)
    # An object over max_message_bytes is a message too, its payload read only if asked.
    assert sorted(map(repr, handler.bodies())) == sorted(
        map(repr, [b"", b"\x89PNG\x00\xff", b'{"unterminated": ', {"ok": 1}, None])
    )
    [huge] = [m for m in handler.seen if m.body is None]
    assert huge.size == 5000 and read == [b"x" * 5000]
    reasons = sorted(d["reason"].split(":")[0] for d in h.queue.dead_letters())
    assert reasons == ["MalformedMessage"]
    assert h.keys("inbox/") == [] and h.keys("msg/") == []


def test_a_malformed_object_is_dead_lettered_even_by_a_worker_short_of_time() -> None:
    # GIVEN a malformed object in msg/ beside a good message, and a worker out of time: it
    # may start no handler and releases what it would run (release copies)
    h = Harness()
    h.storage.put(h.queue.keys.msg + "0000000000001-garbage", b"not an envelope")
    h.queue.enqueue("good")
    h.tick()
    [work] = h.work(Recorder(), remaining_ms=lambda: 2_000)  # under its margin: no start
    # THEN the malformed object is judged there and then: a release copy would carry it as a
    # well-formed record, and a later delivery would hand its bytes to the handler
    assert [o.kind for o in work.outcomes] == ["dead", "release"]
    handler = Recorder()
    h.drain(handler)
    assert handler.bodies() == ["good"]
    [dead] = h.queue.dead_letters()
    assert dead["reason"].startswith("MalformedMessage")


def test_handler_exception_never_crashes_the_worker() -> None:
    h = Harness(settings=QueueSettings(max_retries=0))
    h.queue.enqueue_many(["ok", "raise", "ok2"])
    handler = Recorder(fail=lambda m: KeyError("x") if m.body == "raise" else None)
    h.drain(handler)
    assert handler.bodies() == ["ok", "raise", "ok2"]
    assert len(h.queue.dead_letters()) == 1


def test_enqueueing_an_explicit_id_again_during_its_retry_backoff_is_a_no_op() -> None:
    # GIVEN an explicit-id message that failed once: its retry copy waits out the backoff
    h = Harness(settings=QueueSettings(backoff_base=5, backoff_cap=5))
    h.queue.enqueue({"order": 1}, id="order-1")
    h.tick()
    h.work(Recorder(fail=lambda m: ValueError("down")))
    [copy] = h.keys("msg/")
    # WHEN the producer enqueues the same id again (a retried request, say)
    h.queue.enqueue({"order": 1}, id="order-1")
    # THEN nothing new is put: the marker names the copy, not the deleted first key
    assert h.keys("msg/") == [copy]
    handler = Recorder()
    h.drain(handler)
    assert [(m.id, m.attempt) for m in handler.seen] == [("order-1", 2)]
