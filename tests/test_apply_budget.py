"""Unit: a large committed ticket is applied in bounded steps that survive a Lambda timeout,
and every invoke payload fits Lambda's 1 MB async limit (issue 19.8)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from harness import QUEUE, Crash, Harness
from s3queue.common.clock import FakeClock
from s3queue.contract.settings import QueueSettings
from s3queue.protocol.tickets import MAX_ERROR_CHARS, Outcome, Ref, Ticket
from s3queue.storage.base import Storage

REFS = 1000
REQUEST_S = 0.03  # one S3 request on AWS, about
LAMBDA_S = 60.0
ASYNC_PAYLOAD_LIMIT = 1_000_000


class Lambda:
    """A storage on which every request takes `REQUEST_S` of the clock, and whose invocation is
    killed (`Crash`) once its deadline passes, as Lambda stops a function at its timeout."""

    def __init__(self, inner: Storage, clock: FakeClock) -> None:
        self.inner, self.clock = inner, clock
        self.deadline_ms = 0
        self.requests = 0
        self.calls: list[tuple[str, str]] = []
        """(method, key) of each request; the key is "" where the first argument is not one."""

    def start(self) -> None:
        self.deadline_ms = self.clock.now_ms() + round(LAMBDA_S * 1000)

    def remaining_ms(self) -> int:
        return self.deadline_ms - self.clock.now_ms()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.clock.now_ms() >= self.deadline_ms:
                raise Crash("Lambda timeout")
            self.requests += 1
            self.calls.append((name, args[0] if args and isinstance(args[0], str) else ""))
            self.clock.advance(REQUEST_S)
            return attr(*args, **kwargs)

        return timed


def _committed(h: Harness, error: str) -> tuple[str, Ticket]:
    """A committed ticket of `REFS` messages, each failed with `error` (so each needs a retry
    copy: a GET and a PUT to apply), as a worker would leave it, in the leader's epoch."""
    h.tick()
    for i in range(REFS):
        h.queue.enqueue(i)
    entries = h.storage.list(h.queue.keys.msg).entries
    assert len(entries) == REFS
    refs = [Ref(e.key, e.etag, e.size) for e in entries]
    now = h.clock.now_ms()
    ticket = Ticket(QUEUE, 1, 0, refs, now, state="committed", committed_ms=now)
    for ref in refs:
        message_id = ref.key.rsplit("-", 1)[-1]
        ticket.outcomes.append(Outcome(ref.key, message_id, "retry", now, error, 1000, 1))
    key = h.queue.keys.ticket(1, 0)
    h.storage.put(key, ticket.encode("t"))
    return key, ticket


def test_a_1000_ref_committed_ticket_is_applied_by_successive_invocations_under_a_timeout() -> None:
    # GIVEN a 1,000-ref committed ticket whose apply needs ~2,000 requests of 30 ms (60 s), and
    # workers that Lambda kills at 60 s
    h = Harness(settings=QueueSettings(visibility_timeout=60, timeout=60))
    key, _ = _committed(h, "boom")
    lam = Lambda(h.storage, h.clock)
    worker = h.new_worker("helper")
    worker.storage = lam  # type: ignore[assignment]
    statuses: list[str] = []
    # WHEN helpers are invoked on it one after another, each with the Lambda's time
    for _ in range(5):
        lam.start()
        try:
            result = worker.process(
                {"queue": QUEUE, "ticket": key}, lambda m: None, remaining_ms=lam.remaining_ms
            )
        except Crash:
            statuses.append("killed")
            continue
        statuses.append(result.status)
        if result.status == "applied":
            break
    # THEN it completes, no invocation is killed, and nothing is redone: about one GET and
    # one PUT per ref, plus a PUT of progress per 100 refs and the step's deletes
    assert statuses == ["paused", "applied"], statuses
    assert h.storage.get(key) is None
    keys = h.keys("msg/")
    assert len(keys) == REFS and all("~n" not in k and "~o0000000001-0000000000" in k for k in keys)
    assert lam.requests <= 2 * REFS + 2 * (REFS // 100) + 10, lam.requests


def test_an_apply_that_only_deletes_records_no_progress_and_deletes_in_one_request() -> None:
    # GIVEN one ticket of 1,000 messages, each of whose requests takes 30 ms
    h = Harness(settings=QueueSettings(batch_size=REFS, max_batch_size=REFS))
    for i in range(REFS):
        h.queue.enqueue(i)
    h.tick()
    [invocation] = h.invocations
    key = invocation["ticket"]
    lam = Lambda(h.storage, h.clock)
    worker = h.new_worker("w")
    worker.storage = lam  # type: ignore[assignment]
    # WHEN a worker runs it, each message done, and applies it
    lam.start()
    result = worker.process(invocation, lambda m: None, remaining_ms=lam.remaining_ms)
    # THEN the apply records no progress (it takes less than `APPLY_RECORD_MS`): after the
    # commit, the 1,000 messages go in one DeleteObjects, then the ticket goes
    assert result.status == "committed" and not h.keys("msg/") and not h.keys("tickets/")
    writes = [call for call in lam.calls if call[0] in ("put", "delete", "delete_many")]
    apply = writes[writes.index(("delete_many", "")) :]
    assert apply == [("delete_many", ""), ("delete", key)], apply


def test_long_error_texts_are_bounded_and_a_large_ticket_travels_as_a_reference() -> None:
    # GIVEN a committed ticket of 1,000 outcomes whose errors are 50,000 characters each
    h = Harness()
    key, ticket = _committed(h, "x" * 50_000)
    # THEN each error is cut, and the invoke payload fits the 1 MB async limit
    assert all(len(o.error or "") <= MAX_ERROR_CHARS for o in ticket.outcomes)
    payload = ticket.invocation(key, "etag")
    assert len(json.dumps(payload, separators=(",", ":"))) < ASYNC_PAYLOAD_LIMIT
    assert "doc" not in payload  # above INLINE_DOC_BYTES: the worker GETs it
    # AND a worker given that reference applies it
    [result] = [h.new_worker("w2").process({**payload, "etag": ""}, lambda m: None)]
    assert result.status == "applied" and h.storage.get(key) is None
    [retry] = [k for k in h.keys("msg/")][:1]
    copy = json.loads(h.storage.get(retry).body)  # type: ignore[union-attr]
    assert len(copy["messages"][0]["errors"][0]["error"]) <= MAX_ERROR_CHARS


def test_a_small_ticket_still_travels_whole() -> None:
    h = Harness()
    h.queue.enqueue("one")
    h.tick()
    [payload] = h.invocations
    assert "doc" in payload


@pytest.mark.parametrize("length", [0, MAX_ERROR_CHARS, MAX_ERROR_CHARS + 1, 10**6])
def test_an_outcome_error_never_exceeds_the_bound(length: int) -> None:
    outcome = Outcome("k", "id", "retry", 0, "e" * length)
    assert len(outcome.error or "") <= MAX_ERROR_CHARS
    if length <= MAX_ERROR_CHARS:
        assert outcome.error == "e" * length
    assert Outcome.from_json(outcome.to_json()).error == outcome.error
