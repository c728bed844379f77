"""Unit + S3: expiry is judged by S3's time, so one host's bad clock stalls nobody (issue 19.7).

The store's clock (`MemoryStorage`'s, or SeaweedFS's own) stamps ``Last-Modified`` and answers
``Date``; each coordinator and worker reads its own clock, skewed against the store's.
"""

from __future__ import annotations

import pytest
from harness import QUEUE, Crash, Harness, Recorder
from s3queue.common.clock import Clock, SystemClock, ms
from s3queue.contract.settings import CoordinatorSettings, QueueSettings
from s3queue.dispatching.coordinator import Coordinator
from s3queue.protocol.lease import LeaderLease, read_lease
from s3queue.storage.base import S3_TIME_RESOLUTION_MS, Storage, written_ago

TEN_MINUTES = 600_000
TTL, VIS = 30.0, 20.0


class Skewed:
    """A host's clock: the true clock plus an offset (the test may change it)."""

    def __init__(self, true: Clock, offset_ms: int) -> None:
        self.true, self.offset_ms = true, offset_ms

    def now_ms(self) -> int:
        return self.true.now_ms() + self.offset_ms

    def sleep(self, seconds: float) -> None:
        self.true.sleep(seconds)


def _coordinator(h: Harness, owner: str, offset_ms: int) -> Coordinator:
    return Coordinator(
        h.storage,
        QUEUE,
        invoker=h.invocations.append,
        settings=h.settings,
        coordination=h.coordination,
        clock=Skewed(h.clock, offset_ms),
        owner=owner,
        listener=h.events.append,
    )


def _lease(storage: Storage, owner: str, clock: Clock) -> LeaderLease:
    return LeaderLease(
        storage, "q/coordinator", owner=owner, clock=clock, ttl_ms=ms(TTL), skew_ms=5_000
    )


def _harness() -> Harness:
    return Harness(
        settings=QueueSettings(visibility_timeout=VIS),
        coordination=CoordinatorSettings(lease_ttl=TTL, skew_tolerance=5.0),
    )


def _takeover_after(offset_ms: int) -> float:
    """Seconds of true time from a dead leader's last write until another takes over."""
    h = _harness()
    fast = _coordinator(h, "laptop", offset_ms)
    assert fast.tick().leader
    written = h.clock.now_ms()
    challenger = _coordinator(h, "lambda", 0)
    for _ in range(2000):  # the dead leader writes nothing more; the challenger ticks each 0.5 s
        if challenger.tick().leader:
            return (h.clock.now_ms() - written) / 1000
        h.clock.advance(0.5)
    raise AssertionError("never taken over")


def test_a_leader_ten_minutes_fast_that_dies_is_taken_over_after_about_its_ttl() -> None:
    # GIVEN a leader whose clock runs 10 minutes fast (a laptop's `s3queue dev`), WHEN it dies,
    # THEN a challenger with a true clock takes over ~TTL after its last write, not 640 s later
    waited = _takeover_after(TEN_MINUTES)
    assert TTL < waited <= TTL + S3_TIME_RESOLUTION_MS / 1000 + 0.5, waited


def test_a_leader_ten_minutes_slow_keeps_its_lease_for_its_ttl() -> None:
    # A slow holder's lease_until is in everyone's past at once: judged by it, a challenger would
    # take over a live leader immediately. By S3's time it lapses after the TTL, as any other.
    waited = _takeover_after(-TEN_MINUTES)
    assert TTL < waited <= TTL + S3_TIME_RESOLUTION_MS / 1000 + 0.5, waited


@pytest.mark.parametrize("worker_offset_ms", [TEN_MINUTES, -TEN_MINUTES])
def test_a_claim_by_a_skewed_worker_is_reaped_after_its_visibility_timeout(
    worker_offset_ms: int,
) -> None:
    # GIVEN a worker whose clock is 10 minutes off claims a ticket and dies mid-handler
    h = _harness()
    h.queue.enqueue("job")
    h.tick()
    worker_clock = Skewed(h.clock, worker_offset_ms)
    h.worker.clock = worker_clock
    with pytest.raises(Crash):
        h.work(Recorder(fail=lambda m: Crash()))
    claimed = h.clock.now_ms()
    # WHEN the leader (true clock) ticks every 0.5 s
    while not h.tick().reaped:
        h.clock.advance(0.5)
        assert h.clock.now_ms() - claimed < 120_000, "never reaped"
    # THEN the claim was reaped after its visibility timeout of S3 time, never before
    waited = (h.clock.now_ms() - claimed) / 1000
    assert VIS < waited <= VIS + S3_TIME_RESOLUTION_MS / 1000 + 0.5, waited
    h.worker.clock = h.clock
    handler = Recorder()
    h.work(handler)
    assert [(m.body, m.attempt) for m in handler.seen] == [("job", 2)]


def test_a_lease_written_by_an_older_version_is_judged_by_its_lease_until() -> None:
    # A lease document without a ttl (written before issue 19.7) keeps the old rule.
    h = _harness()
    lease = LeaderLease(
        h.storage, "q/coordinator", owner="old", clock=h.clock, ttl_ms=30_000, skew_ms=5_000
    )
    assert lease.ensure()
    assert lease.doc is not None
    lease.doc.ttl_ms = 0
    lease._ttl = 0
    assert lease._write(lease.doc)
    doc = read_lease(h.storage, "q/coordinator")
    assert doc is not None and doc.ttl_ms == 0
    assert not doc.lapsed(10**9, h.clock.now_ms(), 5_000)
    assert doc.lapsed(0, doc.lease_until_ms + 5_001, 5_000)


@pytest.mark.s3
def test_s3_answers_carry_its_time_and_a_slow_holder_is_not_taken_over_early(
    s3_storage: Storage,
) -> None:
    # GIVEN a real S3 server (SeaweedFS): its Date and Last-Modified reach the reader
    clock = SystemClock()
    slow = Skewed(clock, -TEN_MINUTES)
    holder = LeaderLease(
        s3_storage, "q/coordinator", owner="slow", clock=slow, ttl_ms=ms(TTL), skew_ms=5_000
    )
    assert holder.ensure()
    obj = s3_storage.get("q/coordinator")
    assert obj is not None and obj.served_ms and obj.last_modified_ms
    assert 0 <= obj.served_ms - obj.last_modified_ms <= 2 * S3_TIME_RESOLUTION_MS
    assert written_ago(obj.last_modified_ms, obj.served_ms, 0) <= S3_TIME_RESOLUTION_MS
    [entry] = s3_storage.list("q/").entries
    assert entry.served_ms >= entry.last_modified_ms
    head = s3_storage.head("q/coordinator")
    assert head is not None and head.served_ms >= head.last_modified_ms
    # WHEN a challenger with a true clock asks at once (the holder's lease_until is 10 min past)
    challenger = LeaderLease(
        s3_storage, "q/coordinator", owner="true", clock=clock, ttl_ms=ms(TTL), skew_ms=5_000
    )
    # THEN it does not take over: S3 says the lease was written a moment ago
    assert not challenger.ensure()
