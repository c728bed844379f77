"""The processes of a chaos run, as bodies a runner (`Sim` or `Cluster`) runs as actors.

- a *coordinator schedule*: one coordinator "Lambda run" after another (`serve` for `run_s`
  seconds, then a short gap), as EventBridge starts them; a crash ends a run early and the
  next run is a new process (new owner, empty memory);
- a *worker*: takes invocations one at a time and calls `Worker.process`, with a Lambda-like
  remaining time; a crash (or the Lambda timeout) kills the process, the next is a new one;
- the *producer*: enqueues the workload in small batches, spread over time.

Lambda's asynchronous invoke is at-least-once and may be lost: `Invocations` duplicates and
drops payloads at the configured rates.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from s3queue.common.clock import Clock
from s3queue.common.concurrency import RunAll
from s3queue.contract.settings import CoordinatorSettings, QueueSettings
from s3queue.dispatching.coordinator import Coordinator
from s3queue.dispatching.schedules import Schedules
from s3queue.dispatching.service import ServeSettings, serve
from s3queue.errors import S3QueueError
from s3queue.producing.producer import Queue
from s3queue.protocol.keys import QueueKeys
from s3queue.storage.base import Storage
from s3queue.storage.servertime import ServerClock
from s3queue.working.pull import Puller
from s3queue.working.worker import Worker

from chaos import workload
from chaos.behind import ChaosBehind
from chaos.history import History
from chaos.process import Answering, Crash, Drift, Hazards, ProcessStorage, SkewedClock

QUEUE = "chaos"
PREFIX = "s3queue"  # the default prefix of Coordinator, Worker and Queue
NO_HAZARDS = Hazards()
NO_DRIFT = Drift()


class Actor(Protocol):
    name: str

    @property
    def rng(self) -> Any: ...

    def now_ms(self) -> int: ...

    def step(self) -> None: ...

    def sleep(self, seconds: float) -> None: ...

    def wait(self, seconds: float = ...) -> None: ...

    def notify(self) -> None: ...


@dataclass(frozen=True)
class Role:
    """How one actor behaves: its clock offset and hazards."""

    name: str
    offset_ms: int = 0
    hazards: Hazards = NO_HAZARDS
    drift: Drift = NO_DRIFT


class Invocations:
    """The worker invocations in flight: Lambda's async invoke, duplicating and losing some."""

    def __init__(self, history: History, duplicate: float = 0.0, lose: float = 0.0) -> None:
        self.history, self.duplicate, self.lose = history, duplicate, lose
        self.items: list[dict[str, Any]] = []
        self.waiting: list[Actor] = []
        self._lock = threading.Lock()

    def invoker(self, actor: Actor) -> Callable[[dict[str, Any]], None]:
        def invoke(payload: dict[str, Any]) -> None:
            draw = actor.rng.random()
            if draw < self.lose:
                self.history.record("invoke_lost", actor.name, ticket=payload["ticket"])
                return
            copies = 2 if draw < self.lose + self.duplicate else 1
            with self._lock:
                self.items.extend([payload] * copies)
                waiting, self.waiting = self.waiting, []
            for other in waiting:
                other.notify()

        return invoke

    def take(self, actor: Actor) -> dict[str, Any]:
        while True:
            with self._lock:
                if self.items:
                    return self.items.pop(actor.rng.randrange(len(self.items)))
                self.waiting.append(actor)
            actor.wait()


class Deadline:
    """A point in time on one clock: a Lambda invocation's end."""

    def __init__(self, clock: Clock, after_ms: int) -> None:
        self.clock, self.at_ms = clock, clock.now_ms() + after_ms

    def at(self) -> int:
        return self.at_ms

    def remaining(self) -> int:
        return self.at_ms - self.clock.now_ms()


@dataclass
class World:
    """What every actor of one run shares."""

    history: History
    clock: Clock
    """The reference clock; each actor sees it through its own offset."""
    storage_for: Callable[[str, Actor], Storage]
    """The storage (with network faults) of one actor."""
    settings: QueueSettings
    coordination: CoordinatorSettings
    serving: ServeSettings
    invocations: Invocations
    run_s: float = 60.0
    restart_s: float = 1.0
    heartbeat_thread: bool = False
    schedules: Callable[[str, Clock], Schedules] | None = None
    """Makes a coordinator process's `Schedules` (a scheduled queue: slots.py)."""
    shards: tuple[int, ...] = (1,)
    chain: bool = False
    """Park successors and chain them (`Config.chain`)."""
    sends: bool = False
    """Coordinators send from threads of their own (`Config.sends`)."""
    seed: int = 0
    """The run's seed: the apply-behind model draws from a generator of its own (behind.py)."""
    """The producer's ``shards``, one per process life in turn: a crash changes the layout."""

    def process(self, actor: Actor, role: Role, owner: str) -> tuple[ProcessStorage, SkewedClock]:
        """The storage and clock of one new process of `actor`."""
        clock = SkewedClock(
            self.clock,
            role.offset_ms,
            sleep=actor.sleep,
            drift=role.drift,
            rng=actor.rng,
            history=self.history,
            actor=owner,
        )
        storage = ProcessStorage(
            self.storage_for(role.name, actor),
            owner,
            history=self.history,
            hazards=role.hazards,
            rng=actor.rng,
            step=actor.step,
            pause=actor.sleep,
            now_ms=actor.now_ms,
        )
        return storage, clock


