"""Unit: lease expiry and redelivery, heartbeats, fencing, ambiguous writes, time-short release."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest
from harness import Crash, Harness, Recorder
from s3queue.common.clock import FakeClock
from s3queue.common.concurrency import in_order
from s3queue.contract.settings import CoordinatorSettings, QueueSettings
from s3queue.dispatching.coordinator import Coordinator, TickResult
from s3queue.dispatching.scan import Candidate
from s3queue.errors import Conflict, Consumed
from s3queue.message import Message
from s3queue.protocol.lease import PENDING, LeaseDoc, read_lease
from s3queue.storage import MemoryStorage

VIS = 30.0


def crash_on(*bodies: object) -> Recorder:
    remaining = list(bodies)

    def fail(m: Message) -> BaseException | None:
        if m.body in remaining:
            remaining.remove(m.body)
            return Crash()
        return None

    return Recorder(fail=fail)


def test_crashed_worker_lease_expires_and_message_is_redelivered_as_attempt_two() -> None:
    h = Harness(settings=QueueSettings(visibility_timeout=VIS))
    h.queue.enqueue("job")
    h.tick()
    handler = crash_on("job")
    with pytest.raises(Crash):
        h.work(handler)
    h.clock.advance(VIS)  # expired, but within the skew tolerance: not yet
    assert h.tick().reaped == 0
    h.clock.advance(h.coordination.skew_tolerance + 0.001)
    assert h.tick().reaped == 1
    [expire] = h.kinds("expire")
    assert expire.fields["owner"] == "w1"
    h.work(handler)
    assert [m.attempt for m in handler.seen] == [1, 2]
    assert h.keys("msg/") == [] and h.keys("tickets/") == []


def test_stale_worker_cannot_commit_after_reap() -> None:
    # GIVEN a worker whose handler outlives its lease while the coordinator reaps the ticket
    h = Harness(settings=QueueSettings(visibility_timeout=VIS))
    h.queue.enqueue("slow")
    h.tick()
    payload = h.invocations.pop()
    second = h.new_worker("w2")
    results = []

    def slow(m: Message) -> None:
        if m.attempt == 1:
            h.clock.advance(VIS + h.coordination.skew_tolerance + 1)
            assert h.tick().reaped == 1
            results.extend(h.work(Recorder(), worker=second))  # the redelivery completes

    # WHEN the first worker finishes and tries to commit
    first = h.worker.process(payload, slow)
    # THEN it is fenced: its commit is rejected and nothing is applied twice
    assert first.status == "lost"
    assert [r.status for r in results] == ["committed"]
    assert h.keys("msg/") == [] and h.queue.dead_letters() == []
    assert len(h.kinds("lease_lost")) == 1


def test_heartbeats_keep_a_long_ticket_alive_and_save_finished_work() -> None:
    h = Harness(settings=QueueSettings(visibility_timeout=VIS, batch_size=5))
    ids = h.queue.enqueue_many(range(5))
    h.tick()

    reaped: list[int] = []  # (an assert inside a handler would only fail that message)

    def slow(m: Message) -> BaseException | None:
        h.clock.advance(VIS * 0.6)  # each message takes 60% of the visibility timeout
        reaped.append(h.tick().reaped)  # a heartbeat after each message keeps the lease
        return Crash() if m.body == 3 and m.attempt == 1 else None

    handler = Recorder(fail=slow)
    with pytest.raises(Crash):
        h.work(handler)
    assert reaped == [0, 0, 0, 0] and len(h.kinds("heartbeat")) >= 2
    assert h.kinds("handler_finish")[-1].fields["outcome"] == "done"
    h.clock.advance(VIS + h.coordination.skew_tolerance + 1)
    h.tick()
    h.work(Recorder(fail=slow))
    assert [f.fields["outcome"] for f in h.kinds("handler_finish")] == ["done"] * 5
    again = [e.fields for e in h.kinds("handler_start") if e.fields["redelivered"]]
    # messages 0-2 finished and were recorded by a heartbeat: only 3 and 4 run again; 3 had
    # started (the heartbeat before it noted it: attempt 2), 4 had not (still attempt 1)
    assert [(f["message_id"], f["attempt"]) for f in again] == [(ids[3], 2), (ids[4], 1)]
    assert h.keys("msg/") == []


def test_repeated_lease_expiry_counts_toward_max_retries() -> None:
    h = Harness(settings=QueueSettings(visibility_timeout=VIS, max_retries=2))
    h.queue.enqueue("kills its worker")
    handler = Recorder(fail=lambda m: Crash())
    for _ in range(3):
        h.tick()
        with pytest.raises(Crash):
            h.work(handler)
        h.clock.advance(VIS + h.coordination.skew_tolerance + 1)
    h.tick()
    h.work(handler)
    assert [m.attempt for m in handler.seen] == [1, 2, 3]
    [dead] = h.queue.dead_letters()
    assert "delivered 3 times" in dead["reason"] and "expired 3 of them" in dead["reason"]
    assert dead["attempts"] == 3  # the two counts agree (issue 19, defect 9)


def test_two_coordinators_one_leader() -> None:
    h = Harness()
    other = h.new_coordinator("c2")
    h.queue.enqueue("x")
    assert h.tick().leader is True
    assert other.tick().leader is False
    assert len(h.invocations) == 1


def test_stale_leader_wakes_after_takeover_and_is_fenced() -> None:
    h = Harness(settings=QueueSettings(batch_size=1))
    h.queue.enqueue("m1")
    h.queue.enqueue("m2")
    old = h.coordinator
    old.settings = QueueSettings(batch_size=1, max_in_flight_tickets=1)
    assert old.tick().dispatched == 1  # ticket 1-0 holds m1
    stale_view = old.memory.known.copy()
    # GIVEN the leader pauses past its lease and another takes over (epoch 2)
    h.clock.advance(h.coordination.lease_ttl + h.coordination.skew_tolerance + 1)
    new = h.new_coordinator("c2")
    assert new.tick().dispatched == 1  # m2 only: m1 is in the sealed ticket 1-0
    lease = read_lease(h.storage, h.queue.keys.lease)
    assert lease is not None and lease.epoch == 2 and lease.seals == {1: 0}
    # WHEN the old leader wakes mid-tick and publishes m2 in ticket 1-1
    old.memory.known = stale_view
    m2 = [
        k
        for k in h.keys("msg/")
        if k not in {r.key for v in stale_view.values() for r in v.ticket.refs}
    ]
    entry = next(e for e in h.storage.list(h.queue.keys.msg).entries if e.key == m2[0])
    old.lease.doc = lease  # it still believes it leads (no renewal was due)
    old.lease.doc.epoch = 1
    old.memory.epoch = 1
    assert (
        old.publisher._publish(
            old.memory, [Candidate(entry.key, entry.etag, entry.size, 0, 0)], 0, 1
        )
        == 1
    )
    # THEN no worker runs it, and the new leader deletes it (1-0, written over dispatch_timeout
    # before the takeover, was invoked again by the new leader: found gone the second time)
    handler = Recorder()
    results = h.work(handler)
    assert sorted(r.status for r in results) == ["committed", "committed", "gone", "rejected"]
    assert sorted(handler.bodies()) == ["m1", "m2"]
    new.tick()
    assert h.keys("tickets/") == [] and len(h.kinds("fenced")) == 1


def publications(coordinator: Coordinator, jobs: list[Callable[[], object]]) -> bool:
    """Is this `run_all` call a block of ticket publications (not the tick's LISTs)?"""

    def publishes(job: object) -> bool:  # a partial of _publish, maybe inside another
        return getattr(job, "func", None) == coordinator.publisher._publish or any(
            publishes(arg) for arg in getattr(job, "args", ())
        )

    return all(publishes(job) for job in jobs)


def test_a_leader_frozen_inside_a_block_cannot_land_its_late_ticket() -> None:
    """Tickets published at once may land out of order (lease.py, "Blocks"): a leader freezes
    with ticket 1-1 in S3 and 1-0 not yet; a challenger takes over, sees 1-1 and seals epoch 1
    at 1 with a hole at 0; 1-0 lands late. Its message must not run twice."""
    h = Harness(settings=QueueSettings(batch_size=1, max_in_flight_tickets=2))
    h.queue.enqueue("m1")
    h.queue.enqueue("m2")
    old = h.coordinator
    new = h.new_coordinator("c2")

    def frozen_between(jobs: list[Callable[[], object]]) -> list[object]:
        if not publications(old, jobs):
            return in_order(jobs)  # the inbox and the partitions, listed at once
        later = jobs[1]()  # 1-1 (m2) lands first
        h.clock.advance(h.coordination.lease_ttl + h.coordination.skew_tolerance + 1)
        assert new.tick().dispatched == 1  # m1 again, in 2-0: 1-0 was nowhere to be seen
        return [jobs[0](), later]  # the frozen leader wakes: 1-0 (m1) lands late

    old.run_all = frozen_between
    old.tick()
    lease = read_lease(h.storage, h.queue.keys.lease)
    assert lease is not None and (lease.seals, lease.holes) == ({1: 1}, {1: (0,)})
    # epoch 1's block is sealed; epoch 2's first block was reserved by its takeover
    assert lease.blocks == {2: (0, 64)}
    tickets = [k.rsplit("/", 1)[1] for k in h.keys("tickets/")]
    assert tickets == ["0000000001-0000000000", "0000000001-0000000001", "0000000002-0000000000"]
    # THEN the late ticket is rejected, every message runs once, and the leader drops it
    handler = Recorder()
    results = {r.ticket.rsplit("/", 1)[1]: r.status for r in h.work(handler)}
    assert results["0000000001-0000000000"] == "rejected"
    assert sorted(handler.bodies()) == ["m1", "m2"]
    new.tick()
    assert h.keys("tickets/") == [] and len(h.kinds("fenced")) == 1


def test_a_block_is_reserved_in_the_lease_before_its_tickets() -> None:
    h = Harness(settings=QueueSettings(batch_size=1))
    for i in range(3):
        h.queue.enqueue(i)
    seen: list[object] = []

    def spy(jobs: list[Callable[[], object]]) -> list[object]:
        if publications(h.coordinator, jobs):
            seen.append(read_lease(h.storage, h.queue.keys.lease))
        return in_order(jobs)

    h.coordinator.run_all = spy
    assert h.tick().dispatched == 3
    [lease] = seen
    assert isinstance(lease, LeaseDoc) and lease.blocks == {1: (0, 64)}  # 4 x 16 threads
    assert h.keys("tickets/") == [h.queue.keys.ticket(1, i) for i in range(3)]


class ConsumedBeforeRecheck:
    """A ticket create that applies, loses its answer, and whose ticket a fast worker runs and
    deletes before the writer's recheck (as S3Storage would then ask `resend_if`)."""

    def __init__(self, inner: MemoryStorage, run: Callable[[str], object]) -> None:
        self.inner, self.run, self.asked = inner, run, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def put(self, key: str, body: bytes, **kw: Any) -> str:
        resend_if = kw.pop("resend_if", None)
        etag = self.inner.put(key, body, **kw)
        if "/tickets/" not in key or resend_if is None or self.asked:
            return etag
        self.asked += 1
        self.run(key)  # the fast worker: claim, run, apply, delete
        if not resend_if():
            raise Consumed(f"{key} consumed")
        return self.inner.put(key, body, **kw)  # missing: sent again


@pytest.mark.parametrize("released", [False, True])
def test_a_ticket_consumed_before_the_recheck_of_its_create_is_not_created_again(
    released: bool,
) -> None:
    clock = FakeClock()
    inner = MemoryStorage(clock)
    handler = Recorder()
    holder: list[Harness] = []

    def fast_worker(key: str) -> None:
        h = holder[0]
        time_left = (lambda: 0) if released else None  # no time: release every message
        h.worker.process(
            {"queue": h.queue.keys.queue, "ticket": key}, handler, remaining_ms=time_left
        )

    storage = ConsumedBeforeRecheck(inner, fast_worker)
    h = Harness(storage=storage, clock=clock)  # type: ignore[arg-type]
    holder.append(h)
    h.queue.enqueue("m1", group="g")
    # WHEN the ticket's create lost its answer and the worker deleted it before the recheck
    assert h.tick().dispatched == 0  # doubted, then found missing: a hole (lease.py, "Doubts")
    assert storage.asked == 1
    assert [e.fields["landed"] for e in h.kinds("settled")] == [False]
    h.work(handler)
    h.drain(handler)
    # THEN the message ran once: not again from a ticket created a second time
    assert handler.bodies() == ["m1"]
    if released:  # nothing had run: its first message was still there, so it was sent again
        assert len(h.kinds("claim")) == 2
    else:
        assert len(h.kinds("claim")) == 1 and h.keys("tickets/") == []


def test_seal_pending_defers_old_tickets() -> None:
    h = Harness()
    h.queue.enqueue("x")
    h.tick()
    # GIVEN a takeover that has not sealed epoch 1 yet
    lease = read_lease(h.storage, h.queue.keys.lease)
    assert lease is not None
    obj = h.storage.get(h.queue.keys.lease)
    assert obj is not None
    lease.epoch, lease.seals = 2, {1: PENDING}
    h.storage.put(h.queue.keys.lease, lease.encode("t2"), if_match=obj.etag)
    [result] = h.work(Recorder())
    assert result.status == "deferred"


class LostResponses(MemoryStorage):
    """Applies chosen writes, then answers as the SDK's retry would: by re-sending them."""

    def __init__(self, clock, match: Iterable[str]) -> None:  # type: ignore[no-untyped-def]
        super().__init__(clock)
        self.match = list(match)
        self.lost = 0

    def _put(self, key, body, if_match, if_none_match, token, metadata):  # type: ignore[no-untyped-def]
        etag = super()._put(key, body, if_match, if_none_match, token, metadata)
        if any(m in key for m in self.match):
            self.lost += 1
            return super()._put(key, body, if_match, if_none_match, token, metadata)  # Conflict
        return etag


@pytest.mark.parametrize("where", ["msg/", "tickets/", "coordinator"])
def test_write_with_lost_response_is_recognised_as_own(where: str) -> None:
    from s3queue.common.clock import FakeClock

    clock = FakeClock()
    storage = LostResponses(clock, [where])
    h = Harness(storage=storage, clock=clock)
    h.queue.enqueue("a")
    handler = Recorder()
    h.drain(handler)
    assert storage.lost > 0
    assert handler.bodies() == ["a"]
    assert h.keys("msg/") == [] and h.keys("tickets/") == []


def test_lost_response_of_a_foreign_token_is_still_a_conflict() -> None:
    storage = MemoryStorage()
    etag = storage.put("k", b"1", token="mine")
    storage.put("k", b"2", if_match=etag, token="theirs")
    with pytest.raises(Conflict):
        storage.put("k", b"3", if_match=etag, token="mine")


def test_time_short_commits_done_and_releases_the_rest_without_an_attempt() -> None:
    h = Harness(settings=QueueSettings(batch_size=10))
    for i in range(6):
        h.queue.enqueue(i)
    h.queue.enqueue_many(range(6, 10))
    h.tick()
    # Each handler takes 19 s of a 60 s invocation: after three, 3 s remain, under the margin.
    deadline = h.clock.now_ms() + 60_000
    [work] = h.work(
        Recorder(fail=lambda m: h.clock.sleep(19)), remaining_ms=lambda: deadline - h.clock.now_ms()
    )
    assert work.status == "committed"
    assert work.count("done") == 3 and work.count("release") == 7
    handler = Recorder()
    h.drain(handler)
    assert sorted(handler.bodies()) == list(range(3, 10))
    assert all(m.attempt == 1 for m in handler.seen)


def test_worker_on_a_committed_ticket_applies_it() -> None:
    # GIVEN a worker that committed and died before applying
    h = Harness()
    h.queue.enqueue("x")
    h.tick()
    payload = h.invocations[0]
    real = __import__("s3queue.working.worker", fromlist=["apply_ticket"])
    original = real.apply_ticket

    def die(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise Crash()

    real.apply_ticket = die
    try:
        with pytest.raises(Crash):
            h.work(Recorder())
    finally:
        real.apply_ticket = original
    # WHEN the coordinator notices the stuck ticket and invokes again
    h.clock.advance(h.coordination.dispatch_timeout + 1)
    h.tick()
    [again] = h.invocations
    assert again["ticket"] == payload["ticket"]
    # THEN the next worker applies the commit without running the handler again
    handler = Recorder()
    [result] = h.work(handler)
    assert result.status == "applied" and handler.seen == []
    assert h.keys("msg/") == [] and h.keys("tickets/") == []


def test_lost_invoke_is_retried_after_dispatch_timeout() -> None:
    h = Harness(coordination=CoordinatorSettings(dispatch_timeout=10))
    h.queue.enqueue("x")
    h.tick()
    h.invocations.clear()  # the invoke never reached a worker
    h.clock.advance(9)
    h.tick()
    assert h.invocations == []
    h.clock.advance(1)
    h.tick()
    assert len(h.invocations) == 1
    h.work(Recorder())
    assert h.keys("msg/") == []


def test_unreadable_lease_is_recovered_without_double_dispatch() -> None:
    h = Harness(settings=QueueSettings(batch_size=1))
    h.queue.enqueue("a")
    h.tick()  # ticket 1-0 holds "a"
    obj = h.storage.get(h.queue.keys.lease)
    assert obj is not None
    h.storage.put(h.queue.keys.lease, b"garbage", if_match=obj.etag)
    h.queue.enqueue("b")
    h.clock.advance(h.coordination.lease_ttl + h.coordination.skew_tolerance + 1)
    new = h.new_coordinator("c2")
    assert new.tick().dispatched == 1  # "b" only: the live ticket of epoch 1 was sealed
    lease = read_lease(h.storage, h.queue.keys.lease)
    assert lease is not None and lease.epoch > h.clock.now_ms() // 1000
    assert lease.seals == {1: 0}
    handler = Recorder()
    h.work(handler)
    assert sorted(handler.bodies()) == ["a", "b"]


# --- regressions found by the chaos checker (tests/chaos/test_core_bugs.py has their twins) ---


def test_late_apply_cannot_revive_a_consumed_retry_copy() -> None:
    # GIVEN a worker that commits a retry, then pauses before applying it
    h = Harness(settings=QueueSettings(backoff_base=0.001, backoff_cap=0.001))
    h.queue.enqueue("flaky")
    h.tick()
    worker_module = __import__("s3queue.working.worker", fromlist=["apply_ticket"])
    real_apply, paused = worker_module.apply_ticket, []
    worker_module.apply_ticket = lambda *args, **_: paused.append(args) or True
    handler = Recorder(fail=lambda m: RuntimeError("once") if m.attempt == 1 else None)
    try:
        h.work(handler)
    finally:
        worker_module.apply_ticket = real_apply
    # WHEN a helper applies it, and the retry copy is handled and consumed meanwhile
    h.clock.advance(h.coordination.dispatch_timeout + 1)
    h.tick()
    assert [r.status for r in h.work(handler)] == ["applied"]
    h.clock.advance(1)
    h.drain(handler)
    assert [m.attempt for m in handler.seen] == [1, 2]
    # THEN the late apply finds a tombstone where the copy was, and nothing runs again
    real_apply(*paused[0], now_ms=h.clock.now_ms)  # as the worker calls it
    h.drain(handler)
    assert [m.attempt for m in handler.seen] == [1, 2]


def test_tombstones_are_deleted_after_their_ttl() -> None:
    h = Harness(settings=QueueSettings(backoff_base=0.001, backoff_cap=0.001))
    h.queue.enqueue("flaky")
    h.drain(Recorder(fail=lambda m: RuntimeError("x") if m.attempt == 1 else None))
    [tombstone] = h.keys("msg/", tombstones=True)
    assert h.coordinator.probe() is False  # a tombstone is not work
    h.clock.advance(h.coordination.tombstone_ttl + h.coordination.sweep_interval + 1)
    h.queue.enqueue("next")  # the scan meets the tombstone on its sweep
    h.drain(Recorder())
    assert h.keys("msg/", tombstones=True) == []
    assert tombstone


def test_failure_recorded_before_a_lease_expiry_keeps_its_attempt_number() -> None:
    # GIVEN a packed [poison, crasher]: the poison's failure is recorded by a heartbeat
    h = Harness(settings=QueueSettings(visibility_timeout=VIS, max_retries=2, backoff_base=0.1))
    h.queue.enqueue_many(["poison", "crasher"])
    h.tick()

    def fail(m: Message) -> BaseException | None:
        if m.body == "poison":
            h.clock.advance(VIS / 2)  # a heartbeat is due after it: the failure is recorded
            return RuntimeError("bad")
        return Crash() if m.attempt == 1 else None

    handler = Recorder(fail=fail)
    with pytest.raises(Crash):
        h.work(handler)
    h.clock.advance(VIS + h.coordination.skew_tolerance + 1)
    h.drain(handler, step=0.5)
    # THEN the poison runs max_retries + 1 times, numbered 1, 2, 3
    assert [m.attempt for m in handler.seen if m.body == "poison"] == [1, 2, 3]
    [dead] = h.queue.dead_letters()
    assert [e["attempt"] for e in dead["errors"]] == [1, 2, 3]


def test_a_lost_reap_race_keeps_the_ticket_in_flight() -> None:
    h = Harness(settings=QueueSettings(visibility_timeout=VIS, batch_size=1))
    h.queue.enqueue("slow")
    h.tick()
    payload = h.invocations.pop()

    def slow(m: Message) -> None:
        h.clock.advance(VIS + h.coordination.skew_tolerance + 1)
        real_put = h.storage.put

        def heartbeat_first(key: str, body: bytes, **kw: object) -> str:
            if key.startswith(h.queue.keys.tickets):  # the reap's CAS
                h.storage.put = real_put  # type: ignore[method-assign]
                claims[0].beat()  # the holder renews just before the reap's CAS lands
            return real_put(key, body, **kw)  # type: ignore[arg-type]

        h.storage.put = heartbeat_first  # type: ignore[method-assign]
        ticks.append(h.tick())  # (asserting here would only fail the handler: a retry)

    claims: list = []  # type: ignore[type-arg]
    ticks: list[TickResult] = []
    original = h.worker.start._claim
    h.worker.start._claim = lambda *a: claims.append(original(*a)) or claims[-1]  # type: ignore[method-assign]
    result = h.worker.process(payload, slow)
    assert result.status == "committed" and result.count("done") == 1
    assert h.kinds("lost_race")  # the reap lost to the heartbeat
    assert ticks[0].reaped == 0 and ticks[0].dispatched == 0  # still in flight
    assert h.invocations == []


def test_a_failed_reap_write_leaves_memory_as_s3_is() -> None:
    from s3queue.errors import StorageError

    h = Harness(settings=QueueSettings(visibility_timeout=VIS))
    h.queue.enqueue("x")
    h.tick()
    with pytest.raises(Crash):
        h.work(Recorder(fail=lambda m: Crash()))
    h.clock.advance(VIS + h.coordination.skew_tolerance + 1)
    real_put = h.storage.put

    def unavailable(key: str, body: bytes, **kw: object) -> str:
        if key.startswith(h.queue.keys.tickets):
            raise StorageError("503 SlowDown past every retry")
        return real_put(key, body, **kw)  # type: ignore[arg-type]

    h.storage.put = unavailable  # type: ignore[method-assign]
    with pytest.raises(StorageError):
        h.tick()
    h.storage.put = real_put  # type: ignore[method-assign]
    [known] = h.coordinator.memory.known.values()
    assert known.ticket.state == "claimed" and known.ticket.generation == 0
    handler = Recorder()
    h.drain(handler)
    assert [m.attempt for m in handler.seen] == [2]
    assert len(h.kinds("expire")) == 1


def test_a_paused_leader_never_touches_a_newer_leaders_tickets() -> None:
    h = Harness(settings=QueueSettings(visibility_timeout=VIS))
    old = h.coordinator
    old.tick()  # leads epoch 1, renewal not due for a while
    h.queue.enqueue("x")
    h.clock.advance(h.coordination.lease_ttl + h.coordination.skew_tolerance + 1)
    new = h.new_coordinator("c2")
    assert new.tick().dispatched == 1  # epoch 2 dispatches x
    old.lease.doc.lease_until_ms = h.clock.now_ms() + 60_000  # type: ignore[union-attr]
    # WHEN the old leader wakes believing it still leads (its renewal is not due)
    assert old.tick().leader is False
    # THEN it stood down without fencing the new leader's ticket
    assert h.kinds("fenced") == [] and len(h.kinds("deposed")) == 1
    assert len(h.keys("tickets/")) == 1


def test_a_message_that_kills_its_worker_does_not_use_up_its_batch_mates_retries() -> None:
    h = Harness(settings=QueueSettings(visibility_timeout=VIS, max_retries=3, batch_size=10))
    for i in range(6):
        h.queue.enqueue(f"m{i}")
    h.queue.enqueue("killer")  # sorts after m0..m5: it dies first in the batch each time
    for i in range(6, 9):
        h.queue.enqueue(f"m{i}")
    handler = Recorder(fail=lambda m: Crash() if m.body == "killer" else None)
    # GIVEN a first delivery that dies in the killer, unnoted (no heartbeat was due before it
    # started), then max_retries + 1 redeliveries that note each start and die in it too
    for _ in range(5):
        h.tick()
        with pytest.raises(Crash):
            h.work(handler)
        h.clock.advance(VIS + h.coordination.skew_tolerance + 1)
    h.drain(handler)  # the sixth delivery dead-letters it unrun; the others go on
    [dead] = h.queue.dead_letters()
    assert dead["body"] == "killer" and "expired 4 of them" in dead["reason"]
    assert [m.attempt for m in handler.seen if m.body == "killer"] == [1, 1, 2, 3, 4]
    # the batch-mates after it never ran while it kept dying: no delivery counted for them
    late = [m for m in handler.seen if m.body in ("m6", "m7", "m8")]
    assert [(m.attempt, m.redelivered) for m in late] == [(1, True)] * 3
    # m0 was the claim's noted first message when the first delivery died: counted once
    assert [m.attempt for m in handler.seen if m.body == "m0"] == [1, 2]
    assert {b for b in handler.bodies()} == {"killer"} | {f"m{i}" for i in range(9)}


class FreezeOnGet(MemoryStorage):
    """A worker process that freezes while reading one key (the world moves on meanwhile)."""

    def __init__(self, clock, key_part: str) -> None:  # type: ignore[no-untyped-def]
        super().__init__(clock)
        self.key_part, self.on_freeze = key_part, lambda: None

    def get(self, key: str, *, if_match=None):  # type: ignore[no-untyped-def]
        if self.key_part in key:
            self.key_part = "\\0never"
            self.on_freeze()
        return super().get(key, if_match=if_match)


@pytest.mark.parametrize("where", ["reading the next object", "between handlers"])
def test_a_worker_frozen_past_its_lease_does_not_start_another_handler(where: str) -> None:
    """A pulled ticket's objects are read after its claim: the worker freezes in the GET of
    "second". An invoked one's are read ahead while it is claimed (worker.py, `_early_stream`),
    so there the worker freezes between the two handlers."""
    from s3queue.common.clock import FakeClock

    clock = FakeClock()
    storage = FreezeOnGet(clock, "(set below)")
    h = Harness(storage=storage, clock=clock, settings=QueueSettings(visibility_timeout=VIS))
    h.queue.enqueue("first")
    h.queue.enqueue("second")
    h.tick()
    payload = h.invocations.pop()

    def freeze() -> None:  # the lease lapses and is reaped meanwhile
        h.clock.advance(VIS + h.coordination.skew_tolerance + 1)
        h.tick()

    if where == "reading the next object":
        payload["pulled"] = True
        storage.key_part = h.keys("msg/")[1]  # the second message's object
        storage.on_freeze = freeze
    handler = Recorder(lambda m: freeze() if where == "between handlers" else None)
    result = h.worker.process(payload, handler)
    assert result.status == "lost"
    assert handler.bodies() == ["first"]  # "second" was never started on the lapsed lease
    h.work(Recorder())  # the redelivery runs both (first's outcome was not persisted)
    assert h.keys("msg/") == []


def test_lease_expiries_count_only_messages_that_started_never_their_packed_mates() -> None:
    """Issue 9.4: repeated kills of a worker mid-way through one packed object dead-lettered
    messages of that object that had never reached the handler ("delivered 5 times")."""
    # GIVEN one packed object of 8 messages, and workers killed at their second handler start,
    # six deliveries in a row (more than max_retries + 1)
    h = Harness(settings=QueueSettings(visibility_timeout=VIS, max_retries=3, batch_size=10))
    h.queue.enqueue_many([f"m{i}" for i in range(8)])
    starts = [0]

    def kill_second_start(m: Message) -> BaseException | None:
        starts[0] += 1
        return Crash() if starts[0] == 2 else None

    handler = Recorder(fail=kill_second_start)
    for _ in range(6):
        starts[0] = 0
        h.tick()
        with pytest.raises(Crash):
            h.work(handler)
        h.clock.advance(VIS + h.coordination.skew_tolerance + 1)
    # WHEN the kills stop
    h.drain(Recorder())
    # THEN nothing was dead-lettered; each message's attempts counted only its own starts
    assert h.queue.dead_letters() == []
    starts_of: dict[str, int] = {}
    for m in handler.seen:
        starts_of[m.body] = starts_of.get(m.body, 0) + 1
        assert m.attempt <= starts_of[m.body], (m.body, m.attempt, starts_of[m.body])
    assert h.keys("msg/") == []
