"""Unit + S3: a group's order does not depend on its producers' clocks (issue 19.6).

Producers key grouped messages by S3's time, learnt from the ``Date`` of S3's answers, and wait
out its uncertainty before an enqueue returns (storage/servertime.py), so producers whose wall
clocks are 10 minutes apart still key a group in the order their enqueues happened.
"""

from __future__ import annotations

from typing import Any

import pytest
from harness import QUEUE, Harness, Recorder
from s3queue.common.clock import Clock, FakeClock, SystemClock
from s3queue.contract.settings import QueueSettings
from s3queue.producing.producer import Queue
from s3queue.protocol.keys import QueueKeys
from s3queue.storage.base import Storage
from s3queue.storage.s3 import S3Storage
from s3queue.storage.servertime import RESOLUTION_MS, ServerClock

TEN_MINUTES = 600_000
OFFSETS = [-TEN_MINUTES, TEN_MINUTES, -3_000, 0]


class Skewed:
    """A host's wall clock: the true one plus an offset."""

    def __init__(self, true: Clock, offset_ms: int) -> None:
        self.true, self.offset_ms = true, offset_ms

    def now_ms(self) -> int:
        return self.true.now_ms() + self.offset_ms

    def sleep(self, seconds: float) -> None:
        self.true.sleep(seconds)


class Answering:
    """A producer's view of the in-memory store: every call takes `latency_ms` of true time,
    and its answer tells the producer's `ServerClock` S3's time in whole seconds (``Date``)."""

    def __init__(self, inner: Storage, true: FakeClock, clock: ServerClock, latency_ms: int):
        self.inner, self.true, self.clock, self.latency_ms = inner, true, clock, latency_ms

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def answered(*args: Any, **kwargs: Any) -> Any:
            sent = self.clock.local_ms()
            self.true.advance(self.latency_ms / 2000)
            date = self.true.now_ms() // RESOLUTION_MS * RESOLUTION_MS
            try:
                return attr(*args, **kwargs)
            finally:
                self.true.advance(self.latency_ms / 2000)
                self.clock.observe(date, sent, self.clock.local_ms())

        return answered


def _producer(h: Harness, offset_ms: int, latency_ms: int = 30) -> Queue:
    clock = ServerClock(Skewed(h.clock, offset_ms))
    storage = Answering(h.storage, h.clock, clock, latency_ms)
    clock.probe = lambda: storage.head("probe")  # as S3Storage wires it
    return Queue(QUEUE, storage=storage, clock=clock)  # type: ignore[arg-type]


def test_producers_ten_minutes_apart_keep_their_group_in_order() -> None:
    # GIVEN four producers whose wall clocks are 10 min behind, 10 min ahead, 3 s behind, true
    h = Harness(settings=QueueSettings(batch_size=3))
    producers = [_producer(h, offset) for offset in OFFSETS]
    # WHEN they take turns enqueueing one group, each enqueue returning before the next starts,
    # while the leader (true clock) ticks and its workers run
    handler = Recorder()
    for i in range(24):
        producers[i % len(producers)].enqueue(i, group="g")
        h.clock.advance(0.2)
        if i % 5 == 0:
            h.tick()
            h.work(handler)
    h.drain(handler)
    # THEN the group ran in enqueue order, without waiting out anyone's skew
    assert handler.bodies() == list(range(24))
    assert h.clock.now_ms() - 1_700_000_000_000 < 120_000


def test_keys_follow_s3s_time_not_the_producers_clock() -> None:
    h = Harness()
    producer = _producer(h, -TEN_MINUTES)
    producer.enqueue("late clock", group="g")
    [key] = h.keys("msg/")
    sort_ms = producer.keys.parse_msg(key).sort_ms  # type: ignore[union-attr]
    assert abs(sort_ms - h.clock.now_ms()) <= RESOLUTION_MS + 100


def test_a_commit_wait_follows_a_single_answer_only() -> None:
    # One answer tells S3's time within a second: the first grouped enqueue may wait up to
    # that long; the interval narrows as answers arrive at other fractions of a second.
    h = Harness()
    producer = _producer(h, TEN_MINUTES, latency_ms=10)
    started = h.clock.now_ms()
    producer.enqueue(0, group="g")
    first = h.clock.now_ms() - started
    assert first <= RESOLUTION_MS + 100
    for i in range(1, 20):
        producer.enqueue(i, group="g")
    low, high = producer.clock.offsets()  # type: ignore[attr-defined]
    assert high - low < RESOLUTION_MS


@pytest.mark.s3
def test_producers_ten_minutes_apart_key_a_group_in_order_on_seaweedfs(
    shared_s3_client: Any, bucket: str
) -> None:
    # GIVEN producers on a real S3 server whose wall clocks are 10 min behind and 10 min ahead
    producers = []
    for offset in (-TEN_MINUTES, TEN_MINUTES):
        storage = S3Storage(shared_s3_client, bucket, sleep=lambda _: None)
        storage.server_clock.base = Skewed(SystemClock(), offset)
        producers.append(Queue(QUEUE, storage=storage))
    # WHEN they take turns enqueueing one group
    for i in range(8):
        producers[i % 2].enqueue(i, group="g")
    # THEN the keys (LIST order is dispatch order) follow the enqueues, at S3's time
    reader = S3Storage(shared_s3_client, bucket)
    keys = QueueKeys("s3queue", QUEUE)
    entries = reader.list(keys.msg).entries
    bodies = [_body(reader, e.key) for e in entries]
    assert bodies == list(range(8))
    for entry in entries:
        sort_ms = keys.parse_msg(entry.key).sort_ms  # type: ignore[union-attr]
        assert abs(sort_ms - entry.last_modified_ms) <= 3 * RESOLUTION_MS, entry