def coordinator_schedule(world: World, role: Role) -> Callable[[Actor], None]:
    def body(actor: Actor) -> None:
        for run in range(1, 1_000_000):
            owner = f"{role.name}.{run}"
            storage, clock = world.process(actor, role, owner)
            sent: list[Callable[[], None]] = []

            def flush(sent: list[Callable[[], None]] = sent, owner: str = owner) -> None:
                if sent:  # what this run sent to its threads runs now, in a random order
                    world.history.record("sent_run", owner, jobs=len(sent))
                    jobs = sent[:]
                    sent.clear()
                    _shuffled(actor)(jobs)  # each job reports its own errors, as Background's

            coordinator = Coordinator(
                storage,
                QUEUE,
                invoker=world.invocations.invoker(actor),
                settings=world.settings,
                coordination=world.coordination,
                clock=clock,
                owner=owner,
                listener=world.history.listener(owner),
                run_all=_shuffled(actor, flush, partial(world.history.record, "overlap", owner)),
                chain=world.chain,
                send=sent.append if world.sends else None,
            )
            run_ends = Deadline(clock, round(world.run_s * 1000))
            schedules = world.schedules(owner, clock) if world.schedules else None
            try:
                serve(
                    [coordinator],
                    remaining_ms=run_ends.remaining,
                    clock=clock,
                    settings=world.serving,
                    schedules=schedules,
                )
                flush()  # the run drains its threads before it returns
            except Crash:
                pass  # what it had sent and not run is lost with the process
            except S3QueueError as exc:  # the Lambda run fails; the next scheduled one goes on
                world.history.record("coordinator_error", owner, error=_describe(exc))
            actor.sleep(world.restart_s)

    return body


PULL_IDLE_S = 0.5
"""How long a pulling worker waits after a poll that found nothing."""


def _shuffled(
    actor: Actor,
    before: Callable[[], None] | None = None,
    overlap: Callable[..., object] | None = None,
) -> RunAll:
    """Jobs one by one in a random order, as threads may finish them: a block's later seq can
    be in S3 while an earlier one is not yet (or never). `before` runs first: what the
    coordinator sent to its own threads since lands somewhere inside a later tick. A steady
    leader's LIST of tickets and its read (`beside`) go in either order: which went first is
    told to `overlap` (recorded in the history, for the guard tests)."""

    def run_all(jobs: list[Callable[[], Any]]) -> list[Any]:
        if before is not None:
            before()
        results: dict[int, Any] = {}
        order = actor.rng.sample(range(len(jobs)), len(jobs))
        if overlap is not None and _lists_tickets_beside(jobs):
            overlap(first="tickets" if order[0] == 0 else "read")
        for i in order:
            results[i] = jobs[i]()
        return [results[i] for i in range(len(jobs))]

    return run_all


def _lists_tickets_beside(jobs: list[Callable[[], Any]]) -> bool:
    """Are `jobs` a tick's LIST of tickets and its read, at once (coordinator.py)?"""
    side = getattr(jobs[0], "args", (None,))[0] if len(jobs) == 2 else None
    return getattr(side, "__name__", "") == "_list_tickets"


def worker_process(world: World, role: Role, *, pull: bool = False) -> Callable[[Actor], None]:
    """A worker process, restarted after each crash: served by invocations, or (`pull`) a
    process that is never invoked and claims what it finds by listing tickets (`Puller`)."""

    def body(actor: Actor) -> None:
        for incarnation in range(1, 1_000_000):
            owner = f"{role.name}.{incarnation}"
            try:
                _serve_invocations(world, role, actor, owner, pull=pull)
            except Crash:
                actor.sleep(world.restart_s)

    return body


