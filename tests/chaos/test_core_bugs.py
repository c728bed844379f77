"""Bugs in the core that the chaos runs found, each reduced to a minimal deterministic test.

A test of an open bug is marked ``xfail(strict=True, reason=...)``: the suite stays green, and
the test turns red (XPASS) the day its bug is fixed, so the marker can go. A fixed bug's test
stays as a plain regression test: A-G were fixed in e042ab1 and ed26773, I in 4943464; J, K,
L, M (FIFO within a group) and O (a failed publish) are fixed too. Each asserts the checker's
verdict on the run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from s3queue.contract.settings import QueueSettings
from s3queue.errors import StorageError
from s3queue.local.seaweed import EmbeddedS3
from s3queue.producing.producer import Queue
from s3queue.protocol.lease import read_lease
from s3queue.protocol.records import Record, encode_records, foreign_id
from s3queue.storage.base import Storage
from s3queue.storage.s3 import S3Storage

from chaos.actors import QUEUE
from chaos.faults import FaultPlan, S3Faults
from chaos.process import Crash, CrashAt, ProcessStorage
from chaos.rig import Bench
from chaos.scenario import KEYS, PREFIX
from chaos.workload import Mix, Spec

pytestmark = pytest.mark.chaos
SINGLE, PACKED = Mix(packed=0.0), Mix(packed=1.0)


class Injecting(ProcessStorage):
    """A process's storage that makes chosen calls raise (or run something first)."""

    def __init__(
        self, inner: Storage, actor: str, rule: Callable[[str, str, bytes | None], Any]
    ) -> None:
        super().__init__(inner, actor)
        self.rule = rule

    def _call(self, op: str, key: str, run: Callable[[], Any], body: bytes | None = None) -> Any:
        self.rule(op, key, body)
        return super()._call(op, key, run, body)


def once(condition: Callable[[str, str, bytes | None], bool], act: Callable[[], Any]) -> Any:
    fired = [False]

    def rule(op: str, key: str, body: bytes | None) -> None:
        if not fired[0] and condition(op, key, body):
            fired[0] = True
            act()

    return rule


def unavailable() -> None:
    """What S3Storage raises once its retries are spent (5xx, throttling, a lasting 409)."""
    raise StorageError("injected: S3 refused the request past every retry")


def test_a_packed_message_finished_before_a_lease_expiry_keeps_its_attempt_count() -> None:
    """Was BUG A: Coordinator._reap adds a redelivery to the whole ref of a packed object when any
    of its messages is unfinished, and the worker and apply add ref.redeliveries to every record
    of the ref, so a message whose failure a heartbeat had recorded gets attempt + 2: its
    retries are cut short and its error history names the wrong attempt Fixed in ed26773."""
    # GIVEN a packed object [poison, crasher]; the poison fails and a heartbeat records it
    bench = Bench(QueueSettings(visibility_timeout=30, max_retries=2, backoff_base=0.1))
    bench.producer.send([bench.spec(0, "poison", ms=15_000), bench.spec(1, "ok")], PACKED)
    coordinator = bench.coordinator("c1")
    coordinator.tick()
    # WHEN the worker dies before committing (in the crasher's handler: its next GET)
    dies = bench.worker("w1", bench.process_storage("w1", crash_at=CrashAt(4)))
    with pytest.raises(Crash):
        bench.work(dies)
    bench.expire()
    bench.drain(coordinator, bench.worker("w2"))
    # THEN the poison message still fails max_retries + 1 times before the DLQ
    report = bench.check()
    assert report.ok, report.summary()


def test_b_committer_paused_before_apply_does_not_revive_a_consumed_retry() -> None:
    """Was BUG B: apply writes copies with If-None-Match on deterministic keys and the committer
    applies from its cached objects without re-checking: a committer paused between its commit
    and its apply for longer than dispatch_timeout re-creates a retry copy that a helper's apply
    already wrote and a worker already consumed; the message runs (and is committed) twice with
    no lease expiry Fixed in ed26773."""
    bench = Bench(QueueSettings(visibility_timeout=30, backoff_base=0.5, backoff_cap=0.5))
    bench.producer.send([bench.spec(0, "flaky", fails=1)], SINGLE)
    coordinator = bench.coordinator("c1")
    coordinator.tick()
    helper = bench.worker("w2")

    def meanwhile() -> None:  # the committer is paused: the coordinator calls a helper
        bench.expire()
        coordinator.tick()
        bench.work(helper)
        bench.clock.advance(bench.coordination.sweep_interval)
        coordinator.tick()  # the retry copy is dispatched and consumed
        bench.work(helper)

    committed = once(lambda op, key, body: op == "put" and key.startswith(KEYS.msg), meanwhile)
    paused = bench.worker("w1", Injecting(bench.storage, "w1", committed))
    bench.work(paused)  # commits, pauses before writing the retry copy, then applies
    bench.drain(coordinator, helper)
    report = bench.check()
    assert report.ok, report.summary()


