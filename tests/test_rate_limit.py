"""Rate limits: a window's budget of handler starts, planned by the leader, kept by workers."""

from __future__ import annotations

from collections import Counter

import pytest
from harness import Harness
from s3queue.common.clock import FakeClock
from s3queue.contract.settings import QueueSettings
from s3queue.dispatching.limits import WINDOW_MS, RateWindow
from s3queue.errors import ConfigError
from s3queue.message import Message
from s3queue.protocol.permits import Permit
from s3queue.protocol.tickets import Ticket
from s3queue.storage.base import Storage

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


def test_slow_handlers_release_what_their_window_cannot_start() -> None:
    """A ticket whose handlers outlast its window starts no more: the rest is released
    untouched (no attempt counted) and goes out in a later window."""
    h = _limited(batch_size=10)
    for i in range(20):
        h.queue.enqueue({"n": i})
    handler = Starts(h.clock, seconds=0.3)
    _run(h, handler)
    assert sorted(m.body["n"] for _, m in handler.at) == list(range(20))
    assert all(m.attempt == 1 for _, m in handler.at)
    assert max(handler.per_window().values()) <= LIMIT
    assert h.kinds("release")  # some did miss their window


def test_a_new_leader_spends_nothing_of_the_windows_its_predecessor_may_have_used() -> None:
    window = RateWindow(LIMIT, skew_ms=2_000)
    now = 1_700_000_000_100
    assert window.open(now) == (now - 100, 0)
    # windows that start before the first tick + one window + the skew: the predecessor's
    assert window.open(now + 3_200)[1] == 0
    start, budget = window.open(now + 3_700)  # under 250 ms left: it plans into the next
    assert budget == LIMIT and start == now - 100 + 4_000
    window.spend(7)
    assert window.open(now + 3_950) == (start, 3)
    assert window.open(now + 4_700) == (start + WINDOW_MS, LIMIT)


def test_permits_are_stored_in_the_ticket_and_bound_each_batch() -> None:
    window = RateWindow(LIMIT, skew_ms=0, blocked_until_ms=0)
    start, budget = window.open(5_000)
    assert budget == LIMIT
    assert [p.starts for p in window.permits([4, 4, 4], start)] == [4, 4, 2]
    ticket = Ticket("q", 1, 2, [], created_ms=0, permit=Permit(5_000, 6_000, 3))
    assert Ticket.decode(ticket.encode("t")).permit == Permit(5_000, 6_000, 3)
    assert (
        "permit"
        not in Ticket.decode(Ticket("q", 1, 2, [], 0).encode("t")).to_payload("k", "e")["doc"]
    )
    assert Permit(5_000, 6_000, 3).refuses(6_000, 0) == "rate window over"
    assert Permit(5_000, 6_000, 3).refuses(5_500, 3) == "rate limit"
    assert Permit(5_000, 6_000, 3).refuses(5_500, 2) is None
    assert Permit(5_000, 6_000, 3).wait_ms(4_800) == 200


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
