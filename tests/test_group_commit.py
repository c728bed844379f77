"""Group commit (`producing.batching`): concurrent enqueues share one PUT; failures reach every
caller an object carried, and only them; explicit ids and groups keep their semantics."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from harness import CountingStorage, Harness, Recorder
from s3queue import InvalidArgument, MalformedMessage, Queue, StorageError
from s3queue.common.clock import FakeClock
from s3queue.contract.settings import QueueSettings
from s3queue.local.metering import RequestCounter
from s3queue.message import Message
from s3queue.producing.batching import MAX_WINDOW, GroupCommit
from s3queue.protocol.keys import new_id
from s3queue.protocol.records import decode_records, record_for
from s3queue.storage import MemoryStorage, Storage
from s3queue.storage.s3 import S3Storage
from test_budget import drain_costs

WAIT = MAX_WINDOW
"""Batches close by `max_messages` in these tests; the window only bounds a hang."""


class Outcomes:
    """Each caller's result: its id, or the exception its enqueue raised."""

    def __init__(self) -> None:
        self.ids: dict[int, str] = {}
        self.errors: dict[int, BaseException] = {}
        self.lock = threading.Lock()

    def call(self, n: int, enqueue: Callable[[], str]) -> None:
        try:
            result = enqueue()
        except Exception as exc:  # noqa: BLE001 - recorded for the test to judge
            with self.lock:
                self.errors[n] = exc
            return
        with self.lock:
            self.ids[n] = result