def test_c_stale_leader_leaves_the_new_leaders_claimed_ticket_alone() -> None:
    """Was BUG C: Coordinator._reconcile drops every listed ticket its own lease document does not
    accept; a paused ex-leader whose renewal is not due yet judges the new leader's tickets (a
    higher epoch) by its stale document and deletes them, claimed or not Fixed in ed26773."""
    bench = Bench()
    old = bench.coordinator("c1")
    old.tick()  # leads epoch 1
    bench.producer.send([bench.spec(0)], SINGLE)

    def takeover() -> None:  # the leader is paused before its LIST of tickets
        bench.expire()
        bench.coordinator("c2").tick()  # epoch 2 dispatches the message
        worker = bench.worker("w2", bench.process_storage("w2", crash_at=CrashAt(3)))
        with pytest.raises(Crash):  # its worker dies in the handler: the ticket stays claimed
            worker.process(bench.invocations.pop(), bench.handler(worker))

    listing = once(lambda op, key, body: op == "list" and key == KEYS.tickets, takeover)
    stale = bench.coordinator("c1", Injecting(bench.storage, "c1", listing))
    stale.lease, stale.memory = old.lease, old.memory
    stale.tick()
    assert not bench.history.of("fenced"), "the stale leader deleted a live ticket"


def test_d_a_failed_reap_put_is_not_acted_on() -> None:
    """Was BUG D: Coordinator._reap mutates its in-memory ticket (pending, generation + 1,
    redeliveries + 1) before the PUT; when the PUT fails with a StorageError the mutated copy
    stays in memory with the old ETag, the next tick invokes a worker with it, and that claim
    succeeds over the live claim: a takeover with no reap written and no expire event Fixed in
    ed26773."""
    bench = Bench(QueueSettings(visibility_timeout=30))
    bench.producer.send([bench.spec(0)], SINGLE)
    failing = once(
        lambda op, key, body: op == "put" and b'"state":"pending","gen":1' in (body or b""),
        unavailable,
    )
    coordinator = bench.coordinator("c1", Injecting(bench.storage, "c1", failing))
    coordinator.tick()
    dies = bench.worker("w1", bench.process_storage("w1", crash_at=CrashAt(3)))
    with pytest.raises(Crash):
        bench.work(dies)
    bench.expire()
    with pytest.raises(StorageError):
        coordinator.tick()  # the reap's PUT fails
    bench.clock.advance(bench.coordination.dispatch_timeout)
    bench.drain(coordinator, bench.worker("w2"))
    report = bench.check()
    assert report.ok, report.summary()


def test_f_409_on_the_retry_copy_does_not_lose_the_message() -> None:
    """Was BUG F (fixed in e042ab1): copies._create (then in apply.py) took any Conflict on its
    If-None-Match PUT for 'an earlier apply wrote it'; a 409 ConditionalRequestConflict (nothing
    written) then skipped the retry copy, the source was deleted and the message was lost. Now a
    409 that outlasts the retries is a StorageError: the apply stops, a helper re-applies later."""
    bench = Bench(QueueSettings(visibility_timeout=30, backoff_base=0.5))
    bench.producer.send([bench.spec(0, "flaky", fails=1)], SINGLE)
    coordinator = bench.coordinator("c1")
    coordinator.tick()
    rule = once(lambda op, key, body: op == "put" and key.startswith(KEYS.msg), unavailable)
    bench.work(bench.worker("w1", Injecting(bench.storage, "w1", rule)))
    bench.drain(coordinator, bench.worker("w2"))
    report = bench.check()
    assert report.ok, report.summary()


