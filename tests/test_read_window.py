"""The worker reads a ticket's objects ahead of its handler in windows of `READ_WINDOW`, which
its `READ_AHEAD` threads share (a thread takes the next object as its last GET returns)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness import Harness, Recorder
from s3queue.common.concurrency import in_order
from s3queue.contract.settings import QueueSettings
from s3queue.working.readahead import READ_AHEAD, READ_WINDOW

from bench.simkernel import Kernel


def test_a_large_ticket_is_read_in_windows_of_read_window() -> None:
    """A ticket of 300 single messages: after the lease and its first object (read together
    before the claim), windows of `READ_WINDOW` objects, the last one what is left."""
    assert READ_WINDOW > READ_AHEAD
    h = Harness(settings=QueueSettings(batch_size=300, max_batch_size=300))
    for i in range(300):
        h.queue.enqueue(i)
    h.tick()
    calls: list[int] = []

    def recording(jobs: list[Callable[[], Any]]) -> list[Any]:
        calls.append(len(jobs))
        return in_order(jobs)

    h.worker.read_ahead = recording
    handler = Recorder()
    h.work(handler)
    assert len(handler.seen) == 300
    assert calls == [2, READ_WINDOW, READ_WINDOW, 299 - 2 * READ_WINDOW]


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
