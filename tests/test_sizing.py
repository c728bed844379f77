"""Elastic tickets (sizing.py): `batch_size` while slots are free, grown under a backlog,
bounded by the pace tickets finish at, by `max_batch_size`, and never in the last slot."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from harness import Harness, Recorder
from s3queue.contract.settings import QueueSettings
from s3queue.dispatching.sizing import (
    GROWN_BYTES,
    GROWTH,
    QUEUED_MS,
    SLOT_SHARE,
    Pace,
    Sizes,
    least,
    most,
    sizes,
)
from s3queue.errors import ConfigError
from s3queue.message import Message


def refs_per_ticket(h: Harness) -> list[int]:
    return [len(p["doc"]["refs"]) for p in h.invocations]


def test_pace_is_unknown_until_a_ticket_finished_and_weighs_large_tickets_more() -> None:
    pace = Pace()
    assert pace.ms_per_message is None
    pace.finished(10, 1000)
    assert pace.ms_per_message == pytest.approx(100.0)
    pace.finished(1000, 2000)  # a large fast ticket moves the ratio more than a small one
    assert pace.ms_per_message is not None and pace.ms_per_message < 10
    pace.finished(0, 5000)  # an empty ticket says nothing about the pace
    assert pace.ms_per_message < 10


def test_no_backlog_or_no_pace_yet_means_batch_size() -> None:
    settings = QueueSettings()  # batch 10, 32 slots, 1,000 most, 2 s
    pace = Pace()
    assert sizes(settings, pace, ready=5000, free=32, live_grown=0) == Sizes(10, 10, 0)
    pace.finished(10, 100)  # 10 ms a message: 2 s is 200 messages
    assert sizes(settings, pace, ready=300, free=32, live_grown=0) == Sizes(10, 10, 0)
    grown = sizes(settings, pace, ready=10_000, free=32, live_grown=0)
    assert grown == Sizes(10, 200, 31)  # the last slot stays a quick lane
    assert [grown.limit(i) for i in (0, 30, 31)] == [(200, GROWN_BYTES)] * 2 + [(10, None)]


def test_a_grown_ticket_is_the_backlog_spread_over_the_lanes_within_the_bounds() -> None:
    settings = QueueSettings(max_in_flight_tickets=8, max_batch_size=500)
    fast, slow = Pace(), Pace()
    fast.finished(100, 10)  # 0.1 ms a message
    slow.finished(10, 20_000)  # 2 s a message
    assert sizes(settings, fast, ready=700, free=8, live_grown=0).grown_size == 100  # 700 / 7
    assert most(settings, fast) == 500  # max_batch_size
    assert most(settings, slow) == 10  # never below batch_size
    assert sizes(settings, slow, ready=9000, free=8, live_grown=0).grown_size == 10
    # grown tickets still live use up lanes; the quick lane is never one of them
    assert sizes(settings, fast, ready=9000, free=3, live_grown=5).grown == 2
    assert sizes(settings, fast, ready=9000, free=1, live_grown=6).grown == 1
    assert sizes(settings, fast, ready=9000, free=1, live_grown=7).grown == 0


def test_settings_bound_the_growth() -> None:
    with pytest.raises(ConfigError, match="max_batch_size"):
        QueueSettings(batch_size=20, max_batch_size=10)
    with pytest.raises(ConfigError, match="ticket_seconds"):
        QueueSettings(ticket_seconds=0)
    pace = Pace()
    pace.finished(10, 100)  # 10 ms a message
    assert most(QueueSettings(ticket_seconds=40, timeout=60), pace) == 1000  # 30 s: max 1,000
    assert most(QueueSettings(ticket_seconds=40, timeout=2, visibility_timeout=1), pace) == 100
    assert QueueSettings.from_mapping({"ticket_seconds": 5, "max_batch_size": 50}).delta() == {
        "ticket_seconds": 5.0,
        "max_batch_size": 50,
    }


def test_a_backlog_grows_tickets_once_one_finished_and_each_message_runs_once() -> None:
    h = Harness(settings=QueueSettings(max_in_flight_tickets=4))
    for i in range(400):
        h.queue.enqueue(i)
    assert h.tick().dispatched == 40  # no pace yet: 4 tickets of 10
    assert refs_per_ticket(h) == [10, 10, 10, 10]
    handler = Recorder()
    h.work(handler)
    h.clock.advance(0.1)
    h.tick()
    assert refs_per_ticket(h) == [120, 120, 120]  # the 360 left over 3 lanes, not the 4th
    h.drain(handler)
    assert Counter(handler.bodies()) == Counter(range(400))


def test_packed_objects_share_a_grown_ticket() -> None:
    h = Harness(settings=QueueSettings(max_in_flight_tickets=4))
    for _ in range(4):
        h.queue.enqueue_many(range(100))
    h.tick()
    assert refs_per_ticket(h) == [1, 1, 1, 1]  # larger than batch_size: alone
    h.work(Recorder())
    for _ in range(20):
        h.queue.enqueue_many(range(100))
    h.clock.advance(0.1)
    h.tick()
    assert refs_per_ticket(h)[0] > 1  # 2,000 messages over 3 lanes: several packs a ticket
    handler = Recorder()
    h.drain(handler)
    assert len(handler.seen) == 2000


def test_slow_handlers_keep_tickets_at_batch_size() -> None:
    h = Harness(settings=QueueSettings(max_in_flight_tickets=4))

    def slow(message: Message) -> None:
        h.clock.advance(1.0)  # a second a message: a 10-message ticket outlasts 2 s

    for i in range(200):
        h.queue.enqueue(i)
    for _ in range(3):
        h.tick()
        assert set(refs_per_ticket(h)) == {10}
        h.work(slow)


def test_max_batch_size_equal_to_batch_size_turns_growth_off() -> None:
    h = Harness(settings=QueueSettings(max_in_flight_tickets=2, max_batch_size=10))
    for i in range(100):
        h.queue.enqueue(i)
    for _ in range(3):
        h.tick()
        assert refs_per_ticket(h) == [10, 10]
        h.work(Recorder())


def test_under_a_deep_backlog_the_last_slot_takes_a_small_ticket() -> None:
    h = Harness(settings=QueueSettings(max_in_flight_tickets=4, max_batch_size=200))
    for i in range(2000):
        h.queue.enqueue(i)
    h.tick()
    handler = Recorder()
    h.work(handler)
    h.tick()
    assert refs_per_ticket(h) == [200, 200, 200, 10]
    h.work(handler)
    h.tick()
    assert refs_per_ticket(h) == [200, 200, 200, 10]


def test_a_grown_ticket_holds_at_most_grown_bytes_of_objects() -> None:
    h = Harness(settings=QueueSettings(max_in_flight_tickets=4))
    body = "x" * (GROWN_BYTES // 8)  # a bit over an eighth of the bound, as stored
    for i in range(100):
        h.queue.enqueue(body if i >= 40 else i)
    h.tick()
    h.work(Recorder())
    h.tick()
    sizes_ = [sum(r["size"] for r in p["doc"]["refs"]) for p in h.invocations]
    grown, quick = sizes_[:3], sizes_[3]  # the quick lane's 10 have no bound on bytes
    assert len(h.invocations) == 4 and max(grown) <= GROWN_BYTES < quick


def test_tickets_waiting_for_workers_do_not_grow() -> None:
    """More tickets in flight than workers (the local runtime): a ticket nobody claimed for
    QUEUED_MS means the workers are short, not the tickets: no growth."""
    pace = Pace()
    pace.finished(10, 100)
    settings = QueueSettings()
    assert sizes(settings, pace, ready=10_000, free=8, live_grown=0, queued=1) == Sizes(10, 10, 0)
    h = Harness(settings=QueueSettings(max_in_flight_tickets=8, max_batch_size=100))
    for i in range(3000):
        h.queue.enqueue(i)
    h.tick()
    handler = Recorder()
    h.work(handler)  # pace known
    h.tick()
    assert refs_per_ticket(h)[0] == 100  # grown
    first = h.invocations[:1]
    h.invocations[1:] = []  # the other tickets' workers are done; the first one's never came
    h.work(handler)
    h.invocations[:] = first
    h.clock.advance(QUEUED_MS / 1000)  # still unclaimed
    h.tick()
    assert set(refs_per_ticket(h)[1:]) == {10}


def test_a_fitted_pace_sizes_tickets_in_one_step() -> None:
    """A ticket's life is a fixed part plus a part per message: once tickets of different
    sizes have finished, the next ones are sized to `ticket_seconds` from the line through
    them, not to about twice the last ones (the ratio alone), within GROWTH x their mean."""
    settings = QueueSettings(ticket_seconds=2.0, max_batch_size=1000)
    pace = Pace()
    for n in (10, 40, 10, 40):  # 1 s fixed, 2 ms a message
        pace.finished(n, 1000 + 2 * n)
    fixed, per = pace.fit() or (0.0, 0.0)
    assert fixed == pytest.approx(1000) and per == pytest.approx(2)
    by_ratio = int(2000 / pace.ms_per_message)  # what the ratio alone gives: about twice
    assert by_ratio < 70
    assert most(settings, pace) == int(GROWTH * pace.mean_messages)  # the line says 500
    for _ in range(20):  # tickets of the fitted size keep the line: (2000 - 1000) / 2
        for n in (200, 400):
            pace.finished(n, 1000 + 2 * n)
    assert 495 <= most(settings, pace) <= 500


def test_a_pace_of_one_size_is_not_fitted() -> None:
    """Tickets all of one size say nothing about the part per message: the ratio decides."""
    pace = Pace()
    for _ in range(5):
        pace.finished(10, 1000)
    assert pace.fit() is None
    assert most(QueueSettings(ticket_seconds=2.0), pace) in (19, 20)  # 2 s at 100 ms a message
    noisy = Pace()
    noisy.finished(10, 2000)
    noisy.finished(40, 1000)  # larger and quicker: a line with no positive part per message
    assert noisy.fit() is None


def test_a_new_leader_sizes_tickets_at_once_from_its_predecessors_pace() -> None:
    """The pace travels in the lease (`LeaseDoc.pace`): a coordinator in another process or
    Lambda container that takes over after a release sizes its first tickets as its
    predecessor would have, instead of at `batch_size` until one of its own has finished (a
    handover every minute on Lambda, with a backlog building meanwhile)."""
    h = Harness(settings=QueueSettings(max_in_flight_tickets=4))
    for i in range(400):
        h.queue.enqueue(i)
    h.tick()
    handler = Recorder()
    h.work(handler)
    h.clock.advance(0.1)
    h.tick()  # learns the pace from the first four tickets, grows the next ones
    h.work(handler)
    h.clock.advance(0.1)
    h.coordinator.release()
    for i in range(400, 800):
        h.queue.enqueue(i)
    successor = h.new_coordinator("c2")
    assert successor.tick().leader
    assert refs_per_ticket(h) and min(refs_per_ticket(h)[:-1]) > 10
    fresh = Harness(settings=QueueSettings(max_in_flight_tickets=4))  # no predecessor: 10 each
    for i in range(400):
        fresh.queue.enqueue(i)
    fresh.tick()
    assert refs_per_ticket(fresh) == [10, 10, 10, 10]
    h.coordinator = successor
    h.drain(handler)
    assert Counter(handler.bodies()) == Counter(range(800))


def test_a_pace_is_adopted_only_by_a_pace_that_saw_nothing_and_only_if_it_makes_sense() -> None:
    old = Pace()
    old.finished(10, 1000)
    old.finished(40, 1600)
    state = old.state()
    fresh = Pace()
    assert fresh.state() == ()
    assert fresh.adopt(state)
    assert fresh.ms_per_message == old.ms_per_message and fresh.fit() == old.fit()
    assert not fresh.adopt(Pace().state())  # has its own now
    for nonsense in ((), (1.0, 2.0), (1.0, -5.0, 1.0, 1.0, 1.0), (1.0, 0.0, 1.0, 0.0, 0.0)):
        assert not Pace().adopt(nonsense)


def _fitted(fixed_ms: int, per_ms: int) -> Pace:
    """A pace whose recent tickets (100 and 400 messages) lived `fixed_ms` + `per_ms` each."""
    pace = Pace()
    for _ in range(10):
        for n in (100, 400):
            pace.finished(n, fixed_ms + per_ms * n)
    return pace


def test_tickets_are_no_smaller_than_the_slots_keep_up_with_at_the_arrival_rate() -> None:
    """Issue 22's p99 at half capacity: a tick that spread what it found over every free slot
    left the next ticks none, and messages waited for a slot. `rate / n` tickets a second hold
    ``rate * (fixed / n + per)`` slots; `least` keeps that within SLOT_SHARE of them."""
    settings = QueueSettings(max_in_flight_tickets=8, max_batch_size=1000)
    pace = _fitted(500, 2)  # a ticket lives 0.5 s plus 2 ms a message
    largest = most(settings, pace)
    assert 745 <= largest <= 750  # (2 s - 0.5 s) / 2 ms
    spare = SLOT_SHARE * 8 - 1000 * 0.002
    assert least(settings, pace, 1000.0) == math.ceil(1000 * 0.5 / spare) == 139
    assert least(settings, pace, None) == 10  # no rate measured yet
    assert least(settings, pace, 50.0) == 10  # a slow trickle: batch_size
    assert least(settings, pace, 3000.0) == largest  # past what the slots can do
    assert least(settings, pace, 1000.0, queued=1) == 10  # workers short, not slots
    assert least(settings, Pace(), 1000.0) == 10  # no line through the pace yet
    # 300 ready at 1,000 a second: three tickets of 100, not seven of 43
    assert sizes(settings, pace, ready=300, free=8, live_grown=0, rate=1000.0) == Sizes(10, 100, 3)
    assert sizes(settings, pace, ready=300, free=8, live_grown=0) == Sizes(10, 43, 7)
    # ...but one for each folder with work, if there are more
    assert sizes(settings, pace, ready=300, free=8, live_grown=0, rate=1000.0, folders=5) == Sizes(
        10, 60, 5
    )


def test_a_tick_keeps_free_slots_for_the_next_ones_but_serves_every_partition() -> None:
    # GIVEN a leader that knows five partitions, whose tickets live 0.5 s plus 2 ms a message,
    # ticking every 0.3 s
    h = Harness(settings=QueueSettings(max_in_flight_tickets=8, max_batch_size=1000))
    for p in range(5):
        h.queue.enqueue(p, partition=f"p{p}")
    handler = Recorder()
    h.drain(handler)

    def burst(partitions: list[str | None]) -> list[int]:
        h.tick()  # sees the last tickets finished
        h.coordinator.pace = _fitted(500, 2)
        h.invocations.clear()
        h.clock.advance(0.3)
        for i in range(300):  # 1,000 a second since the last tick
            h.queue.enqueue(i, partition=partitions[i % len(partitions)])
        h.tick()
        sizes_ = refs_per_ticket(h)
        h.drain(handler)
        return sizes_

    # WHEN 300 messages arrived in one folder since the last tick
    # THEN it makes three tickets of 100, leaving five slots free
    assert burst([None]) == [100, 100, 100]
    # AND when they arrived in five partitions, each gets a ticket that takes all of its
    assert burst([f"p{p}" for p in range(5)]) == [60] * 5
    assert len(handler.bodies()) == 605