def concurrently(calls: list[Callable[[], str]]) -> Outcomes:
    """Start every call in its own thread and join them all."""
    outcomes = Outcomes()
    threads = [
        threading.Thread(target=outcomes.call, args=(n, call)) for n, call in enumerate(calls)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def objects(storage: Storage, queue: Queue) -> dict[str, list[Any]]:
    """Every message object of the queue: key -> its records."""
    found = {}
    for entry in storage.list(queue.keys.root + "msg/").entries:
        obj = storage.get(entry.key)
        assert obj is not None
        found[entry.key] = decode_records(obj.body)
    return found


def test_n_threads_share_one_put() -> None:
    # GIVEN 16 threads enqueueing through one group commit that closes at 16 messages
    storage = CountingStorage(MemoryStorage())
    queue = Queue("jobs", storage=storage)
    batch = GroupCommit(queue, window=WAIT, max_messages=16)
    # WHEN they all enqueue at once
    outcomes = concurrently([lambda n=n: batch.enqueue({"n": n}) for n in range(16)])
    # THEN one PUT carried all 16, and each caller got its own id
    assert outcomes.errors == {}
    assert storage.counts == {"PUT": 1}
    [(key, records)] = objects(storage, queue).items()
    assert key.endswith("~c16")
    assert sorted(r.body["n"] for r in records) == list(range(16))
    assert {r.id for r in records} == set(outcomes.ids.values())


def test_the_batch_is_drained_like_any_packed_object() -> None:
    h = Harness(settings=QueueSettings(batch_size=10))
    batch = h.queue.batching(window=WAIT, max_messages=5)
    outcomes = concurrently([lambda n=n: batch.enqueue(n) for n in range(5)])
    handler = Recorder()
    h.drain(handler)
    assert sorted(handler.bodies()) == list(range(5))
    assert {m.id for m in handler.seen} == set(outcomes.ids.values())


def test_a_lone_caller_waits_its_window_then_writes_alone() -> None:
    queue = Queue("jobs", storage=MemoryStorage())
    batch = queue.batching(window=0.0)
    first, second = batch.enqueue("a"), batch.enqueue("b")
    assert first != second and len(objects(queue.storage, queue)) == 2


def test_one_object_per_group_and_delay() -> None:
    # GIVEN one batch of ungrouped, grouped and delayed messages
    storage = CountingStorage(MemoryStorage())
    queue = Queue("jobs", storage=storage)
    batch = GroupCommit(queue, window=WAIT, max_messages=7)
    calls = [lambda n=n: batch.enqueue(n) for n in range(3)]
    calls += [lambda n=n: batch.enqueue(n, group="a") for n in range(2)]
    calls += [lambda: batch.enqueue("b", group="b"), lambda: batch.enqueue("late", delay=60)]
    before = queue.clock.now_ms()
    outcomes = concurrently(calls)
    assert outcomes.errors == {}
    # THEN four objects: the ungrouped, group a, group b, the delayed
    assert storage.counts["PUT"] == 4
    keys = {queue.keys.parse_msg(k): records for k, records in objects(storage, queue).items()}
    by_kind = {(k.group, k.sort_ms - before >= 60_000): len(r) for k, r in keys.items() if k}
    assert by_kind == {(None, False): 3, ("a", False): 2, ("b", False): 1, (None, True): 1}


def test_one_object_per_partition_with_each_message_s_attributes() -> None:
    # GIVEN one batch of messages for the default partition and two others, with attributes
    storage = CountingStorage(MemoryStorage())
    h = Harness(storage=storage)
    batch = GroupCommit(h.queue, window=WAIT, max_messages=5)
    calls = [lambda n=n: batch.enqueue(n, attributes={"n": str(n)}) for n in range(2)]
    calls += [lambda n=n: batch.enqueue(n, partition="acme", group="g") for n in range(2, 4)]
    calls += [lambda: batch.enqueue(4, partition="beta", attributes={"t": "b"})]
    assert concurrently(calls).errors == {}
    # THEN three objects, one in each partition's folder
    assert storage.counts["PUT"] == 3
    keys = h.queue.keys
    found = [keys.partition_of(e.key) for e in storage.list(keys.root).entries]
    assert sorted(found, key=str) == sorted([None, "acme", "beta"], key=str)
    # AND each message reaches its handler with its partition, group and own attributes
    handler = Recorder()
    h.drain(handler)
    got = {m.body: (m.partition, m.attributes, m.group) for m in handler.seen}
    assert got == {
        0: (None, {"n": "0"}, None),
        1: (None, {"n": "1"}, None),
        2: ("acme", {}, "g"),
        3: ("acme", {}, "g"),
        4: ("beta", {"t": "b"}, None),
    }


def test_explicit_ids_are_not_batched_and_stay_exactly_once() -> None:
    storage = CountingStorage(MemoryStorage())
    queue = Queue("jobs", storage=storage)
    batch = GroupCommit(queue, window=WAIT, max_messages=1000)
    assert batch.enqueue({"order": 1}, id="order-1") == "order-1"
    assert batch.enqueue({"order": 1}, id="order-1") == "order-1"
    # marker + message, then a repeat: marker refused, marker read, message refused
    assert storage.counts == {"PUT": 4, "GET": 1}
    [records] = objects(storage, queue).values()
    assert [(r.id, r.dedup) for r in records] == [("order-1", True)]


def test_bad_arguments_fail_in_their_caller_only() -> None:
    queue = Queue("jobs", storage=MemoryStorage(), max_message_bytes=1000)
    batch = GroupCommit(queue, window=0.0)
    with pytest.raises(InvalidArgument):
        batch.enqueue("x", delay=-1)
    with pytest.raises(InvalidArgument):
        batch.enqueue("x", group="")
    with pytest.raises(MalformedMessage):
        batch.enqueue("x" * 2000)
    with pytest.raises(MalformedMessage):
        batch.enqueue({"not": {1, 2}})
    assert objects(queue.storage, queue) == {}
    with pytest.raises(InvalidArgument):
        GroupCommit(queue, window=-1)
    with pytest.raises(InvalidArgument):
        GroupCommit(queue, max_messages=0)


def test_a_full_batch_is_written_in_objects_of_at_most_max_bytes() -> None:
    storage = CountingStorage(MemoryStorage())
    queue = Queue("jobs", storage=storage)
    body = "x" * 1000
    size = len(queue.writer.encode([record_for(new_id(), body, queue.clock.now_ms())])[0])
    batch = GroupCommit(queue, window=WAIT, max_messages=100, max_bytes=3 * size)
    outcomes = concurrently([lambda: batch.enqueue(body) for _ in range(6)])
    assert outcomes.errors == {} and storage.counts["PUT"] == 2
    assert sorted(len(r) for r in objects(storage, queue).values()) == [3, 3]


class Watched(GroupCommit):
    """Tells when a caller is in the batch: its leader holds the lock from joining to waiting."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.joined = threading.Event()

    def _join(self, entry: Any) -> Any:
        with self._lock:  # re-entrant, and released while the leader waits for its window
            self.joined.set()
            return super()._join(entry)


def test_flush_writes_a_waiting_batch_now() -> None:
    # GIVEN a caller waiting in a batch with a long window
    queue = Queue("jobs", storage=MemoryStorage())
    batch = Watched(queue, window=WAIT)
    caller = threading.Thread(target=batch.enqueue, args=("a",))
    with batch:
        caller.start()
        batch.joined.wait()
    # WHEN the context exits (flush) THEN the caller returns long before its window ends
    caller.join(timeout=WAIT / 2)
    assert not caller.is_alive() and len(objects(queue.storage, queue)) == 1


class Stop(BaseException):
    """Not an Exception: stops whatever thread it is raised in."""


class StoppingStorage(MemoryStorage):
    def put(self, *args: Any, **kwargs: Any) -> str:
        raise Stop


def test_a_leader_stopped_while_writing_leaves_nobody_waiting() -> None:
    # GIVEN a batch of 4 whose leader is stopped dead inside its PUT
    queue = Queue("jobs", storage=StoppingStorage())
    batch = GroupCommit(queue, window=WAIT, max_messages=4)
    stopped: list[int] = []

    def call(n: int) -> str:
        try:
            return batch.enqueue(n)
        except Stop:
            stopped.append(n)
            return ""

    outcomes = concurrently([lambda n=n: call(n) for n in range(4)])
    # THEN the leader sees its own stop, and the three others an error instead of a hang
    assert len(stopped) == 1 and len(outcomes.errors) == 3
    assert all("not acknowledged" in str(e) for e in outcomes.errors.values())


def test_a_group_keeps_its_order_in_and_across_batches() -> None:
    # GIVEN a group's batch of three in one object, then two more enqueued one at a time
    h = Harness(settings=QueueSettings(batch_size=10, backoff_base=1, backoff_cap=1))
    batch = h.queue.batching(window=WAIT, max_messages=3)
    concurrently([lambda n=n: batch.enqueue(n, group="g") for n in range(3)])
    [packed] = objects(h.storage, h.queue).values()
    order = [r.body for r in packed]
    lone = h.queue.batching(window=0.0)
    lone.enqueue(3, group="g")
    lone.enqueue(4, group="g")
    # WHEN the first message of the packed object fails once
    first = order[0]
    failed: list[Any] = []

    def fail_once(message: Message) -> BaseException | None:
        if message.body == first and not failed:
            failed.append(first)
            return ValueError("once")
        return None

    handler = Recorder(fail=fail_once)
    h.drain(handler)
    # THEN the group ran in enqueue order, the retry keeping its place
    assert handler.bodies() == [first, *order, 3, 4]


# --- on SeaweedFS, with injected faults --------------------------------------------------


@pytest.fixture
def s3_queue(s3_client: Any, bucket: str) -> Queue:
    """A queue whose storage retries without sleeping, on its own client (for injections)."""
    return Queue("jobs", storage=S3Storage(s3_client, bucket, sleep=lambda _: None))


@pytest.mark.s3
def test_n_threads_one_put_on_seaweedfs(s3_client: Any, s3_queue: Queue) -> None:
    counter = RequestCounter.attach(s3_client)
    batch = GroupCommit(s3_queue, window=WAIT, max_messages=16)
    outcomes = concurrently([lambda n=n: batch.enqueue({"n": n}) for n in range(16)])
    assert outcomes.errors == {} and len(set(outcomes.ids.values())) == 16
    assert counter.counts()["PUT"] == 1
    [records] = objects(s3_queue.storage, s3_queue).values()
    assert sorted(r.id for r in records) == sorted(outcomes.ids.values())


@pytest.mark.s3
def test_a_failed_put_raises_in_every_caller_it_carried(
    s3_client: Any, s3_queue: Queue, injector: Any
) -> None:
    # GIVEN S3 failing every PUT (500, past the storage's retries)
    injection = injector(s3_client, "PutObject", 500, "InternalError", times=1000)
    batch = GroupCommit(s3_queue, window=WAIT, max_messages=8)
    # WHEN 8 callers share a batch
    outcomes = concurrently([lambda n=n: batch.enqueue(n) for n in range(8)])
    # THEN each of them raises, and nothing was written
    assert outcomes.ids == {} and len(outcomes.errors) == 8
    assert all(isinstance(e, StorageError) for e in outcomes.errors.values())
    assert objects(s3_queue.storage, s3_queue) == {}
    injection.times = 0  # the server answers again: the next batch goes through
    again = concurrently([lambda n=n: batch.enqueue(n) for n in range(8)])
    assert again.errors == {} and len(objects(s3_queue.storage, s3_queue)) == 1


@pytest.mark.s3
def test_a_failure_reaches_only_the_callers_of_its_object(
    s3_client: Any, s3_queue: Queue, injector: Any
) -> None:
    # GIVEN a batch of two groups (two objects), and S3 refusing the first PUT it gets (a 400
    # is not retried)
    injector(s3_client, "PutObject", 400, "InvalidArgument", times=1)
    batch = GroupCommit(s3_queue, window=WAIT, max_messages=6)
    calls = [lambda n=n: batch.enqueue(n, group="a") for n in range(3)]
    calls += [lambda n=n: batch.enqueue(10 + n, group="b") for n in range(3)]
    outcomes = concurrently(calls)
    # THEN one group's three callers raised, the other's three returned and are durable
    failed = sorted(outcomes.errors)
    assert failed in ([0, 1, 2], [3, 4, 5])
    [records] = objects(s3_queue.storage, s3_queue).values()
    assert sorted(r.id for r in records) == sorted(outcomes.ids.values())


@pytest.mark.s3
@pytest.mark.parametrize(
    ("status", "code", "forward"),
    [(503, "SlowDown", False), (500, "InternalError", True)],
    ids=["throttled", "response-lost"],
)
def test_retried_and_lost_responses_still_acknowledge_every_caller_once(
    s3_client: Any, s3_queue: Queue, injector: Any, status: int, code: str, forward: bool
) -> None:
    # GIVEN a PUT throttled twice, or applied with its response lost
    injector(s3_client, "PutObject", status, code, times=2 if not forward else 1, forward=forward)
    batch = GroupCommit(s3_queue, window=WAIT, max_messages=8)
    outcomes = concurrently([lambda n=n: batch.enqueue(n) for n in range(8)])
    # THEN every caller returned, and its message is in the one object, once
    assert outcomes.errors == {}
    [records] = objects(s3_queue.storage, s3_queue).values()
    assert sorted(r.id for r in records) == sorted(outcomes.ids.values())


# --- the request budget ------------------------------------------------------------------

N = 100
BUDGETS = {
    # threads (each enqueueing N / threads messages one after another), batch size: requests
    10: {"PUT": 41, "GET": 21, "LIST": 6, "DELETE": 20, "HEAD": 0},
    50: {"PUT": 9, "GET": 5, "LIST": 6, "DELETE": 4, "HEAD": 0},
}
"""100 messages drained with batch_size 10: a ticket holds one packed object of 10 or 50."""


def under_load(threads: int) -> Callable[[Harness], None]:
    """`threads` callers, each enqueueing its share one after another through one group
    commit whose batches close at `threads` messages: every batch holds one from each."""

    def enqueue(h: Harness) -> None:
        batch = h.queue.batching(window=WAIT, max_messages=threads)

        def producer(t: int) -> str:
            each = N // threads
            return ",".join(batch.enqueue({"n": t * each + i}) for i in range(each))

        assert concurrently([lambda t=t: producer(t) for t in range(threads)]).errors == {}

    return enqueue


@pytest.mark.parametrize("threads", sorted(BUDGETS))
def test_requests_per_message_with_group_commit_in_memory(threads: int) -> None:
    counting = CountingStorage(MemoryStorage(FakeClock(start_ms=time.time_ns() // 1_000_000)))
    counts = drain_costs(counting, lambda: dict(counting.counts), under_load(threads))
    assert {k: counts.get(k, 0) for k in BUDGETS[threads]} == BUDGETS[threads]


@pytest.mark.s3
@pytest.mark.parametrize("threads", sorted(BUDGETS))
def test_requests_per_message_with_group_commit_on_s3(
    s3_client: Any, bucket: str, threads: int
) -> None:
    counter = RequestCounter.attach(s3_client)
    storage = S3Storage(s3_client, bucket)
    assert drain_costs(storage, counter.counts, under_load(threads)) == BUDGETS[threads]


def test_group_commit_budget_targets() -> None:
    assert sum(BUDGETS[10].values()) / N <= 0.9  # 0.88 requests per message (single: 2.69)
    assert sum(BUDGETS[50].values()) / N <= 0.3  # 0.25
