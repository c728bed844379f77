"""Unit: `Puller` finds pending tickets for a worker nobody invoked, at a bounded cost."""

from __future__ import annotations

from harness import CountingStorage, Harness, Recorder
from s3queue.contract.settings import QueueSettings
from s3queue.working.pull import TRUST_MS, Puller


def test_a_puller_finds_pending_tickets_and_a_worker_claims_them() -> None:
    # GIVEN three published tickets whose invocations were lost
    h = Harness(settings=QueueSettings(batch_size=1))
    for i in range(3):
        h.queue.enqueue(i)
    h.tick()
    h.invocations.clear()
    puller = Puller(h.storage, h.queue.keys)
    # WHEN a worker pulls two and processes them
    payloads = puller.poll(2)
    assert len(payloads) == 2
    handler = Recorder()
    for payload in payloads:
        assert h.worker.process(payload, handler).status == "committed"
    # THEN they ran; the third is still there for the next poll
    assert sorted(handler.bodies()) in ([0, 1], [0, 2], [1, 2])
    assert len(puller.poll(5)) == 1


def test_a_claimed_ticket_is_read_once_until_it_changes() -> None:
    h = Harness(settings=QueueSettings(batch_size=1))
    h.queue.enqueue("x")
    h.tick()
    [payload] = h.invocations
    counted = CountingStorage(h.storage)
    puller = Puller(counted, h.queue.keys)  # type: ignore[arg-type]
    polls: list[tuple[int, dict[str, int]]] = []

    def handler(message: object) -> None:
        # WHEN another worker holds the ticket (its handler runs), a puller polls twice
        for _ in range(2):
            polls.append((len(puller.poll(5)), counted.reset()))

    assert h.new_worker("w2").process(payload, handler).status == "committed"
    # THEN the first poll read it (one GET) and took nothing; the second did not read it again
    assert polls == [(0, {"LIST": 1, "GET": 1}), (0, {"LIST": 1})]


def test_a_poll_with_no_room_costs_nothing() -> None:
    h = Harness()
    counted = CountingStorage(h.storage)
    assert Puller(counted, h.queue.keys).poll(0) == []  # type: ignore[arg-type]
    assert counted.reset() == {}


def test_pending_tickets_are_taken_a_partition_at_a_time() -> None:
    # GIVEN four pending tickets of partition "big", then one of "small", nobody invoked
    h = Harness(settings=QueueSettings(batch_size=1, max_in_flight_tickets=8))
    for i in range(4):
        h.queue.enqueue(f"big-{i}", partition="big")
    h.tick()
    h.queue.enqueue("small-0", partition="small")
    h.clock.advance(1)  # the leader lists the partitions once a second: it finds "small"
    h.tick()
    h.invocations.clear()
    counted = CountingStorage(h.storage)
    puller = Puller(counted, h.queue.keys)  # type: ignore[arg-type]

    def bodies(payloads: list[dict[str, object]]) -> list[object]:
        handler = Recorder()
        for payload in payloads:
            assert h.worker.process(payload, handler).status == "committed"
        return handler.bodies()

    # WHEN workers with two free threads poll, and then again
    first = bodies(puller.poll(2))
    assert counted.reset() == {"LIST": 1, "GET": 5}
    second = bodies(puller.poll(2))
    # THEN the small partition's only ticket is in the first two, not behind the backlog,
    # and a pending ticket already read is not read again
    assert first == ["big-0", "small-0"]
    assert second == ["big-1", "big-2"]
    assert counted.reset() == {"LIST": 1}


def test_an_offer_not_taken_is_offered_again_at_once_and_a_refused_one_later() -> None:
    h = Harness(settings=QueueSettings(batch_size=1))
    h.queue.enqueue("x")
    h.tick()
    h.invocations.clear()
    puller = Puller(h.storage, h.queue.keys, h.clock)
    [payload] = puller.poll(1)
    assert puller.poll(1) == []  # offered: not again while unchanged
    puller.forget(payload)  # the pool had no thread for it after all
    assert [p["ticket"] for p in puller.poll(1)] == [payload["ticket"]]
    h.clock.advance(2)  # a ticket nobody claimed (fenced, or its seal pending) comes back
    assert [p["ticket"] for p in puller.poll(1)] == [payload["ticket"]]


