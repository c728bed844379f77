"""Chaos: a process killed (or paused) between any two of its S3 calls, at every such point.

Each matrix runs its scenario once to list the process's storage calls, then once per call and
side (before it / after it applied), kills the process there, lets the system recover (the
clock moves past every lease, a new process takes over) and runs the checker on the history:

- worker: one ticket holding every kind of message (single, packed, flaky, permanent, explicit
  id, foreign inbox objects, undecodable ones), with heartbeats and a time-short release, so
  its calls cover the fencing GET, the claim, each GET, the heartbeats, the commit, every
  apply write (retry copy, dead letter, id marker, remainder) and every delete;
- coordinator: a takeover tick with a ticket to reap, a committed and a pending one to
  re-invoke, new messages and an inbox object to publish;
- leader pause: the leader stops before each call of a tick while another coordinator takes
  over and dispatches, then wakes up and finishes its tick.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
from s3queue.contract.settings import QueueSettings
from s3queue.protocol.records import foreign_id

from chaos.process import Crash, CrashAt
from chaos.rig import Bench
from chaos.scenario import KEYS
from chaos.workload import Mix

pytestmark = pytest.mark.chaos

SINGLE = Mix(packed=0.0)
PACKED = Mix(packed=1.0)
WORKER_SETTINGS = QueueSettings(
    visibility_timeout=30, max_retries=2, batch_size=16, max_message_bytes=4096
)


def _kind(key: str) -> str:
    """The part of a key a crash point is named by: tickets, msg, dlq, ids, inbox, coordinator."""
    rest = key[len(KEYS.root) :] if key.startswith(KEYS.root) else key
    return rest.split("/", 1)[0] or "root"


def _points(calls: list[tuple[str, str]]) -> list[pytest.ParameterSet]:
    return [
        pytest.param(
            CrashAt(i, after), id=f"{i:02d}-{'after' if after else 'before'}-{op}-{_kind(key)}"
        )
        for i, (op, key) in enumerate(calls)
        for after in (False, True)
    ]


# --- worker -----------------------------------------------------------------------------------


def _rich_ticket(bench: Bench) -> None:
    p = bench.producer
    p.send([bench.spec(5, "dedup")], SINGLE)
    p.send([bench.spec(3, "flaky", fails=1)], SINGLE)
    p.send([bench.spec(4, "permanent")], SINGLE)
    p.send([bench.spec(0, ms=12_000)], SINGLE)  # long enough for a heartbeat after it
    p.send([bench.spec(1, ms=12_000), bench.spec(2)], PACKED)
    p.put_malformed(bench.settings.max_message_bytes, partitioned=False)  # one ticket
    bench.clock.advance(0.001)  # sorts last
    p.send([bench.spec(6), bench.spec(7)], PACKED)  # 7 is released: time runs short


def _run_worker(crash: CrashAt | None) -> tuple[Bench, list[tuple[str, str]]]:
    bench = Bench(WORKER_SETTINGS)
    _rich_ticket(bench)
    coordinator = bench.coordinator("c1")
    assert coordinator.tick().dispatched > 0 and len(bench.invocations) == 1
    storage = bench.process_storage("w1", crash_at=crash)
    worker = bench.worker("w1", storage)
    runs = bench.history.of

    def remaining() -> int:  # a Lambda running out of time after 11 handler calls
        return 60_000 if len(runs("exec")) < 11 else 1_000

    with contextlib.suppress(Crash):
        bench.work(worker, remaining_ms=remaining)
    bench.expire()
    bench.drain(coordinator, bench.worker("w2"))
    return bench, storage.calls


WORKER_CALLS = _run_worker(None)[1]


def test_worker_matrix_covers_every_kind_of_call() -> None:
    kinds = {(op, _kind(key)) for op, key in WORKER_CALLS}
    assert kinds >= {
        ("get", "coordinator"),  # the fencing check
        ("put", "tickets"),  # claim, heartbeats, commit
        ("get", "msg"),
        ("get", "inbox"),
        ("get", "ids"),  # the explicit-id marker
        ("put", "msg"),  # retry copy, remainder of released messages
        ("put", "dlq"),
        ("put", "ids"),
        ("delete_many", "msg"),
        ("delete", "inbox"),
        ("delete", "tickets"),
    }, kinds
    heartbeats = [k for op, k in WORKER_CALLS if op == "put" and _kind(k) == "tickets"]
    assert len(heartbeats) >= 3  # claim, at least one heartbeat, commit


@pytest.mark.parametrize("crash", _points(WORKER_CALLS))
def test_worker_killed_at_every_call(crash: CrashAt) -> None:
    bench, _ = _run_worker(crash)
    report = bench.check()
    assert report.ok, report.summary()
    assert len(bench.history.of("crash")) == 1


# --- coordinator ------------------------------------------------------------------------------


def _busy_queue() -> Bench:
    """Epoch 1 left behind: a claimed ticket whose worker died, a committed one never applied,
    one whose invocation was lost, one pending; new messages and an inbox object arrive."""
    bench = Bench(QueueSettings(visibility_timeout=30, max_retries=2, batch_size=2))
    for n in range(8):
        bench.producer.send([bench.spec(n)], SINGLE)
    assert bench.coordinator("c0").tick().dispatched == 8
    died, committed_then_died, _lost, pending = bench.invocations
    bench.invocations = [pending]
    for payload, crash in ((died, CrashAt(2)), (committed_then_died, CrashAt(4, after=True))):
        worker = bench.worker(f"w-{crash}", bench.process_storage(f"w-{crash}", crash_at=crash))
        with pytest.raises(Crash):
            worker.process(payload, bench.handler(worker))
    for n in range(8, 12):
        bench.producer.send([bench.spec(n)], SINGLE)
    bench.storage.put(KEYS.inbox + "other.json", b'{"n": 99, "kind": "ok"}')
    bench.history.record("put_foreign", "producer", id=foreign_id("inbox/other.json"))
    bench.expire()
    return bench


def _run_coordinator(crash: CrashAt | None) -> tuple[Bench, list[tuple[str, str]]]:
    bench = _busy_queue()
    storage = bench.process_storage("c1", crash_at=crash)
    try:
        bench.coordinator("c1", storage).tick()
    except Crash:
        bench.expire()
    bench.drain(bench.coordinator("c2"), bench.worker("w9"))
    return bench, storage.calls


COORDINATOR_CALLS = _run_coordinator(None)[1]


def test_coordinator_matrix_covers_a_whole_takeover_tick() -> None:
    kinds = [(op, _kind(key)) for op, key in COORDINATOR_CALLS]
    assert kinds[:3] == [("get", "coordinator"), ("put", "coordinator"), ("list", "tickets")]
    assert ("put", "coordinator") in kinds[3:]  # the seal
    assert kinds.count(("put", "tickets")) >= 3  # a reap and new tickets
    assert ("list", "inbox") in kinds and ("list", "msg") in kinds


@pytest.mark.parametrize("crash", _points(COORDINATOR_CALLS))
def test_coordinator_killed_at_every_call(crash: CrashAt) -> None:
    bench, _ = _run_coordinator(crash)
    report = bench.check()
    assert report.ok, report.summary()


# --- a leader paused before any call of its tick -----------------------------------------------


def _run_paused_leader(pause_at: int | None) -> tuple[Bench, list[tuple[str, str]]]:
    bench = Bench(QueueSettings(visibility_timeout=30, max_retries=2, batch_size=1))
    meanwhile = _takeover_meanwhile(bench)
    armed = [False]

    def hook(index: int, op: str, key: str) -> None:
        if armed[0] and index == pause_at:
            meanwhile()

    storage = bench.process_storage("c1", hook=hook)
    leader = bench.coordinator("c1", storage)
    leader.tick()  # leads epoch 1, nothing to do yet
    bench.producer.send([bench.spec(0, ms=5_000), bench.spec(1)], SINGLE)
    storage.calls.clear()
    armed[0] = True
    leader.tick()  # pauses before call `pause_at`: the others act, then it goes on
    bench.expire()
    bench.drain(bench.coordinator("c3"), bench.worker("w3"))
    return bench, storage.calls


def _takeover_meanwhile(bench: Bench) -> Callable[[], None]:
    """While the leader is paused: its lease lapses, c2 takes over and dispatches, and the
    worker of c2's first ticket dies in its handler, leaving the ticket claimed."""

    def act() -> None:
        bench.expire()
        assert bench.coordinator("c2").tick().leader
        storage = bench.process_storage("w2", crash_at=CrashAt(3))  # after claim, GET, GET
        worker = bench.worker("w2", storage)
        with pytest.raises(Crash):
            worker.process(bench.invocations.pop(0), bench.handler(worker))

    return act


