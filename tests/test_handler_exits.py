"""Hostile handlers: a BaseException or an overrun is that message's failure (issue 9 item 6).

Before, ``sys.exit()`` in a handler ended the worker thread silently: nothing was recorded, the
ticket's other messages never started, and everything came back only when the lease expired;
the local runtime lost a worker thread each time. And a handler slower than the queue's
``timeout`` completed normally in the local runtime, where Lambda would have stopped it.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import Any

import pytest
from harness import Harness, Recorder
from s3queue import Queue, run_local
from s3queue.contract.settings import QueueSettings
from s3queue.local.runtime import LocalContext
from s3queue.message import Message
from s3queue.storage import MemoryStorage
from s3queue.working.guard import WorkerKilled
from s3queue.working.worker import WorkResult


class Custom(BaseException):
    """A BaseException of the handler's own (pytest's `Failed` is one, for example)."""


EXITS = [
    (lambda: sys.exit(3), "SystemExit: 3"),
    (sys.exit, "SystemExit: "),
    (KeyboardInterrupt, "KeyboardInterrupt: "),
    (GeneratorExit, "GeneratorExit: "),
    (asyncio.CancelledError, "CancelledError: "),
    (lambda: Custom("mine"), "Custom: mine"),
]


def raising(exit: Any) -> BaseException:
    """The exception `exit` raises or returns."""
    try:
        made = exit()
    except BaseException as exc:  # noqa: BLE001 - sys.exit() raises, the classes are returned
        return exc
    assert isinstance(made, BaseException)
    return made


def in_a_worker_thread(h: Harness, handler: Recorder) -> list[WorkResult]:
    """`h.work` in a thread of its own, as the local runtime's pool runs it; joined."""
    results: list[WorkResult] = []
    thread = threading.Thread(target=lambda: results.extend(h.work(handler)))
    thread.start()
    thread.join()
    return results


def three_in_one_ticket(h: Harness) -> None:
    for body in ("a", "b", "c"):
        h.queue.enqueue(body)
    h.tick()


@pytest.mark.parametrize(("exit", "reason"), EXITS, ids=[r.split(":")[0] for _, r in EXITS])
def test_a_base_exception_is_that_messages_failure_and_the_ticket_goes_on(
    exit: Any, reason: str
) -> None:
    # GIVEN a ticket of three messages whose second one's handler raises a BaseException once
    h = Harness()
    three_in_one_ticket(h)
    handler = Recorder(fail=lambda m: raising(exit) if (m.body, m.attempt) == ("b", 1) else None)
    # WHEN a worker thread processes it
    [work] = in_a_worker_thread(h, handler)
    # THEN the worker lived: "b" failed with the reason, "a" and "c" were done, all committed
    assert work.status == "committed"
    assert [(o.kind, o.error) for o in work.outcomes] == [
        ("done", None),
        ("retry", f"HandlerExit: {reason}"),
        ("done", None),
    ]
    # AND "b" is retried like any failure, at attempt 2
    h.drain(handler)
    assert [(m.body, m.attempt) for m in handler.seen] == [("a", 1), ("b", 1), ("c", 1), ("b", 2)]


def test_a_handler_that_always_exits_is_dead_lettered_with_its_reason() -> None:
    h = Harness(settings=QueueSettings(max_retries=2))
    h.queue.enqueue("doomed")
    handler = Recorder(fail=lambda m: raising(lambda: sys.exit("bye")))
    h.drain(handler)
    assert [m.attempt for m in handler.seen] == [1, 2, 3]
    [dead] = h.queue.dead_letters()
    assert dead["attempts"] == 3 and dead["reason"] == "HandlerExit: SystemExit: bye"


def test_a_ctrl_c_in_the_main_thread_commits_releases_the_rest_and_stops() -> None:
    # GIVEN a worker in the main thread, where a KeyboardInterrupt may be a real Ctrl-C
    h = Harness()
    three_in_one_ticket(h)
    handler = Recorder(fail=lambda m: KeyboardInterrupt() if m.body == "b" else None)
    # WHEN it interrupts the second handler, THEN it stops after committing
    with pytest.raises(KeyboardInterrupt):
        h.work(handler)
    assert h.keys("tickets/") == []  # committed and applied: no lease to wait for
    # AND "b" failed (retried at attempt 2), "c" never started (still at attempt 1)
    handler = Recorder()
    h.drain(handler)
    assert sorted((m.body, m.attempt) for m in handler.seen) == [("b", 2), ("c", 1)]