def _serve_invocations(
    world: World, role: Role, actor: Actor, owner: str, *, pull: bool = False
) -> None:
    storage, clock = world.process(actor, role, owner)
    puller = Puller(storage, QueueKeys(PREFIX, QUEUE), clock, salt=owner)  # replays exactly
    behind = ChaosBehind.maybe(storage, world.seed, owner, world.history)
    worker = Worker(
        storage,
        QUEUE,
        settings=world.settings,
        coordination=world.coordination,
        clock=clock,
        rng=actor.rng,
        owner=owner,
        listener=world.history.listener(owner),
        heartbeat_thread=world.heartbeat_thread,
        read_ahead=_shuffled(actor),  # reads of a ticket's objects, as threads may order them
        behind=None if world.chain else behind,  # a chaining worker applies inline (Lambda's)
        chain=world.chain,
    )
    timeout_ms = world.settings.timeout * 1000
    while True:
        if behind is not None:
            behind.idle()  # before the process waits for work, the kept apply may run
        if pull:
            try:
                found = puller.poll(1)
            except S3QueueError as exc:
                world.history.record("worker_error", owner, error=_describe(exc))
                found = []
            if not found:
                actor.sleep(PULL_IDLE_S)
                continue
            payload = found[0]
        else:
            payload = world.invocations.take(actor)
        deadline = Deadline(clock, timeout_ms)
        handle = workload.handler(world.history, owner, clock.sleep, clock.now_ms, deadline.at)
        try:
            worker.process(payload, handle, remaining_ms=deadline.remaining)
        except S3QueueError as exc:  # as the worker Lambda: logged, the lease protocol recovers
            world.history.record(
                "worker_error", owner, ticket=payload["ticket"], error=_describe(exc)
            )


def producer(
    world: World,
    role: Role,
    specs: list[workload.Spec],
    mix: workload.Mix,
    expected: workload.Expected,
    spread_s: float,
) -> Callable[[Actor], None]:
    def body(actor: Actor) -> None:
        lives = iter(range(1, 1_000_000))
        sender = _producer_process(world, role, actor, expected, next(lives))
        batches = [specs[i : i + 12] for i in range(0, len(specs), 12)]
        steps: list[tuple[list[workload.Spec], Callable[[workload.Producer], None]]] = []
        if mix.malformed:
            partitioned = mix.partitions != (None,)
            put = functools.partial(
                workload.Producer.put_malformed,
                max_bytes=world.settings.max_message_bytes,
                partitioned=partitioned,
            )
            steps.append(([], put))
        steps += [(b, functools.partial(workload.Producer.send, specs=b, mix=mix)) for b in batches]
        steps += [([], functools.partial(_later_round, mix=mix))] * mix.resend_rounds
        if mix.purges and actor.rng.random() < mix.purges:
            steps.insert(len(batches) // 2 + 1, ([], functools.partial(workload.Producer.purge)))
        for sent, step in steps:
            try:
                step(sender)
            except Crash:  # the producer died mid-enqueue: a new process goes on
                if sent:  # whatever of the batch was not acknowledged may have landed
                    world.history.record(
                        "enqueue_failed", role.name, ns=[s.n for s in sent], error="crashed"
                    )
                sender = _producer_process(world, role, actor, expected, next(lives), sender)
            if step.func is not workload.Producer.put_malformed:
                actor.sleep(spread_s / max(len(batches), 1))
        while sender.redriving:  # the operator finishes a redrive that failed midway
            try:
                sender.redrive()
            except Crash:
                sender = _producer_process(world, role, actor, expected, next(lives), sender)
            actor.sleep(1.0)
        world.history.record("producer_done", role.name, total=expected.total)

    return body


def _producer_process(
    world: World,
    role: Role,
    actor: Actor,
    expected: workload.Expected,
    life: int,
    dead: workload.Producer | None = None,
) -> workload.Producer:
    """One producer process (a new one after each crash: it knows what the `dead` one sent,
    and whether its redrive finished), with its own storage and clock."""
    name = role.name if life == 1 else f"{role.name}.{life}"
    storage, clock = world.process(actor, role, name)
    # As in production, a group's keys are S3's time, learnt from the answers' Date
    # (storage/servertime.py): here the reference clock, in whole seconds.
    order = ServerClock(clock)
    storage = Answering(storage, world.clock, order)  # type: ignore[assignment]
    order.probe = lambda: storage.head(f"{PREFIX}/{QUEUE}/clock-probe") and None
    queue = Queue(
        QUEUE,
        storage=storage,
        clock=clock,
        max_message_bytes=world.settings.max_message_bytes,
        listener=world.history.listener(role.name),
        shards=world.shards[(life - 1) % len(world.shards)],
    )
    queue.writer.order = order
    sender = workload.Producer(queue, world.history, expected, actor.rng)
    if dead is not None:
        sender.explicit, sender.redriving = dead.explicit, dead.redriving
        sender.versions = dead.versions
    return sender


def _later_round(sender: workload.Producer, mix: workload.Mix) -> None:
    """After the last batch: an explicit id enqueued again, or the DLQ redriven (or both)."""
    sender.resend_some(mix.resend_ids)
    if sender.rng.random() < mix.redrives:
        sender.redrive()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