PAUSE_CALLS = _run_paused_leader(None)[1]


@pytest.mark.parametrize(
    "pause_at",
    [
        pytest.param(i, id=f"{i:02d}-before-{op}-{_kind(k)}")
        for i, (op, k) in enumerate(PAUSE_CALLS)
    ],
)
def test_leader_paused_before_every_call_wakes_after_a_takeover(pause_at: int) -> None:
    bench, _ = _run_paused_leader(pause_at)
    report = bench.check()
    assert report.ok, report.summary()
    assert [e["epoch"] for e in bench.history.of("takeover")][:2] == [1, 2]


# --- two coordinators started together (EventBridge delivered the schedule twice) ------------


def _run_twins(interrupt_at: int | None) -> tuple[Bench, list[tuple[str, str]]]:
    """c1's first tick is interrupted before its call `interrupt_at` by c2's whole first tick."""
    bench = Bench(QueueSettings(visibility_timeout=30, max_retries=2, batch_size=2))
    for n in range(5):
        bench.producer.send([bench.spec(n)], SINGLE)
    twin = bench.coordinator("c2")

    def hook(index: int, op: str, key: str) -> None:
        if index == interrupt_at:
            twin.tick()

    storage = bench.process_storage("c1", hook=hook)
    bench.coordinator("c1", storage).tick()
    worker = bench.worker("w1")
    bench.work(worker)
    bench.expire()
    bench.drain(bench.coordinator("c3"), worker)
    return bench, storage.calls


TWIN_CALLS = _run_twins(None)[1]


@pytest.mark.parametrize(
    "interrupt_at",
    [pytest.param(i, id=f"{i:02d}-before-{op}-{_kind(k)}") for i, (op, k) in enumerate(TWIN_CALLS)],
)
def test_two_coordinators_started_together_interleaved_at_every_call(interrupt_at: int) -> None:
    bench, _ = _run_twins(interrupt_at)
    report = bench.check()
    assert report.ok, report.summary()
    assert len(bench.history.of("dispatch")) == 3  # 5 messages, batches of 2: no ticket twice