@pytest.mark.s3
def test_f_409_from_s3_on_the_retry_copy_does_not_lose_the_message(
    seaweed: EmbeddedS3, bucket: str
) -> None:
    """BUG F through S3Storage on SeaweedFS: a real 409 answer to the retry copy's PUT."""
    storage = S3Storage(seaweed.make_client(), bucket, sleep=lambda _: None)
    bench = Bench(QueueSettings(visibility_timeout=30, backoff_base=0.5), backend=storage)
    bench.producer.send([bench.spec(0, "flaky", fails=1)], SINGLE)
    coordinator = bench.coordinator("c1")
    coordinator.tick()
    faults = S3Faults(
        FaultPlan(1, {"conflict409": 1.0}),
        only=lambda op, key: op == "PutObject" and "/msg/" in key,  # the retry copy
        limit=1,
    )
    client = faults.attach(seaweed.make_client())
    worker_storage = bench.process_storage("w1")
    worker_storage.inner = bench.oracle(S3Storage(client, bucket, sleep=lambda _: None))
    bench.work(bench.worker("w1", worker_storage))
    assert faults.log.counts["conflict409"] == 1
    bench.drain(coordinator, bench.worker("w2"))
    report = bench.check()
    assert report.ok, report.summary()


@pytest.mark.s3
def test_f2_409_on_deleting_a_handled_inbox_object_does_not_run_it_again(
    seaweed: EmbeddedS3, bucket: str
) -> None:
    """Was BUG F2 (fixed in e042ab1): apply._delete_foreign suppresses a Conflict on the inbox
    object's DELETE If-Match (meant for 'another service put a new object under that name'); a
    409 (nothing deleted) left the handled object to be dispatched and handled again."""
    bench = Bench(backend=S3Storage(seaweed.make_client(), bucket, sleep=lambda _: None))
    bench.storage.put(KEYS.inbox + "order.json", b'{"n": 1, "kind": "ok"}')
    bench.history.record("put_foreign", "producer", id=foreign_id("inbox/order.json"))
    bench.clock.advance(1)  # past the server's Last-Modified stamp: the object is ready
    coordinator = bench.coordinator("c1")
    assert coordinator.tick().dispatched == 1
    faults = S3Faults(
        FaultPlan(1, {"conflict409": 1.0}),
        only=lambda op, key: op == "DeleteObject" and "/inbox/" in key,
        limit=1,
    )
    worker_storage = bench.process_storage("w1")
    client = faults.attach(seaweed.make_client())
    worker_storage.inner = bench.oracle(S3Storage(client, bucket, sleep=lambda _: None))
    bench.work(bench.worker("w1", worker_storage))
    assert faults.log.counts["conflict409"] == 1
    bench.drain(coordinator, bench.worker("w2"))
    report = bench.check()
    assert report.ok, report.summary()


def test_g_a_lost_reap_race_keeps_the_ticket_in_flight() -> None:
    """Was BUG G: when a reap loses its CAS (the holder's heartbeat or commit landed first, or a
    409), Coordinator._reap drops the ticket from memory.known, and the same tick's dispatch no
    longer counts its messages in flight: they go out in a second ticket while the first is
    still validly held (two valid leases on one message) Fixed in ed26773."""
    bench = Bench(QueueSettings(visibility_timeout=30, batch_size=1))
    bench.producer.send([bench.spec(0, ms=100)], SINGLE)
    coordinator_storage: list[Injecting] = []
    holder = bench.worker("w1")
    claims: dict[str, Any] = {}
    original = holder.start._claim

    def capture(*args: Any) -> Any:
        claims["claim"] = claim = original(*args)
        return claim

    holder.start._claim = capture  # type: ignore[method-assign,assignment]

    def late_heartbeat() -> None:  # the slow holder renews just before the reap's CAS
        claims["claim"].beat()

    def handler(message: Any) -> None:
        bench.expire()  # the holder is slow: its lease is past lease_until + skew
        coordinator_storage[0].rule = once(
            lambda op, key, body: op == "put" and key.startswith(KEYS.tickets), late_heartbeat
        )
        coordinator.tick()  # reaps: loses to the heartbeat, forgets the ticket, re-dispatches
        bench.work(bench.worker("w2"))

    coordinator_storage.append(Injecting(bench.storage, "c1", lambda *a: None))
    coordinator = bench.coordinator("c1", coordinator_storage[0])
    coordinator.tick()
    holder.process(bench.invocations.pop(0), handler)  # the holder commits: its lease is valid
    bench.drain(coordinator, bench.worker("w3"))
    report = bench.check()
    assert report.ok, report.summary()


