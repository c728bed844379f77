"""One simulated deployment: the stack's functions, its triggers and its producers, in virtual time.

What runs is the production code, wired as the Lambda entry points wire it:

- the coordinator function: `service.serve` over one `Coordinator` per queue, each with the
  real `LambdaInvoker`, owner = the request id, `Gauges` as `functions/coordinator/app.py`
  builds them (their metric lines are dropped); started by the EventBridge schedule every
  minute and, in low-latency mode, by each S3 Object Created event under ``msg/``/``inbox/``;
  timeout 70 s, 256 MB, reserved concurrency 2, events dropped after 1 min (the CDK stack);
- one worker function per queue: `Worker.process` on each ticket payload of the event, as
  `functions/worker/app.py` does, with the queue's settings as deployed (reserved concurrency
  `concurrency`, ``max_in_flight_tickets`` at most that, events dropped after 5 min). One
  difference: no heartbeat thread (`heartbeat_thread=False`), since a real thread would wait in
  wall time; the worker still renews its lease before a start once a beat is due;
- producers: `Queue.enqueue` / `Queue.enqueue_many` from actors on an open-loop schedule.

Every S3 call goes through the real `S3Storage` onto `SimS3` (sims3.py).
"""

from __future__ import annotations

import itertools
import math
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from s3queue.common.events import Event
from s3queue.contract.settings import CoordinatorSettings, QueueSettings
from s3queue.dispatching.coordinator import Coordinator
from s3queue.dispatching.gauges import Gauges
from s3queue.dispatching.invoke import Background, LambdaInvoker
from s3queue.dispatching.s3events import hot_queues
from s3queue.dispatching.service import serve
from s3queue.dispatching.sizing import Pace
from s3queue.errors import S3QueueError
from s3queue.message import Message
from s3queue.producing.producer import Queue
from s3queue.storage.s3 import S3Storage
from s3queue.working.readahead import READ_AHEAD
from s3queue.working.worker import Worker

from bench.simaws import Model
from bench.simkernel import Kernel, SimClock, SimLock
from bench.simlambda import LambdaService, SimContext, SimFunction, SimLambdaClient
from bench.sims3 import Pacing, SimS3, sim_storage

PREFIX = "s3queue"
DRAIN_S = 120.0
"""Virtual seconds a run may go on after its load ends, for every message to start."""
COORDINATOR = "coordinator"
COORDINATOR_TIMEOUT_S, COORDINATOR_MEMORY, COORDINATOR_CONCURRENCY = 70.0, 1024, 2
COORDINATOR_EVENT_AGE_S, WORKER_EVENT_AGE_S = 60.0, 300.0


def deployed(settings: QueueSettings) -> QueueSettings:
    """As `cdk/s3queue_cdk/workers.py` deploys them: no more tickets in flight than workers."""
    in_flight = min(settings.max_in_flight_tickets, settings.concurrency)
    return QueueSettings(**{**settings.__dict__, "max_in_flight_tickets": in_flight})


@dataclass
class Tracker:
    """Handler starts and ticket events, from the handlers and the listeners."""

    starts_ms: list[float] = field(default_factory=list)
    latencies_ms: list[tuple[float, float]] = field(default_factory=list)
    """(enqueued at, enqueue to handler start) per start, ms."""
    redelivered: int = 0
    dispatched_ms: dict[str, float] = field(default_factory=dict)
    claimed_ms: dict[str, float] = field(default_factory=dict)
    applied_ms: dict[str, float] = field(default_factory=dict)
    ticks: list[tuple[float, int, int, int]] = field(default_factory=list)
    """(virtual ms, dispatched, live tickets, waiting) per coordinator tick."""

    def started(self, now_ms: float, message: Message) -> None:
        self.starts_ms.append(now_ms)
        enqueued = message.enqueued_at.timestamp() * 1000
        self.latencies_ms.append((enqueued, now_ms - enqueued))
        self.redelivered += message.redelivered

    def __call__(self, event: Event) -> None:
        ticket = event.fields.get("ticket")
        if ticket is None:
            return
        store = {"dispatch": self.dispatched_ms, "claim": self.claimed_ms}.get(event.kind)
        if event.kind == "applied" and not event.fields.get("helper"):
            store = self.applied_ms
        if store is not None:
            store.setdefault(f"{event.queue}/{ticket}", event.at_ms)


@dataclass
class WorldConfig:
    """One deployment's shape."""

    queues: int = 1
    settings: QueueSettings = field(default_factory=QueueSettings)
    handler_ms: float = 0.0
    low_latency: bool = False
    schedule_offset_s: float = 2.0
    """When the first scheduled coordinator run fires (virtual seconds from the start)."""
    seed: int = 13
    coordinator_memory: int = COORDINATOR_MEMORY
    """The coordinator function's MB (`s3queue:coordinatorMemory`), and so its CPU."""
    adaptive_producers: bool = True
    """Producers enqueue through one client per queue (one service process) that paces itself
    (`pacing`); False: through plain clients that do not."""
    pacing: Pacing = "s3queue"
    """How that shared client paces: as `Queue`'s own client does (`s3queue.producing.pacing`)
    or, to compare, as botocore's adaptive retry mode does (what `Queue` used before)."""
    shards: int = 1
    """The producers' ``Queue(shards=)``: ungrouped messages spread over sibling folders."""
    producers: int = 400
    """At most this many producer actors per queue (each waits for its PUT before its next
    call: 400 make at most about 9,500 enqueues a second on AWS latencies)."""


