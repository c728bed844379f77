"""The worker reads a ticket's objects ahead of its handler, at most `READ_WINDOW` objects ahead,
on its `READ_AHEAD` threads (a thread takes the next object as its last GET returns); each
message's handler waits for its own object's read only (`readahead.Stream`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from harness import Harness, Recorder
from s3queue.common.clock import FakeClock
from s3queue.common.concurrency import Batched, Threads, in_order, is_done, wait_any
from s3queue.contract.settings import QueueSettings
from s3queue.message import Message
from s3queue.storage import MemoryStorage
from s3queue.storage.base import Object
from s3queue.working.claim import Claim
from s3queue.working.guard import Guard
from s3queue.working.readahead import READ_AHEAD, READ_WINDOW

from bench.simkernel import Kernel


def test_a_large_ticket_is_read_at_most_read_window_objects_ahead() -> None:
    """A ticket of two windows and a bit of single messages, on a `RunAll` that only runs
    lists (`Batched`): the lease and the first `READ_WINDOW` objects are read together before
    the claim (an invoked ticket's reads start before it is claimed), then the reads submitted
    while the handler moved on run together when the first of them is wanted: `READ_WINDOW`
    objects at a time, the last run what is left."""
    assert READ_WINDOW > READ_AHEAD
    n = 2 * READ_WINDOW + 44
    h = Harness(settings=QueueSettings(batch_size=n, max_batch_size=n))
    for i in range(n):
        h.queue.enqueue(i)
    h.tick()
    calls: list[int] = []

    def recording(jobs: list[Callable[[], Any]]) -> list[Any]:
        calls.append(len(jobs))
        return in_order(jobs)

    h.worker.read_ahead = recording
    handler = Recorder()
    h.work(handler)
    assert len(handler.seen) == n
    assert calls == [1 + READ_WINDOW, READ_WINDOW, n - 2 * READ_WINDOW]


def test_the_simulated_pool_runs_at_most_its_size_at_once() -> None:
    """The AWS simulation's `Kernel.pool` is production's `Threads(size)`: 10 jobs of 10 ms on
    4 lanes take 30 ms of virtual time (3 rounds), never more than 4 at once, results in order."""
    kernel = Kernel()
    running, most, out = [0], [0], []

    def job(i: int) -> Callable[[], int]:
        def body() -> int:
            running[0] += 1
            most[0] = max(most[0], running[0])
            kernel.wait(10.0, "job")
            running[0] -= 1
            return i

        return body

    def main() -> None:
        start = kernel.local_ms()
        out.append(kernel.pool(4)([job(i) for i in range(10)]))
        out.append(kernel.local_ms() - start)

    kernel.spawn(main, at_ms=kernel.now, name="main", role="test")
    kernel.run(kernel.now + 1_000)
    kernel.stop()
    assert out[0] == list(range(10))
    assert most[0] == 4
    assert 30 <= out[1] < 34  # three rounds of 10 ms, joins at 1 ms resolution


class Gated(MemoryStorage):
    """Memory storage whose GET of one key waits until `opened` is set (or 10 s pass)."""

    def __init__(
        self, gated_key: Callable[[str], bool], order: list[str], clock: FakeClock
    ) -> None:
        super().__init__(clock)
        self.gated_key, self.order = gated_key, order
        self.opened = threading.Event()

    def get(self, key: str, *, if_match: str | None = None) -> Object | None:
        if self.gated_key(key):
            if not self.opened.wait(10):
                self.order.append("gate timed out")
            found = super().get(key, if_match=if_match)
            self.order.append("slow GET returned")
            return found
        return super().get(key, if_match=if_match)


def gated_ticket(count: int, gated: int) -> tuple[Harness, Gated, list[str]]:
    """One ticket of `count` single messages (0 .. count-1), published, whose `gated`-th
    object's GET waits for the gate; the worker reads ahead on production's threads."""
    clock = FakeClock()
    order: list[str] = []
    keys: list[str] = []
    storage = Gated(lambda key: key in keys, order, clock)
    h = Harness(settings=QueueSettings(batch_size=count), storage=storage, clock=clock)
    for i in range(count):
        h.queue.enqueue(i)
    keys.append(sorted(h.keys("msg/"))[gated])  # a ticket's refs are in the LIST's key order
    h.tick()
    h.worker.read_ahead = Threads(READ_AHEAD, "test-read")
    return h, storage, order


def test_a_handler_starts_when_its_own_object_is_read_not_its_windows_slowest() -> None:
    """On production's threads, the first messages' handlers run while a later object's GET is
    still out: the sixth object's GET waits for the second handler, which (read in windows)
    would have waited for it (the gate would time out first)."""
    h, storage, order = gated_ticket(20, 5)
    handled: list[Message] = []

    def handler(message: Message) -> None:
        handled.append(message)
        order.append(f"handler {len(handled)}")
        if len(handled) == 2:
            storage.opened.set()

    h.work(handler)
    assert len(handled) == 20
    assert order.index("handler 2") < order.index("slow GET returned")
    assert "gate timed out" not in order


class GatedClaim(MemoryStorage):
    """Memory storage whose conditional PUT of a ticket (the claim) waits until the GETs of
    `wanted` message objects have started (or 10 s pass)."""

    def __init__(self, wanted: int, order: list[str], clock: FakeClock) -> None:
        super().__init__(clock)
        self.wanted, self.order, self.started = wanted, order, 0
        self.lock, self.reads = threading.Lock(), threading.Event()

    def get(self, key: str, *, if_match: str | None = None) -> Object | None:
        if "/msg/" in key:
            with self.lock:
                self.started += 1
                if self.started >= self.wanted:
                    self.reads.set()
        return super().get(key, if_match=if_match)

    def put(self, key: str, body: bytes, **kwargs: Any) -> str:
        if "/tickets/" in key and kwargs.get("if_match") and not self.order:
            self.order.append("claim" if self.reads.wait(10) else "claim before the reads")
        return super().put(key, body, **kwargs)


def test_an_invoked_tickets_objects_are_read_while_it_is_claimed() -> None:
    """An invoked ticket's first objects are read while the lease is read and the ticket is
    claimed, not after the claim: the claim's PUT waits here until the GETs of all 8 objects
    started (read after the claim, they would wait for it, and the gate would time out)."""
    clock = FakeClock()
    order: list[str] = []
    storage = GatedClaim(8, order, clock)
    h = Harness(settings=QueueSettings(batch_size=8), storage=storage, clock=clock)
    for i in range(8):
        h.queue.enqueue(i)
    h.tick()
    h.worker.read_ahead = Threads(READ_AHEAD, "test-read")
    handler = Recorder()
    h.work(handler)
    assert sorted(handler.bodies()) == list(range(8))
    assert order == ["claim"]


def test_batched_runs_what_was_submitted_together_and_drops_what_was_cancelled() -> None:
    runs: list[int] = []

    def recording(jobs: list[Callable[[], Any]]) -> list[Any]:
        runs.append(len(jobs))
        return in_order(jobs)

    submit = Batched(recording)
    done: list[int] = []
    pending = [submit(lambda i=i: done.append(i) or i) for i in range(4)]  # type: ignore[func-returns-value]
    assert pending[3].cancel()
    assert [p.result() for p in pending[:3]] == [0, 1, 2]
    assert runs == [3] and done == [0, 1, 2]
    assert not pending[0].cancel()  # done: too late


def test_batched_raises_a_crash_where_the_run_was_and_keeps_the_rest_for_later() -> None:
    """A crash point inside the list stops the run (the process died there); the jobs after it
    are not run by that run."""

    class Died(BaseException):
        pass

    def crash() -> int:
        raise Died

    ran: list[int] = []
    submit = Batched(in_order)
    first = submit(lambda: ran.append(0) or 0)  # type: ignore[func-returns-value]
    submit(crash)
    last = submit(lambda: ran.append(2) or 2)  # type: ignore[func-returns-value]
    with pytest.raises(Died):
        first.result()
    assert ran == [0]
    assert first.result() == 0
    with pytest.raises(Died):
        last.result()  # the crash is still first in line
    assert ran == [0]


def test_the_simulated_lanes_hand_out_each_result_as_its_job_returns() -> None:
    """`Kernel.pool(n).submit` is Executor.submit in virtual time: the first result is there
    when its job returned, not when the slowest of the jobs submitted with it did."""
    kernel = Kernel()
    seen: list[tuple[int, float]] = []

    def job(i: int, ms: float) -> Callable[[], int]:
        def body() -> int:
            kernel.wait(ms, "job")
            return i

        return body

    def main() -> None:
        start = kernel.local_ms()
        lanes = kernel.pool(4)
        pending = [lanes.submit(job(i, 100.0 if i == 0 else 10.0)) for i in range(6)]
        for p in reversed(pending):
            seen.append((p.result(), kernel.local_ms() - start))

    kernel.spawn(main, at_ms=kernel.now, name="main", role="test")
    kernel.run(kernel.now + 1_000)
    kernel.stop()
    assert [i for i, _ in seen] == [5, 4, 3, 2, 1, 0]
    assert seen[0][1] == 20.0  # job 5 ran second on a lane: two rounds of 10 ms
    assert seen[-1][1] == 100.0  # the slow one, on its own lane


def test_threads_that_share_a_worker_share_more_read_lanes_and_the_client_has_room() -> None:
    """One walk (a Lambda's) reads `READ_AHEAD` objects at once; the local runtime's threads
    share one worker per queue, so its read pool grows with them, and so does the client's
    connection pool the runtime asks for."""
    from s3queue.local.console import CLI_POOL
    from s3queue.local.runtime import LOCAL_COORDINATION, connections
    from s3queue.working.readahead import (
        READ_LANES_MAX,
        READ_LANES_MIN,
        READ_LANES_PER_THREAD,
        read_lanes,
        read_pool,
    )

    assert read_lanes(1) == read_lanes(4) == READ_LANES_MIN
    assert read_lanes(16) == 16 * READ_LANES_PER_THREAD > READ_LANES_MIN
    assert read_lanes(64) == READ_LANES_MAX == read_lanes(16)
    assert read_pool(16).size == read_lanes(16)
    assert connections(1, 16, LOCAL_COORDINATION) - connections(1, 4, LOCAL_COORDINATION) >= (
        read_lanes(16) - read_lanes(4)
    )
    assert connections(4, 128, LOCAL_COORDINATION) <= CLI_POOL  # the command line's client


def test_a_slow_get_holds_back_no_ungrouped_message_behind_it() -> None:
    """Ungrouped library messages start in the order their objects' GETs return: the second
    object's GET waits here until the other seven messages' handlers ran (in ref order, they
    would wait for it, and the gate would time out first)."""
    h, storage, order = gated_ticket(8, 1)
    handled: list[int] = []

    def handler(message: Message) -> None:
        handled.append(message.body)
        if len(handled) == 7:
            storage.opened.set()

    h.work(handler)
    assert "gate timed out" not in order
    assert sorted(handled) == list(range(8)) and handled[-1] == 1
    assert h.keys("msg/") == []


def test_grouped_or_plain_put_messages_keep_their_order() -> None:
    """A FIFO group's messages, and a plain PUT's (whose group may be in its body), are walked
    in the ticket's order whatever returns first (walk.py, `_unordered`)."""
    from s3queue.working.walk import Walk

    def unordered(h: Harness) -> list[tuple[int, bool]]:
        """Each ticket's number of refs, and whether its walk may go out of order."""
        h.tick()
        found = []
        for payload in h.invocations:
            ticket = h.worker.start._ticket(payload, str(payload["ticket"]))
            assert ticket is not None
            claim = Claim(h.worker, str(payload["ticket"]), *ticket)
            walk = Walk(h.worker, claim, Guard(Recorder(), None, 60), None, None)
            found.append((len(claim.ticket.refs), walk._unordered()))
        return sorted(found)

    plain = Harness()
    plain.queue.enqueue(1)
    plain.queue.enqueue(2)
    assert unordered(plain) == [(2, True)]
    grouped = Harness()
    grouped.queue.enqueue(1, group="g")
    grouped.queue.enqueue(2, group="g")
    assert unordered(grouped) == [(2, False)]
    inbox = Harness()
    inbox.storage.put(inbox.queue.keys.inbox + "from-another-service.json", b'{"n": 2}')
    assert unordered(inbox) == [(1, False)]


def test_wait_any_returns_when_the_first_job_returns_in_real_and_virtual_time() -> None:
    """concurrency.py's `wait_any`: on threads (Futures), on the AWS simulation's lanes (in
    virtual time: 10 ms, not the slower job's 50), and on `Batched` (it runs them all)."""
    gate = threading.Event()
    threads = Threads(2, "test-any")
    slow, quick = threads.submit(lambda: gate.wait(10)), threads.submit(lambda: 2)
    wait_any([slow, quick])
    assert is_done(quick) and not is_done(slow)
    gate.set()
    assert slow.result() is True

    kernel = Kernel()
    out: list[float] = []

    def main() -> None:
        lanes = kernel.pool(2)
        start = kernel.local_ms()
        jobs = [lanes.submit(lambda ms=ms: kernel.wait(ms, "job")) for ms in (50.0, 10.0)]
        wait_any(jobs)
        out.append(kernel.local_ms() - start)
        out.append(float(is_done(jobs[1]) and not is_done(jobs[0])))
        jobs[0].result()

    kernel.spawn(main, at_ms=kernel.now, name="main", role="test")
    kernel.run(kernel.now + 1_000)
    kernel.stop()
    assert 10 <= out[0] < 12 and out[1] == 1.0

    ran: list[int] = []
    submit = Batched(in_order)
    batched = [submit(lambda i=i: ran.append(i)) for i in range(3)]
    wait_any(batched)
    assert ran == [0, 1, 2] and all(is_done(p) for p in batched)