def test_i_tombstones_ending_a_list_page_do_not_crash_the_coordinator() -> None:
    """Was BUG I (in ed26773, fixed in 4943464): the cursor's page reader skipped a tombstone
    (an emptied ~o copy) but still returned it as the page's last key, and the lookup of that
    key raised KeyError: a coordinator crash at every tick while a tombstone ended a LIST page.
    Found by the 5,000-message soak. Every key but the last few is a tombstone here, so the
    first page ends with one whatever its size."""
    bench = Bench(QueueSettings(batch_size=10, max_in_flight_tickets=2))
    body = encode_records([Record("m", {"n": 0, "kind": "ok"}, 1_700_000_000_000)], "t")
    for i in range(1105):
        emptied = i < 1100
        name = f"1700000000000-m{i:04d}" + ("~o0000000001-0000000000" if emptied else "")
        bench.storage.put(KEYS.msg + name, b"" if emptied else body)
    tick = bench.coordinator("c1").tick()
    assert tick.dispatched == 5


def grouped(spec: Spec, group: str = "g") -> Spec:
    return dataclasses.replace(spec, group=group)


def test_j_a_group_head_in_backoff_behind_the_cursor_is_not_overtaken() -> None:
    """BUG J (fixed): the planner (scan.Planner) knows a group is blocked only from the live tickets
    (Coordinator._busy_groups) or from a candidate of that group it reads in the same tick. A
    failed group head's retry copy keeps its old place (its enqueue time, with ~n<due>), so
    once the rewind tick that read it is over, it is behind the cursor, which moves on to
    now - straggler_margin; the cursor remembers only a wake-up time for it (Cursor.wakeups,
    keyed by sort time, not by group). The group's next message, enqueued after that, lands
    ahead of the cursor, the next tick reads it alone, finds its group free and dispatches it
    while the head is still in backoff. Messages released behind a failed head (left in
    place) are overtaken the same way. Found by the fifo invariant in the quiet family."""
    # GIVEN a group's head that fails once (w2's first backoff draw: 7.2 s)
    bench = Bench(QueueSettings(visibility_timeout=30, backoff_base=8.0, backoff_cap=8.0))
    bench.producer.send([grouped(bench.spec(0, "flaky", fails=1, ms=0))], SINGLE)
    coordinator, worker = bench.coordinator("c1"), bench.worker("w2")
    coordinator.tick()
    bench.work(worker)  # retry copy in the head's place, due in 7.2 s; the ticket is gone
    bench.clock.advance(3)
    coordinator.tick()  # rewinds: reads the copy in backoff; the cursor moves to now - 2 s
    # WHEN the group's next message is enqueued while the head waits
    bench.producer.send([grouped(bench.spec(1, ms=0))], SINGLE)
    bench.clock.advance(0.5)
    coordinator.tick()
    bench.work(worker)
    bench.drain(coordinator, worker)
    # THEN it must not run before the head's retry has succeeded
    report = bench.check()
    assert report.ok, report.summary()


def test_k_a_redelivered_ticket_keeps_its_groups_failure() -> None:
    """BUG K (fixed): Worker._run skips every message whose outcome the ticket already holds, but
    rebuilds `failed_groups` only from the retries of this delivery. When a heartbeat recorded
    a group message's retry (and not yet the release of the next one) and the lease then
    expired, the redelivery skips the failed message and runs the next one of its group: it
    overtakes the retry. Found by reading the worker, confirmed by the fifo invariant."""
    # GIVEN a ticket [a, b] of one group; a fails after 11 s, so a heartbeat records its retry
    bench = Bench(QueueSettings(visibility_timeout=30, backoff_base=0.5, backoff_cap=0.5))
    head = grouped(bench.spec(0, "flaky", fails=1, ms=11_000))
    bench.producer.send([head, grouped(bench.spec(1, ms=0))], SINGLE)
    coordinator = bench.coordinator("c1")
    coordinator.tick()
    # WHEN the worker dies at its commit, after releasing b (calls: lease, claim, GET a,
    # heartbeat, GET b, commit)
    dies = bench.worker("w1", bench.process_storage("w1", crash_at=CrashAt(5)))
    with pytest.raises(Crash):
        bench.work(dies)
    assert [e["outcomes"] for e in bench.history.of("ticket_write")][-1], "no retry recorded"
    bench.expire()
    bench.drain(coordinator, bench.worker("w2"))
    # THEN b still waits for a's retry
    report = bench.check()
    assert report.ok, report.summary()


