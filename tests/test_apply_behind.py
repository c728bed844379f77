"""A committed ticket's apply behind its worker thread (working/behind.py, issue 22 item 4)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from harness import CountingStorage, Harness, Recorder
from s3queue.local.runtime import run_local
from s3queue.producing.producer import Queue
from s3queue.protocol.tickets import Ticket
from s3queue.storage import MemoryStorage
from s3queue.working.behind import ApplyBehind


class Deferred:
    """A `Behind` that keeps the applies it is handed, to run when the test says."""

    def __init__(self) -> None:
        self.jobs: list[tuple[str, Callable[[], object]]] = []

    def submit(self, ticket: str, job: Callable[[], object]) -> None:
        self.jobs.append((ticket, job))


def test_a_worker_with_an_apply_behind_returns_at_the_commit_and_the_apply_finishes_it() -> None:
    h = Harness()
    deferred = Deferred()
    h.worker.behind = deferred
    h.queue.enqueue({"n": 1})
    h.tick()
    ticket = str(h.invocations[0]["ticket"])
    # WHEN the worker works the ticket
    [result] = h.work(Recorder())
    # THEN it returns once committed: the ticket and its message are still there
    assert result.status == "committed" and [t for t, _ in deferred.jobs] == [ticket]
    assert h.keys("tickets/") and h.keys("msg/")
    assert not h.kinds("applied")
    # AND the apply it handed over finishes the ticket
    deferred.jobs[0][1]()
    assert h.keys("tickets/") == [] and h.keys("msg/") == []
    assert [e.fields["ticket"] for e in h.kinds("applied")] == [ticket]


def test_without_a_behind_the_worker_applies_before_it_returns() -> None:
    h = Harness()
    h.queue.enqueue({"n": 1})
    h.tick()
    [result] = h.work(Recorder())
    assert result.status == "committed" and h.kinds("applied")
    assert h.keys("tickets/") == [] and h.keys("msg/") == []


def test_a_thread_waits_for_its_last_apply_before_handing_over_the_next() -> None:
    behind = ApplyBehind(2)
    release, order = threading.Event(), []

    def slow() -> None:
        release.wait(10)
        order.append("first")

    def submitter() -> None:
        behind.submit("t1", slow)
        order.append("first submitted")
        behind.submit("t2", lambda: order.append("second"))  # waits for t1
        order.append("second submitted")

    thread = threading.Thread(target=submitter)
    thread.start()
    # WHILE the first apply runs, it is working and the thread's second submit waits
    thread.join(0.2)
    assert thread.is_alive() and order == ["first submitted"]
    assert behind.working() == {"t1"} and not behind.idle()
    # ONCE it returns, the second goes, and join waits for it
    release.set()
    thread.join(10)
    behind.join()
    assert order == ["first submitted", "first", "second submitted", "second"]
    assert behind.idle() and behind.working() == frozenset()


def test_other_threads_do_not_wait_for_one_threads_apply() -> None:
    behind = ApplyBehind(2)
    release = threading.Event()
    behind.submit("t1", lambda: release.wait(10))
    done: list[str] = []
    other = threading.Thread(target=lambda: behind.submit("t2", lambda: done.append("t2")))
    other.start()
    other.join(10)
    assert not other.is_alive()  # handed over at once, although t1 still runs
    release.set()
    behind.join()
    assert done == ["t2"] and behind.idle()


def test_an_apply_that_raises_is_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    behind = ApplyBehind(1)

    def broken() -> None:
        raise RuntimeError("S3 said no")

    with caplog.at_level(logging.ERROR, logger="s3queue.working.behind"):
        behind.submit("t1", broken)
        behind.join()
    assert behind.errors == 1 and "applying ticket t1 failed" in caplog.text
    behind.submit("t2", lambda: None)  # the thread goes on
    behind.join()
    assert behind.errors == 1


class HeldApply(MemoryStorage):
    """Holds the first ticket DELETE (the end of an apply) until another ticket is claimed."""

    def __init__(self) -> None:
        super().__init__()
        self.claimed_next = threading.Event()
        self.held: str | None = None
        self.overlapped = False

    def put(self, key: str, body: bytes, **kwargs: Any) -> str:
        etag = super().put(key, body, **kwargs)
        held = self.held
        other = held is not None and "/tickets/" in key and key != held
        if other and Ticket.decode(body).state == "claimed":
            self.claimed_next.set()
        return etag

    def delete(self, key: str, **kwargs: Any) -> None:
        if "/tickets/" in key and self.held is None:
            self.held = key
            self.overlapped = self.claimed_next.wait(10)
        super().delete(key, **kwargs)


def test_one_worker_thread_claims_its_next_ticket_while_the_last_is_applied() -> None:
    storage = HeldApply()
    queue = Queue("jobs", storage=storage)
    for n in range(30):  # tickets of 10 locally: three of them
        queue.enqueue({"n": n})
    seen: list[Any] = []
    # WHEN one worker thread drains them, its first apply held until another ticket is claimed
    summary = run_local(
        {"jobs": lambda m: seen.append(m.body)}, storage=storage, workers=1, drain=True, timeout=60
    )
    # THEN the claim came while the apply waited (inline, it would have waited 10 s for nothing)
    assert storage.overlapped
    assert summary.drained and sorted(b["n"] for b in seen) == list(range(30))


def test_a_claim_lost_to_a_fresh_commit_leaves_the_apply_to_its_committer() -> None:
    # GIVEN a ticket pulled pending by two workers; the first commits it, its apply behind
    h = Harness()
    for n in range(3):
        h.queue.enqueue({"n": n})
    h.tick()
    [payload] = h.invocations
    payload["pulled"] = True  # as pull.py hands it over: no reads ahead before the claim
    deferred = Deferred()
    h.worker.behind = deferred
    assert h.worker.process(payload, Recorder()).status == "committed"
    # WHEN the second claims it with its pending copy
    counted = CountingStorage(h.storage)
    late = h.new_worker("w2")
    late.storage = counted  # type: ignore[assignment]
    result = late.process(payload, Recorder())
    # THEN it lost the race and left the ticket to its committer: it read the lease, its first
    # object, the ticket after the failed claim, and nothing more (no object read again)
    assert result.status == "busy"
    assert counted.reset() == {"GET": 3, "PUT": 1}
    assert h.keys("tickets/") and not [e for e in h.kinds("applied") if e.fields.get("helper")]
    deferred.jobs[0][1]()
    assert h.keys("tickets/") == [] and h.keys("msg/") == []