def _body(storage: Storage, key: str) -> Any:
    import json

    obj = storage.get(key)
    assert obj is not None
    return json.loads(obj.body)["messages"][0]["body"]


@pytest.mark.s3
def test_a_grouped_enqueue_costs_one_put_and_a_commit_wait_on_seaweedfs(
    s3_client: Any, bucket: str
) -> None:
    # The cost of ordering by S3's time, counted by request (a botocore hook): no request per
    # message beyond its PUT; a few HEADs per process while the interval narrows.
    sent: list[str] = []
    s3_client.meta.events.register(
        "before-send.s3", lambda request, **_: sent.append(request.method)
    )
    queue = Queue(QUEUE, storage=S3Storage(s3_client, bucket))
    for i in range(50):
        queue.enqueue(i, group="g")
    assert sent.count("PUT") == 50
    assert sent.count("HEAD") <= 8 and len(sent) == sent.count("PUT") + sent.count("HEAD")
    low, high = queue.writer.order.offsets()  # type: ignore[attr-defined]
    assert high - low <= 500  # the commit wait has shrunk to about two round trips


def test_the_bounds_kept_between_answers_are_those_of_every_sample_in_the_window() -> None:
    # GIVEN a ServerClock fed answers at random (some contradicting: S3's clock jumps), read
    # at times that go forward, sometimes back a little, and past the window
    from random import Random

    from s3queue.storage import servertime

    rng, base = Random(7), FakeClock(1_000_000)
    clock = ServerClock(base)
    for step in range(3_000):
        base.advance(rng.choice([0.001, 0.05, 1.0, 30.0, 200.0]))
        now = base.now_ms()
        if rng.random() < 0.6:
            served = now + (rng.choice([0, 0, 0, 1, 600]) * 1000) + rng.randrange(-900, 900)
            late = rng.choice([0, 0, 0, 0, 50, 700_000])  # an answer observed late, by a thread
            sent = now - late - rng.randrange(0, 300)
            clock.observe(served // 1000 * 1000, sent, now - late)
        asked = now - rng.choice([0, 0, 0, 5, 400, 250_000])
        # THEN each reading equals the bounds recomputed from every sample in the window
        with clock._lock:
            got = clock._bounds(asked)
            recent = [
                (lo, hi) for at, lo, hi in clock._samples if asked - at <= servertime.WINDOW_MS
            ]
        want = (max(lo for lo, _ in recent), min(hi for _, hi in recent)) if recent else None
        assert got == want, step


def _recomputed(clock: ServerClock, now: int) -> tuple[int, int] | None:
    from s3queue.storage.servertime import WINDOW_MS

    recent = [(lo, hi) for at, lo, hi in clock._samples if now - at <= WINDOW_MS]
    return (max(lo for lo, _ in recent), min(hi for _, hi in recent)) if recent else None


def test_the_bounds_widen_when_the_sample_that_set_one_is_pushed_out() -> None:
    from s3queue.storage.servertime import MAX_SAMPLES

    # GIVEN a full window whose oldest sample alone sets the lower bound
    base = FakeClock(1_000_000)
    clock = ServerClock(base)
    clock.observe(1_000_900, 1_000_000, 1_000_000)  # low 900: the tightest
    for i in range(1, MAX_SAMPLES):
        now = 1_000_000 + i
        clock.observe(now + 100, now - 10, now)  # low 100, high 1,110
    assert clock.offsets() == (900, 1_110)
    # WHEN one more answer pushes it out
    now = 1_000_000 + MAX_SAMPLES
    clock.observe(now + 100, now - 10, now)
    base.advance(0.1)
    # THEN the lower bound is the next tightest, as recomputed
    assert clock.offsets() == _recomputed(clock, base.now_ms()) == (100, 1_110)


def test_a_late_observation_leaves_the_window_on_its_own_time() -> None:
    from s3queue.storage.servertime import WINDOW_MS

    # GIVEN bounds from recent answers, then an answer received long ago observed now (a
    # thread that was descheduled), tighter than the rest
    base = FakeClock(1_000_000 + WINDOW_MS)
    clock = ServerClock(base)
    now = base.now_ms()
    clock.observe(now + 100, now - 10, now)
    early = now - WINDOW_MS + 1_000
    clock.observe(early + 500, early - 10, early)  # low 500, high 1,510
    assert clock.offsets() == (500, 1_110)
    # WHEN its own window has passed, though not the others'
    base.advance(2.0)
    # THEN it no longer counts
    assert clock.offsets() == _recomputed(clock, base.now_ms()) == (100, 1_110)
