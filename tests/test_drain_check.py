"""The local runtime's drain check trusts its pull loop's fresh listing (monitor.watch)."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from s3queue.local import monitor
from s3queue.local.pool import WorkerPool
from s3queue.local.pulling import PullLoop
from s3queue.operations import admin
from s3queue.producing.producer import Queue
from s3queue.protocol.keys import QueueKeys
from s3queue.storage import MemoryStorage


class Idle:
    """A runtime whose threads are idle and whose queue never drains; counts its checks."""

    def __init__(self, listed: bool) -> None:
        self.stop = threading.Event()
        self.pool = WorkerPool(lambda payload: None, 1)
        self.listed, self.checks = listed, 0

    def stats(self) -> dict[str, admin.Stats]:
        self.checks += 1
        return {}

    def snapshot(self, stats: dict[str, admin.Stats]) -> dict[str, dict[str, int]]:
        return {}

    def drained(self, stats: dict[str, admin.Stats]) -> bool:
        return False

    def tickets_listed(self) -> bool:
        return self.listed


@pytest.mark.parametrize("listed", [True, False])
def test_a_drain_check_counts_the_queue_only_when_the_listing_shows_no_tickets(
    listed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(monitor, "FULL_CHECK", 60.0)
    runtime = Idle(listed)
    # WHEN an idle runtime watches for the end for a second (a check is due every 0.25 s)
    assert not monitor.watch(runtime, True, None, 1.0, 1.0, time.monotonic())
    # THEN while its pull loop lists tickets, it counted the queue once (then trusts the LIST)
    if listed:
        assert runtime.checks == 1
    else:
        assert runtime.checks >= 2


def test_the_pull_loop_tells_fresh_tickets_of_others() -> None:
    storage = MemoryStorage()
    stop = threading.Event()
    pool = WorkerPool(lambda payload: None, 1)
    loop = PullLoop(storage, "s3queue", ["jobs"], pool, stop)
    assert not loop.tickets_listed()  # never listed
    loop.poll_once()
    assert not loop.tickets_listed()  # listed: no ticket
    Queue("jobs", storage=storage).enqueue("x")
    keys = QueueKeys("s3queue", "jobs")
    storage.put(keys.ticket(1, 1), b"{}")  # a ticket (malformed: not offered, still listed)
    loop.poll_once()
    assert loop.tickets_listed()
    assert not loop.tickets_listed(within_ms=-1)  # not fresh any more


def test_a_starting_pull_loop_polls_often_until_its_joining_time_is_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from s3queue.local import pulling

    # GIVEN a pull loop on a queue with no tickets yet, on a clock of the test's
    now = [100.0]
    monkeypatch.setattr(pulling, "time", SimpleNamespace(monotonic=lambda: now[0]))
    stop = threading.Event()
    pool = WorkerPool(lambda payload: None, 1)
    loop = PullLoop(MemoryStorage(), "s3queue", ["jobs"], pool, stop)
    polls: list[float] = []
    poll_once = loop.poll_once

    def polled() -> int:
        polls.append(now[0] - 100.0)
        return poll_once()

    class Waits:
        """The loop's waits pass on the test's clock, until 20 s have passed."""

        def clear(self) -> None:
            pass

        def wait(self, timeout: float) -> bool:
            now[0] += timeout
            if now[0] > 120.0:
                stop.set()
            return False

    monkeypatch.setattr(loop, "poll_once", polled)
    monkeypatch.setattr(pool, "freed", Waits())
    # WHEN it runs for 20 s of that clock, finding nothing
    loop.run()
    # THEN in its first PULL_JOINING seconds it waited at most PULL_SEEN between polls
    gaps = [b - a for a, b in itertools.pairwise(polls)]
    joining = [g for a, g in zip(polls, gaps, strict=False) if a < pulling.PULL_JOINING]
    assert polls[0] == 0.0 and max(joining) <= pulling.PULL_SEEN
    # AND then backed off to PULL_IDLE as before: 5 polls more than the ramp's 7 in 20 s, once
    assert gaps[-1] == pulling.PULL_IDLE and len(polls) == 12