def test_l_an_explicit_id_keeps_its_place_in_its_group() -> None:
    """BUG L (fixed): Queue.enqueue keys a grouped message `<now_ms>-<id>`; keys of one millisecond
    sort by id, which follows enqueue order only for generated ids (monotonic in a process). A
    message enqueued with an explicit id sorts by that id among the same millisecond's
    enqueues of one producer, and the planner dispatches in key order. Found by the fifo
    invariant on the chaos workload (explicit-id messages in groups, the simulation's clock
    standing still during a batch of enqueues)."""
    # GIVEN one producer enqueues "z-first" (explicit id), then a second message, in one ms
    bench = Bench()
    bench.queue.enqueue({"n": 0, "kind": "ok", "ms": 0}, id="z-first", group="g")
    bench.queue.enqueue({"n": 1, "kind": "ok", "ms": 0}, group="g")
    # WHEN the queue is drained
    coordinator = bench.coordinator("c1")
    bench.drain(coordinator, bench.worker("w1"))
    # THEN they ran in enqueue order
    report = bench.check()
    assert report.ok, report.summary()


def test_o_a_tick_whose_publish_fails_reads_its_group_head_again() -> None:
    """BUG O (fixed): a tick consumed its rewind and wake-ups and moved `Cursor.held` on while it
    planned; if publishing the ticket then failed (S3 refused the PUT past its retries), the
    planned group head was never dispatched, nothing remembered it, and it lay behind the
    cursor until the sweep, while the next tick read the group's later message alone and sent
    it out first. Found by the fifo invariant (`soak.py --profile everything --seed 424242`)."""
    # GIVEN a group's head that fails once and waits in backoff behind the cursor (as in J)
    bench = Bench(QueueSettings(visibility_timeout=30, backoff_base=8.0, backoff_cap=8.0))
    bench.producer.send([grouped(bench.spec(0, "flaky", fails=1, ms=0))], SINGLE)
    fail_publish = [False]

    def rule(op: str, key: str, body: bytes | None) -> None:
        if fail_publish[0] and op == "put" and key.startswith(KEYS.tickets):
            fail_publish[0] = False
            unavailable()

    storage = Injecting(bench.storage, "c1", rule)
    coordinator, worker = bench.coordinator("c1", storage), bench.worker("w2")
    coordinator.tick()
    bench.work(worker)  # the retry copy keeps the head's place, due in 7.2 s
    bench.clock.advance(3)
    coordinator.tick()  # the rewind reads the copy in backoff: a wake-up at its due time
    bench.producer.send([grouped(bench.spec(1, ms=0))], SINGLE)
    bench.clock.advance(6)
    # WHEN the tick that wakes the head plans [head, next] and its ticket PUT is refused
    fail_publish[0] = True
    assert coordinator.tick().dispatched == 0  # doubted, found missing: a hole (lease.py)
    doc = read_lease(bench.storage, KEYS.lease)
    assert doc is not None and doc.holes and not doc.doubts
    bench.drain(coordinator, worker)
    # THEN the next tick reads the head again and the group keeps its order
    report = bench.check()
    assert report.ok, report.summary()


def test_m_a_group_head_that_lands_late_is_not_overtaken() -> None:
    """BUG M (fixed): a message's key time is the producer's clock when the enqueue starts. When its
    PUT lands more than straggler_margin later (S3Storage retrying 503s, a slow connection),
    the leader's cursor has already moved past that time, and only the next sweep (or a new
    leader) reads it. For a grouped message the group's next message, enqueued after the first
    one was acknowledged, is read first, its group looks free, and it runs first. Found by the
    fifo invariant on SeaweedFS (the chaos run with network faults: a 503 on the head's PUT).
    Fixed by the late notice (producer.py): the producer saw its PUT take 3 s."""
    bench = Bench()
    coordinator = bench.coordinator("c1")
    coordinator.tick()

    def retried() -> None:  # the head's PUT takes 3 s; the leader ticks meanwhile
        bench.clock.advance(3)
        coordinator.tick()  # nothing new: the cursor moves to now - straggler_margin

    slow = once(lambda op, key, body: op == "put" and key.startswith(KEYS.msg), retried)
    producer = Queue(
        QUEUE,
        storage=Injecting(bench.storage, "producer", slow),
        clock=bench.clock,
        prefix=PREFIX,
        listener=bench.history.listener("producer"),
    )
    # GIVEN a group's head, keyed at t = 0, that lands at t = 3 s
    producer.enqueue({"n": 0, "kind": "ok", "ms": 0}, group="g")
    # WHEN the group's next message is enqueued after it was acknowledged
    producer.enqueue({"n": 1, "kind": "ok", "ms": 0}, group="g")
    bench.clock.advance(0.5)
    bench.drain(coordinator, bench.worker("w1"))
    # THEN it runs after the head
    report = bench.check()
    assert report.ok, report.summary()
