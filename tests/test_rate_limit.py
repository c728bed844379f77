"""Rate limits: a window's budget of handler starts, paced by the leader, taken by workers."""

from __future__ import annotations

from collections import Counter

import pytest
from harness import QUEUE, Crash, Harness
from s3queue.common.clock import FakeClock
from s3queue.common.concurrency import in_order
from s3queue.contract.settings import QueueSettings
from s3queue.dispatching.limits import WINDOW_MS
from s3queue.errors import ConfigError
from s3queue.message import Message
from s3queue.protocol import budgets
from s3queue.protocol.permits import Permit
from s3queue.protocol.tickets import Ticket
from s3queue.storage.base import Storage
from s3queue.storage.memory import MemoryStorage
from s3queue.working.worker import Worker

LIMIT = 10


class Starts:
    """A handler that records when each message started, by the worker's clock."""

    def __init__(self, clock: FakeClock, seconds: float = 0.01) -> None:
        self.clock, self.seconds = clock, seconds
        self.at: list[tuple[int, Message]] = []

    def __call__(self, message: Message) -> None:
        self.at.append((self.clock.now_ms(), message))
        self.clock.advance(self.seconds)

    def per_window(self) -> Counter[int]:
        return Counter(at // WINDOW_MS for at, _ in self.at)


def _limited(storage: Storage | None = None, **settings: float) -> Harness:
    values = {"rate_limit": LIMIT, "batch_size": 4, **settings}
    return Harness(storage=storage, settings=QueueSettings.from_mapping(values))


def _dispatch(h: Harness) -> None:
    """Tick a second apart until the leader dispatches (a new leader may wait a window)."""
    for _ in range(10):
        h.tick()
        if h.invocations:
            return
        h.clock.advance(1)
    raise AssertionError("nothing dispatched")


def _run(h: Harness, handler: Starts, rounds: int = 400) -> None:
    """Tick and work, the clock moving a tenth of a second a round, until all is done."""
    for _ in range(rounds):
        h.tick()
        h.work(handler)
        stats = h.queue.stats()
        if not (stats["pending"] or stats["delayed"] or stats["in_flight"]):
            return
        h.clock.advance(0.1)
    raise AssertionError(f"not drained: {h.queue.stats()}")


def test_no_window_starts_more_than_the_limit(storage: Storage) -> None:
    h = _limited(storage)
    ids = {h.queue.enqueue({"n": i}) for i in range(45)}
    handler = Starts(h.clock)
    _run(h, handler)
    # every message ran once, on its first attempt: a held message is no delivery
    assert sorted(m.id for _, m in handler.at) == sorted(ids)
    assert all(m.attempt == 1 for _, m in handler.at) and h.queue.stats()["dead"] == 0
    windows = handler.per_window()
    assert max(windows.values()) <= LIMIT, windows
    assert len(windows) >= 45 // LIMIT  # and it was the limit that spread them


def test_a_pack_larger_than_the_window_is_started_a_window_at_a_time() -> None:
    h = _limited()
    h.queue.enqueue_many({"n": i} for i in range(25))
    handler = Starts(h.clock)
    _run(h, handler)
    assert sorted(m.body["n"] for _, m in handler.at) == list(range(25))
    assert all(m.attempt == 1 for _, m in handler.at)
    assert max(handler.per_window().values()) <= LIMIT


def test_slow_handlers_take_their_later_starts_in_later_windows() -> None:
    """A ticket whose handlers outlast the window it took its starts in takes more in the
    next windows: nothing is released for want of a permit, nothing is counted."""
    h = _limited(batch_size=10)
    for i in range(20):
        h.queue.enqueue({"n": i})
    handler = Starts(h.clock, seconds=0.3)
    _run(h, handler)
    assert sorted(m.body["n"] for _, m in handler.at) == list(range(20))
    assert all(m.attempt == 1 for _, m in handler.at)
    assert max(handler.per_window().values()) <= LIMIT
    assert not h.kinds("release")


def test_a_ticket_no_worker_reaches_in_its_second_loses_nothing() -> None:
    """The liveness bug of permits issued at dispatch: a ticket claimed seconds after it was
    published was released whole and dispatched again (a copy per message, a group's head
    cycling forever). A permit is now taken where the handler starts."""
    h = _limited(batch_size=4)
    for i in range(8):
        h.queue.enqueue({"n": i})
    _dispatch(h)
    assert len(h.invocations) == 2
    h.clock.advance(5)  # the workers are busy elsewhere for seconds
    handler = Starts(h.clock)
    results = h.work(handler)
    assert [r.count("done") for r in results] == [4, 4]
    assert not h.kinds("release")
    assert all(m.attempt == 1 for _, m in handler.at)
    assert h.queue.stats()["pending"] == 0


class DiesWaiting(FakeClock):
    """A worker's clock whose first wait kills the worker (a process killed while it waits)."""

    def sleep(self, seconds: float) -> None:
        raise Crash("killed while waiting for a window")


def test_a_worker_killed_waiting_for_its_window_counts_no_delivery() -> None:
    """The earlier engineer's note: the claim notes the first message as running, so a worker
    killed while it then waited for its window counted a delivery that never started its
    handler. Starts are now taken, and waited for, before the claim."""
    h = _limited(batch_size=4)
    h.clock.advance(0.8)  # late in a second: the leader used to plan into the next one
    h.queue.enqueue({"n": 1})
    _dispatch(h)
    # the second's budget is spent by other workers
    budgets.take(h.storage, h.queue.keys.budget(None, whole=True), LIMIT, LIMIT, h.clock.now_ms())
    dying = DiesWaiting(h.clock.now_ms())
    worker = Worker(h.storage, QUEUE, settings=h.settings, clock=dying, read_ahead=in_order)
    with pytest.raises(Crash):
        h.work(Starts(h.clock), worker=worker)
    handler = Starts(h.clock)
    for _ in range(60):  # the ticket is re-invoked (or reaped) and run
        h.clock.advance(1)
        h.tick()
        h.work(handler)
        if handler.at:
            break
    [(_, message)] = handler.at
    assert message.attempt == 1 and not message.redelivered


def test_two_workers_never_take_more_than_the_limit_of_one_window(storage: Storage) -> None:
    clock = FakeClock()
    key = "s3queue/jobs/budgets/~queue"
    grants = [budgets.take(storage, key, LIMIT, 4, clock.now_ms()) for _ in range(4)]
    assert [g.starts for g in grants] == [4, 4, 2, 0]
    budgets.give_back(storage, key, grants[0], 3)  # a lost claim returns what it did not use
    assert budgets.take(storage, key, LIMIT, 4, clock.now_ms()).starts == 3
    clock.advance(1)
    assert budgets.take(storage, key, LIMIT, 4, clock.now_ms()).starts == 4  # a new window


def test_a_counter_ahead_of_the_worker_is_kept_unless_far_ahead() -> None:
    storage, clock = MemoryStorage(), FakeClock(1_700_000_000_000)
    key = "s3queue/jobs/budgets/~queue"
    ahead = budgets.take(storage, key, LIMIT, 9, clock.now_ms() + 2_000)
    behind = budgets.take(storage, key, LIMIT, 9, clock.now_ms())
    assert (behind.window_ms, behind.starts) == (ahead.window_ms, 1)  # it waits for that one
    budgets.take(storage, key, LIMIT, 9, clock.now_ms() + 60_000)  # a clock a minute fast
    assert budgets.take(storage, key, LIMIT, 9, clock.now_ms()).starts == 9


def test_permits_are_stored_in_the_ticket() -> None:
    ticket = Ticket("q", 1, 2, [], created_ms=0, permit=Permit(3, 2, 7))
    assert Ticket.decode(ticket.encode("t")).permit == Permit(3, 2, 7)
    assert (
        "permit"
        not in Ticket.decode(Ticket("q", 1, 2, [], 0).encode("t")).invocation("k", "e")["doc"]
    )


def test_a_queue_without_a_limit_gives_no_permits() -> None:
    h = Harness()
    h.queue.enqueue("x")
    h.tick()
    [payload] = h.invocations
    assert "permit" not in payload["doc"]


def test_rate_limit_settings_are_checked() -> None:
    assert QueueSettings.from_mapping({"rate_limit": 5}).rate_limit == 5
    with pytest.raises(ConfigError, match="rate_limit"):
        QueueSettings.from_mapping({"rate_limit": -1})
    with pytest.raises(ConfigError, match="visibility_timeout"):
        QueueSettings.from_mapping({"rate_limit": 5, "visibility_timeout": 0.5})


def test_higher_priorities_take_the_window_first() -> None:
    """Priorities and a rate limit compose: lanes are planned highest first, so a second's
    budget goes to priority 9 before priority 0 however long the low backlog."""
    h = _limited(rate_limit=5, batch_size=5)
    for i in range(20):
        h.queue.enqueue({"n": i})
    urgent = {h.queue.enqueue({"urgent": i}, priority=9) for i in range(5)}
    handler = Starts(h.clock)
    _run(h, handler)
    first = [m.id for _, m in sorted(handler.at, key=lambda at: at[0])[:5]]
    assert set(first) == urgent
    assert max(handler.per_window().values()) <= 5