def test_a_ticket_this_process_works_is_never_read_by_its_own_polls() -> None:
    # GIVEN a ticket this process's pool is working (its ETag changes with each write)
    h = Harness(settings=QueueSettings(batch_size=1))
    h.queue.enqueue("x")
    h.tick()
    [payload] = h.invocations
    counted = CountingStorage(h.storage)
    puller = Puller(counted, h.queue.keys)  # type: ignore[arg-type]
    polls: list[tuple[int, dict[str, int]]] = []

    def handler(message: object) -> None:
        polls.append((len(puller.poll(5, busy={payload["ticket"]})), counted.reset()))

    # WHEN the puller polls while the claim is held
    assert h.worker.process(payload, handler).status == "committed"
    # THEN the poll listed, read nothing and took nothing
    assert polls == [(0, {"LIST": 1})]


def test_a_learnt_ticket_is_taken_without_a_request_while_trusted() -> None:
    # GIVEN two tickets the coordinator published while no thread of this process was free
    h = Harness(settings=QueueSettings(batch_size=1))
    h.queue.enqueue("a")
    h.queue.enqueue("b")
    h.tick()
    first, second = h.invocations
    counted = CountingStorage(h.storage)
    puller = Puller(counted, h.queue.keys, h.clock)  # type: ignore[arg-type]
    puller.learn(first)
    puller.learn(second)
    # WHEN a thread frees up at once, and another after the trust has passed
    assert [p["ticket"] for p in puller.take(1)] == [first["ticket"]]
    assert not puller.stale()
    h.clock.advance(TRUST_MS / 1000)
    # THEN the first costs no request; the second is not taken unconfirmed, a LIST confirms
    # it with no GET, and a worker claims it
    assert counted.reset() == {}
    assert puller.take(1) == [] and puller.stale()
    assert [p["ticket"] for p in puller.poll(1)] == [second["ticket"]]
    assert counted.reset() == {"LIST": 1}
    assert h.worker.process(second, Recorder()).status == "committed"


def test_a_learnt_ticket_claimed_elsewhere_is_dropped_by_the_next_list() -> None:
    h = Harness(settings=QueueSettings(batch_size=1))
    h.queue.enqueue("a")
    h.tick()
    [payload] = h.invocations
    puller = Puller(h.storage, h.queue.keys, h.clock)
    puller.learn(payload)
    # WHEN another process claims and finishes it before this one's next LIST
    assert h.new_worker("w2").process(payload, Recorder()).status == "committed"
    h.clock.advance(TRUST_MS / 1000)
    # THEN the LIST drops it: nothing is offered
    assert puller.poll(1) == [] and not puller.stale()


def test_a_poll_counts_the_tickets_others_work_and_the_loop_waits_less_for_them() -> None:
    from s3queue.local.pulling import PULL_BUSY, PULL_IDLE, PULL_SEEN, next_delay

    # GIVEN a ticket claimed by another process, and one this process works
    h = Harness(settings=QueueSettings(batch_size=1))
    h.queue.enqueue("x")
    h.queue.enqueue("y")
    h.tick()
    mine, theirs = h.invocations
    puller = Puller(h.storage, h.queue.keys)
    seen: list[int] = []

    def handler(message: object) -> None:
        puller.poll(5, busy={mine["ticket"]})
        seen.append(puller.others)

    outer = h.new_worker("w2").process(theirs, lambda m: h.worker.process(mine, handler))
    assert outer.status == "committed"
    # THEN the poll made while both were claimed counted the other's only
    assert seen == [1]
    puller.poll(5)
    assert puller.others == 0  # both applied: nothing listed
    # AND a loop backs off to PULL_SEEN, not PULL_IDLE, while others work the queue's tickets
    delays, delay = [], PULL_BUSY
    for _ in range(6):
        delay = next_delay(delay, found=False, busy_elsewhere=True)
        delays.append(delay)
    assert max(delays) == PULL_SEEN < PULL_IDLE
    assert next_delay(PULL_IDLE, found=False, busy_elsewhere=True) == PULL_SEEN
    assert next_delay(PULL_SEEN, found=False, busy_elsewhere=False) == 2 * PULL_SEEN
    assert next_delay(PULL_IDLE, found=False, busy_elsewhere=False) == PULL_IDLE
    assert next_delay(PULL_IDLE, found=True, busy_elsewhere=False) == PULL_BUSY