def test_worker_killed_still_stops_the_worker_dead() -> None:
    h = Harness()
    three_in_one_ticket(h)
    with pytest.raises(WorkerKilled):
        h.work(Recorder(fail=lambda m: WorkerKilled()))
    [ticket] = h.keys("tickets/")  # claimed, nothing committed: the lease will bring it back
    assert b'"state":"claimed"' in (h.storage.get(ticket) or pytest.fail()).body


def test_a_handler_past_the_timeout_fails_and_the_rest_is_released() -> None:
    # GIVEN a queue whose invocations last 10 s, and a ticket whose first handler takes 14 s
    h = Harness(settings=QueueSettings(visibility_timeout=10, timeout=10, batch_size=10))
    for body in ("slow", "next"):
        h.queue.enqueue(body)
    h.tick()
    deadline = h.clock.now_ms() + 10_000
    slow = Recorder(fail=lambda m: h.clock.sleep(14) if m.body == "slow" else None)
    # WHEN a worker runs it with that time (Lambda's remaining time, or the local runtime's)
    [work] = h.work(slow, remaining_ms=lambda: max(deadline - h.clock.now_ms(), 0))
    # THEN that delivery failed as Lambda would have ended it, and "next" did not start
    assert [(o.id, o.kind) for o in work.outcomes] == [
        (slow.seen[0].id, "retry"),
        (work.outcomes[1].id, "release"),
    ]
    assert work.outcomes[0].error == (
        "HandlerTimeout: the handler was still running when the invocation's timeout (10 s) ran out"
    )
    # AND both are handled later: "slow" at attempt 2, "next" at attempt 1
    handler = Recorder()
    h.drain(handler)
    assert sorted((m.body, m.attempt) for m in handler.seen) == [("next", 1), ("slow", 2)]


def test_a_handler_within_the_timeout_is_done() -> None:
    h = Harness(settings=QueueSettings(visibility_timeout=10, timeout=10))
    h.queue.enqueue("quick")
    h.tick()
    deadline = h.clock.now_ms() + 10_000
    handler = Recorder(fail=lambda m: h.clock.sleep(9.999))
    [work] = h.work(handler, remaining_ms=lambda: max(deadline - h.clock.now_ms(), 0))
    assert [o.kind for o in work.outcomes] == ["done"]


def test_a_timeout_shorter_than_the_time_margin_still_runs_handlers() -> None:
    # GIVEN a queue with a 2 s timeout: less than the worker's usual 5 s safety margin
    h = Harness(settings=QueueSettings(visibility_timeout=2, timeout=2))
    h.queue.enqueue("x")
    h.tick()
    handler = Recorder()
    # WHEN a fresh invocation (2 s left) works the ticket, THEN the handler runs
    [work] = h.work(handler, remaining_ms=lambda: 2_000)
    assert [o.kind for o in work.outcomes] == ["done"] and handler.bodies() == ["x"]


def test_local_context_enforces_the_timeout_and_stopping_times_out_nothing() -> None:
    stop = threading.Event()
    running = LocalContext(60, stop)
    expired = LocalContext(0, stop)
    assert running.get_remaining_time_in_millis() > 50_000
    assert expired.get_remaining_time_in_millis() == 0
    stop.set()
    # Stopping: under any margin, so nothing new starts, yet not 0, which is a timeout.
    assert running.get_remaining_time_in_millis() == 1
    assert expired.get_remaining_time_in_millis() == 0


def test_the_local_runtime_keeps_its_one_worker_through_exiting_handlers() -> None:
    # GIVEN one worker thread and five messages whose handler calls sys.exit() the first time
    storage = MemoryStorage()
    queue = Queue("jobs", storage=storage)
    queue.enqueue_many(range(5))
    attempts: list[int] = []

    def handle(message: Message) -> None:
        attempts.append(message.attempt)
        if message.attempt == 1:
            sys.exit(1)

    # WHEN the runtime drains the queue (the timeout only bounds a failing run)
    summary = run_local(
        {"jobs": handle},
        storage=storage,
        workers=1,
        drain=True,
        overrides={"backoff_base": 0.01, "backoff_cap": 0.05},
        timeout=60,
    )
    # THEN every message ran twice and was done, on the same single worker
    assert summary.drained and summary.errors == 0
    assert sorted(attempts) == [1] * 5 + [2] * 5
    assert (summary.queues["jobs"].processed, summary.queues["jobs"].retried) == (5, 5)