class World:
    """The simulated region with the stack deployed in it (see the module docstring)."""

    def __init__(self, config: WorldConfig, model: Model) -> None:
        self.config, self.model = config, model
        self.rng = random.Random(config.seed)
        self.kernel = Kernel(cpu_scale=model.cpu_scale)
        self.clock = SimClock(self.kernel)
        self.s3 = SimS3(self.kernel, self.clock, model.s3, random.Random(self.rng.random()))
        self.lam = LambdaService(self.kernel, model.lam, random.Random(self.rng.random()))
        self.tracker = Tracker()
        self.settings = deployed(config.settings)
        self.queues = [f"q{n:02d}" for n in range(config.queues)]
        self.enqueued = 0
        self._producers: dict[str, S3Storage] = {}
        self.enqueue_failures = 0
        self.s3_events = 0
        self.schedule_events = 0
        self._functions()
        if config.low_latency:
            self.s3.on_created = self._object_created
        self.kernel.call_at(self.kernel.now + config.schedule_offset_s * 1000, self._scheduled)

    # -- the stack -------------------------------------------------------------------------

    def _functions(self) -> None:
        for queue in self.queues:
            self.lam.add(
                SimFunction(
                    f"worker_{queue}",
                    "worker",
                    self._work,
                    lambda q=queue: self._worker(q),  # type: ignore[misc]
                    self.settings.memory,
                    float(self.settings.timeout),
                    self.settings.concurrency,
                    WORKER_EVENT_AGE_S,
                )
            )
        self.lam.add(
            SimFunction(
                COORDINATOR,
                "coordinator",
                self._coordinate,
                self._coordinator_container,
                self.config.coordinator_memory,
                COORDINATOR_TIMEOUT_S,
                COORDINATOR_CONCURRENCY,
                COORDINATOR_EVENT_AGE_S,
            )
        )

    def _worker(self, queue: str) -> tuple[Worker, Callable[[Message], None]]:
        storage = sim_storage(self.s3, "worker")
        worker = Worker(
            storage,
            queue,
            prefix=PREFIX,
            settings=self.settings,
            clock=self.clock,
            rng=random.Random(self.rng.random()),
            listener=self.tracker,
            read_ahead=self.kernel.pool(READ_AHEAD),  # GETs overlap, as many as its threads
            chain=self.settings.chain,  # as functions/worker/app.py
        )
        return worker, self._handler

    def _handler(self, message: Message) -> None:
        self.tracker.started(self.kernel.local_ms(), message)
        if self.config.handler_ms:
            self.kernel.wait(self.config.handler_ms, "handler")

    def _work(self, event: dict[str, Any], context: SimContext, container: Any) -> None:
        worker, handler = container
        tickets = event.get("tickets")
        for payload in tickets if isinstance(tickets, list) else [event]:
            try:
                worker.process(payload, handler, remaining_ms=context.get_remaining_time_in_millis)
            except S3QueueError as exc:  # the entry point reports it and goes on
                self.kernel.errors.append(f"worker: {type(exc).__name__}: {exc}")

    def _coordinator_container(self) -> tuple[Any, LambdaInvoker, Gauges, dict[str, Pace]]:
        storage = sim_storage(self.s3, "coordinator")
        functions = {q: f"worker_{q}" for q in self.queues}
        invoker = LambdaInvoker(SimLambdaClient(self.lam), functions)
        paces = {q: Pace() for q in self.queues}  # as functions/coordinator/app.py keeps them
        return storage, invoker, Gauges(lambda _q, _v: None, self.clock), paces

    def _coordinate(self, event: dict[str, Any], context: SimContext, container: Any) -> None:
        storage, invoker, gauges, paces = container
        # invokes sent from lanes of their own, drained before the run ends (as the function)
        invokes = Background(self.kernel.pool(CoordinatorSettings().publish_concurrency).submit)
        coordinators = [
            Coordinator(
                storage,
                queue,
                invoker=invoker,
                prefix=PREFIX,
                settings=self.settings,
                coordination=CoordinatorSettings(),
                clock=self.clock,
                owner=context.aws_request_id[-12:],
                listener=self.tracker,
                # a block's publications overlap, as many as its threads (publish_concurrency)
                run_all=self.kernel.pool(CoordinatorSettings().publish_concurrency),
                pace=paces[queue],
                send=invokes,
                chain=self.settings.chain,  # as functions/coordinator/app.py
            )
            for queue in self.queues
        ]
        for coordinator in coordinators:  # held across an S3 call: a real lock would stall
            coordinator.publisher.doubting = cast("threading.Lock", SimLock(self.kernel))
        try:
            serve(
                coordinators,
                remaining_ms=context.get_remaining_time_in_millis,
                clock=self.clock,
                gauges=gauges,
                on_tick=lambda _q, r: self.tracker.ticks.append(
                    (self.kernel.now, r.dispatched, r.live_tickets, r.waiting)
                ),
                hot=hot_queues(event, PREFIX) & set(self.queues),  # as functions/coordinator/app.py
                run_all=self.kernel.run_all,  # the queues' ticks overlap, as the function's threads
            )
        finally:
            invokes.drain()

    # -- triggers --------------------------------------------------------------------------

    def _scheduled(self) -> None:
        self.schedule_events += 1
        self.lam.submit(COORDINATOR, {"detail-type": "Scheduled Event"})
        self.kernel.call_at(self.kernel.now + self.model.events.schedule_s * 1000, self._scheduled)

    def _object_created(self, key: str) -> None:
        parts = key.split("/")
        if len(parts) < 4 or parts[2] not in ("msg", "inbox"):
            return
        self.s3_events += 1
        event = {"detail-type": "Object Created", "detail": {"object": {"key": key}}}
        delay = self.model.events.s3_event.sample(self.rng)
        self.kernel.call_at(self.kernel.now + delay, lambda: self.lam.submit(COORDINATOR, event))

    # -- producers -------------------------------------------------------------------------

    def produce(self, *, calls_per_s: float, pack: int, start_s: float, end_s: float) -> None:
        """Open-loop producers: `calls_per_s` enqueue calls a second per queue, `pack` messages
        each (1: `enqueue`, else `enqueue_many`), from `start_s` to `end_s` (virtual seconds)."""
        actors = max(1, min(self.config.producers, math.ceil(calls_per_s * 0.25)))
        for queue in self.queues:
            for n in range(actors):
                body = self._producer(queue, n, actors, calls_per_s, pack, (start_s, end_s))
                at = self.kernel.start_ms + start_s * 1000
                self.kernel.spawn(body, at_ms=at, name=f"producer-{queue}-{n}", role="producer")

    def _producer_storage(self, queue: str) -> S3Storage:
        """A queue's producers share one client, as one service process does."""
        if not self.config.adaptive_producers:
            return sim_storage(self.s3, "producer")
        if queue not in self._producers:
            self._producers[queue] = sim_storage(self.s3, "producer", pacing=self.config.pacing)
        return self._producers[queue]

    def _producer(
        self, queue: str, n: int, actors: int, rate: float, pack: int, window: tuple[float, float]
    ) -> Callable[[], None]:
        storage, shards = self._producer_storage(queue), self.config.shards
        q = Queue(queue, storage=storage, clock=self.clock, prefix=PREFIX, shards=shards)
        kernel = self.kernel

        def body() -> None:
            for k in itertools.count():
                due = kernel.start_ms + (window[0] + (k * actors + n) / rate) * 1000
                if due >= kernel.start_ms + window[1] * 1000:
                    return
                if due > kernel.local_ms():
                    kernel.wait(due - kernel.local_ms(), "schedule")
                self.enqueue(q, pack, k)

        return body

    def enqueue(self, queue: Queue, pack: int, k: int) -> None:
        try:
            if pack == 1:
                queue.enqueue({"k": k})
            else:
                queue.enqueue_many([{"k": k, "i": i} for i in range(pack)])
        except S3QueueError:
            self.enqueue_failures += pack
            return
        self.enqueued += pack

    def at(self, seconds: float, body: Callable[[], object], name: str) -> None:
        """Run `body` as an actor at `seconds` of virtual time."""
        self.kernel.spawn(
            body, at_ms=self.kernel.start_ms + seconds * 1000, name=name, role="producer"
        )

    def run_until(self, seconds: float) -> None:
        self.kernel.run(self.kernel.start_ms + seconds * 1000)

    def drain(self, end_s: float) -> float:
        """Run to `end_s`, then on until every enqueued message started (at most `DRAIN_S`
        more), then 2 s for the last tickets to be applied; the second the drain ended."""
        self.run_until(end_s)
        elapsed = end_s
        while len(self.tracker.starts_ms) < self.enqueued and elapsed < end_s + DRAIN_S:
            elapsed += 1.0
            self.run_until(elapsed)
        self.run_until(elapsed + 2.0)
        return elapsed

    def stop(self) -> None:
        self.kernel.stop()


def settings_from(text: str, base: QueueSettings | None = None) -> QueueSettings:
    """Queue settings from ``name=value,...`` on top of `base` (the defaults)."""
    values = dict((base or QueueSettings()).__dict__)
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, value = part.partition("=")
        number = float(value)
        values[name.strip()] = int(number) if number.is_integer() else number
    return QueueSettings(**values)