def test_a_pending_ticket_that_changed_was_claimed_and_costs_no_get() -> None:
    # GIVEN a ticket a puller knows pending (it offered it; its thread was not free after all)
    h = Harness(settings=QueueSettings(batch_size=1))
    h.queue.enqueue("x")
    h.tick()
    [payload] = h.invocations
    counted = CountingStorage(h.storage)
    puller = Puller(counted, h.queue.keys)  # type: ignore[arg-type]
    assert len(puller.poll(1)) == 1
    puller.forget(payload)
    counted.reset()
    polls: list[dict[str, int]] = []

    def handler(message: object) -> None:
        polls.append((puller.poll(1), counted.reset())[1])

    # WHEN another worker claims it while the puller polls
    assert h.new_worker("w2").process(payload, handler).status == "committed"
    # THEN the claim was inferred (only a claim writes a pending ticket): a LIST, no GET
    assert polls == [{"LIST": 1}]


def test_a_claimed_ticket_is_read_again_only_once_its_lease_may_have_run_out() -> None:
    h = Harness(settings=QueueSettings(batch_size=1, visibility_timeout=30))
    h.queue.enqueue("x")
    h.tick()
    [payload] = h.invocations
    counted = CountingStorage(h.storage)
    puller = Puller(counted, h.queue.keys, h.clock)  # type: ignore[arg-type]
    polls: list[dict[str, int]] = []

    def poll() -> None:
        polls.append((puller.poll(1), counted.reset())[1])

    # GIVEN a ticket the puller read claimed by another worker (a 30 s lease), which then
    # commits, its apply held back (so the ticket stays, changed)
    claimer = h.new_worker("w2")
    kept: list[object] = []
    claimer.behind = type("Keep", (), {"submit": lambda _, key, job: kept.append(job)})()
    assert claimer.process(payload, lambda message: poll()).status == "committed"
    # WHEN the puller polls within the lease, and after it
    poll()
    h.clock.advance(31)
    poll()
    poll()
    # THEN it read it claimed, not again within the lease; after it once more (committed:
    # never claimable again, so never read again)
    assert polls == [{"LIST": 1, "GET": 1}, {"LIST": 1}, {"LIST": 1, "GET": 1}, {"LIST": 1}]
    assert len(kept) == 1


def test_a_poll_reads_its_new_tickets_at_once() -> None:
    import threading
    from collections.abc import Callable
    from typing import Any

    from s3queue.common.concurrency import Threads, in_order
    from s3queue.local.pool import WorkerPool
    from s3queue.local.pulling import PULL_READS, PullLoop

    # GIVEN three published tickets nobody was invoked with
    h = Harness(settings=QueueSettings(batch_size=1))
    for i in range(3):
        h.queue.enqueue(i)
    h.tick()
    batches: list[int] = []

    def run_all(jobs: list[Callable[[], Any]]) -> list[Any]:
        batches.append(len(jobs))
        return in_order(jobs)

    puller = Puller(h.storage, h.queue.keys, run_all=run_all)
    # WHEN a puller polls
    assert len(puller.poll(5)) == 3
    # THEN its three GETs were handed over together, not one after another
    assert batches == [3]
    # AND the local pull loop reads them on threads of its own
    loop = PullLoop(h.storage, "s3queue", ["q"], WorkerPool(lambda p: None, 1), threading.Event())
    reads = loop.pullers["q"].run_all
    assert isinstance(reads, Threads) and reads.size == PULL_READS > 1
