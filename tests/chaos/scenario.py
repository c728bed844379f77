"""One chaos run from a `Config`: build the actors, run them, snapshot the bucket, check it.

`run_sim` runs on `MemoryStorage` under the deterministic `Sim` (simulated time, storage-level
faults); `run_cluster` runs real threads against an S3 endpoint with network faults injected
into each actor's boto3 client. Both return a `Result`: the checker's report, the history and
the fault counts. Besides the checker's invariants a report may hold ``crashed`` (a process
died of an exception the queue should never raise: guarantee 5) and ``stuck`` (not drained).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from s3queue.common.clock import Clock, FakeClock, SystemClock
from s3queue.dispatching import cursor
from s3queue.protocol.keys import QueueKeys
from s3queue.storage import MemoryStorage
from s3queue.storage.base import Storage
from s3queue.storage.s3 import S3Storage
from s3queue.working import apply

from chaos import actors, checker, flow, slots, workload
from chaos.cluster import Cluster
from chaos.configs import NO_HAZARDS, Config
from chaos.faults import FaultLog, FaultPlan, S3Faults, StorageFaults, ZombieYard
from chaos.history import Entry, FinalState, History, Oracle, live_work, snapshot
from chaos.process import Hazards
from chaos.sim import ActorFailed, Sim, patch_ids
from chaos.timeline import TERMINAL

PREFIX = "s3queue"
KEYS = QueueKeys(PREFIX, actors.QUEUE)


@dataclass
class Result:
    config: Config
    report: checker.Report
    history: History
    final: FinalState
    faults: Counter[str]
    finished: bool
    wall_s: float
    sim_s: float = 0.0

    def explain(self) -> str:
        return f"seed {self.config.seed}: {self.report.summary()}"


class _Progress:
    """Watches the history for the end: the producer done, and the queue empty (no message,
    no ticket). Until every message is terminal that is looked at only one call in 20, so a
    run that lost messages still ends, and a healthy one costs few LISTs."""

    def __init__(self) -> None:
        self.total: int | None = None
        self.terminal: set[str] = set()
        self.calls = 0

    def __call__(self, e: Entry) -> None:
        if e.kind == "producer_done":
            self.total = int(e["total"])
        elif e.kind == "ticket_write" and e["state"] == "committed":
            self.terminal |= {str(i) for i, k in e["outcomes"] if k in TERMINAL}

    def done(self, storage: Storage) -> bool:
        if self.total is None:
            return False
        self.calls += 1
        if len(self.terminal) < self.total and self.calls % 20:
            return False
        return not live_work(storage, KEYS)


def _spawn(
    runner: Sim | Cluster,
    config: Config,
    storage_for: Callable[[str, actors.Actor], Storage],
    clock: Clock,
    history: History,
) -> workload.Expected:
    rng = random.Random(f"{config.seed}:roles")
    half = config.skew_ms // 2

    def role(name: str, hazards: Hazards = NO_HAZARDS) -> actors.Role:
        offset = rng.randint(-half, half) if half else 0
        ppm = config.drift.ppm
        drift = replace(config.drift, ppm=rng.uniform(-ppm, ppm)) if ppm else config.drift
        return actors.Role(name, offset, hazards, drift)

    world = actors.World(
        history=history,
        clock=clock,
        storage_for=storage_for,
        settings=slots.scheduled(config.settings, config.schedule),
        coordination=config.coordination,
        serving=config.serving,
        invocations=actors.Invocations(history, config.invoke_duplicate, config.invoke_lose),
        run_s=config.run_s,
        heartbeat_thread=config.heartbeat_thread,
        schedules=slots.schedules_for(history) if config.schedule else None,
        shards=config.shards,
        chain=config.chain,
        sends=config.sends,
        seed=config.seed,
    )
    expected = workload.Expected()
    specs = workload.plan(config.messages, config.mix, config.settings, config.seed)
    producing = role("producer", config.producer_hazards)
    body = actors.producer(world, producing, specs, config.mix, expected, config.spread_s)
    runner.spawn("producer", body)
    for i in range(1, config.coordinators + 1):
        name = f"c{i}"
        runner.spawn(
            name, actors.coordinator_schedule(world, role(name, config.coordinator_hazards))
        )
    for i in range(1, config.workers + 1):
        name = f"w{i}"
        runner.spawn(name, actors.worker_process(world, role(name, config.worker_hazards)))
    if config.pauses:
        body = flow.pauser(world, role("pauser"), config.pauses, config.pause_s, config.spread_s)
        runner.spawn("pauser", body)
    for i in range(1, config.pullers + 1):
        name = f"puller{i}"
        body = actors.worker_process(world, role(name, config.worker_hazards), pull=True)
        runner.spawn(name, body)
    return expected


def _unacknowledged(history: History, expected: workload.Expected) -> None:
    """An enqueue that raised may still have applied: expect its poison to die too."""
    acked = set()
    for e in history.of("enqueue"):
        acked |= {e["message_id"]} if "message_id" in e.fields else set(e["message_ids"])
    for e in history.of("exec"):
        if e["id"] not in acked and e["kind"] == "poison":
            expected.poison.add(e["id"])
        elif e["id"] not in acked and e["kind"] == "permanent":
            expected.dead_at_once.add(e["id"])


def expectation(config: Config, expected: workload.Expected, *, drained: bool) -> checker.Expect:
    s = slots.scheduled(config.settings, config.schedule)
    every = s.parsed_schedule.interval_ms if s.parsed_schedule is not None else 0
    return checker.Expect(
        max_retries=s.max_retries,
        visibility_ms=round(s.visibility_timeout * 1000),
        backoff_base=s.backoff_base,
        backoff_cap=s.backoff_cap,
        poison=frozenset(expected.poison),
        dead_at_once=frozenset(expected.dead_at_once),
        maybe_dead=frozenset(expected.maybe_dead),
        # how far two clocks may be apart: the offsets, a step each, and a drift each
        skew_ms=config.skew_ms
        + 2 * (config.drift.step_ms + round(config.drift.ppm * config.max_s / 1000)),
        drained=drained,
        rate_limit=s.rate_limit,
        partition_rate_limit=s.partition_rate_limit,
        partition_concurrency=s.partition_concurrency,
        schedule_ms=every,
        schedule_catch_up_ms=round(s.schedule_catch_up * 1000),
    )


def run_sim(config: Config, *, watch: Callable[[Entry], None] | None = None) -> Result:
    """One deterministic run on MemoryStorage (see module); `watch` sees every entry."""
    started = time.monotonic()
    clock = FakeClock()
    history = History(clock.now_ms)
    progress = _Progress()
    history.watchers.extend([progress, *([watch] if watch else [])])
    memory = MemoryStorage(clock)
    oracle = Oracle(memory, history, KEYS.tickets)
    log = FaultLog(history)
    plan = FaultPlan(config.seed, config.faults)
    zombies = ZombieYard(oracle, clock.now_ms) if config.faults.get("zombie") else None

    def storage_for(name: str, actor: actors.Actor) -> Storage:
        return StorageFaults(oracle, plan, log, pause=actor.sleep, zombies=zombies)

    sim = Sim(config.seed, clock)
    crashed: ActorFailed | None = None
    # The module-level generator too (a producer's first shard, `ShardTurns`): else a run of
    # the `shards` profile did not replay (three runs of one seed, three histories).
    random.seed(f"chaos:{config.seed}")
    with patch_ids(config.seed), _apply_step(config.apply_step), _scan_page(config.scan_page):
        expected = _spawn(sim, config, storage_for, clock, history)
        start_ms = clock.now_ms()
        try:
            finished = sim.run(lambda: progress.done(memory), max_s=config.max_s)
        except ActorFailed as exc:  # a process died of an error the queue should never raise
            finished, crashed = False, exc
    result = _conclude(config, history, snapshot(memory, KEYS), expected, log, finished, crashed)
    result.wall_s, result.sim_s = time.monotonic() - started, (clock.now_ms() - start_ms) / 1000
    return result


def run_cluster(
    config: Config,
    make_client: Callable[[], Any],
    bucket: str,
    *,
    watch: Callable[[Entry], None] | None = None,
) -> Result:
    """One run of real threads on an S3 endpoint, network faults in every client."""
    started = time.monotonic()
    clock = SystemClock()
    history = History(clock.now_ms)
    progress = _Progress()
    history.watchers.extend([progress, *([watch] if watch else [])])
    log = FaultLog(history)
    plan = FaultPlan(config.seed, config.faults)
    stores: dict[str, Storage] = {}
    lock = threading.Lock()

    def storage_for(name: str, actor: actors.Actor) -> Storage:
        with lock:
            if name not in stores:
                client = S3Faults(plan, log).attach(make_client())
                s3 = S3Storage(client, bucket, base_delay=0.05, max_delay=1.0)
                stores[name] = Oracle(s3, history, KEYS.tickets)
            return stores[name]

    observer = S3Storage(make_client(), bucket)
    cluster = Cluster(config.seed)
    expected = _spawn(cluster, config, storage_for, clock, history)
    crashed: ActorFailed | None = None
    with _quiet_crashes():
        try:
            finished = cluster.run(lambda: progress.done(observer), max_s=config.max_s)
        except ActorFailed as exc:
            finished, crashed = False, exc
    final = snapshot(observer, KEYS)
    result = _conclude(config, history, final, expected, log, finished, crashed, slack_ms=250)
    result.wall_s = time.monotonic() - started
    return result


def _conclude(
    config: Config,
    history: History,
    final: FinalState,
    expected: workload.Expected,
    log: FaultLog,
    finished: bool,
    crashed: ActorFailed | None,
    slack_ms: int = 0,
) -> Result:
    """Check the run; add `crashed` or `stuck` when the run did not drain."""
    _unacknowledged(history, expected)
    expect = replace(expectation(config, expected, drained=finished), slack_ms=slack_ms)
    report = checker.check(list(history), final, expect)
    if crashed is not None:
        report.add("crashed", str(crashed), f"{crashed.__cause__!r} (guarantee 5)")
    elif not finished:
        report.add("stuck", "run", f"not drained within {config.max_s} s")
    return Result(config, report, history, final, _fault_counts(log, history), finished, 0.0)


@contextlib.contextmanager
def _apply_step(step: int) -> Iterator[None]:
    """Applies record their progress every `step` refs during the run, however fast they go
    (0: as shipped)."""
    saved = apply.APPLY_STEP, apply.APPLY_RECORD_MS
    if step:
        apply.APPLY_STEP, apply.APPLY_RECORD_MS = step, 0
    try:
        yield
    finally:
        apply.APPLY_STEP, apply.APPLY_RECORD_MS = saved


@contextlib.contextmanager
def _scan_page(keys: int) -> Iterator[None]:
    """LIST pages of ``msg/`` of `keys` keys during the run (0: as shipped)."""
    saved = cursor.PAGE
    if keys:
        cursor.PAGE = keys
    try:
        yield
    finally:
        cursor.PAGE = saved


def _fault_counts(log: FaultLog, history: History) -> Counter[str]:
    counts = Counter(log.counts)
    for e in history:
        if e.kind == "crash":
            timeout = "Lambda timeout" in str(e.get("where"))
            counts["lambda_timeout" if timeout else f"crash_{e.actor[0]}"] += 1
        elif e.kind in ("clock_step", "apply_paused", "apply_progress"):
            counts[e.kind] += 1
        elif e.kind in ("freeze", "invoke_lost"):
            counts[f"{e.kind}_{e.actor[0]}" if e.kind == "freeze" else e.kind] += 1
    return counts


class _quiet_crashes:
    """Threads killed by `Crash` or `Stopped` (heartbeat threads) die without a traceback."""

    def __enter__(self) -> None:
        from chaos.process import Crash
        from chaos.sim import Stopped

        self._old = threading.excepthook

        def hook(args: threading.ExceptHookArgs) -> None:
            if args.exc_type is not None and issubclass(args.exc_type, Crash | Stopped):
                return
            self._old(args)

        threading.excepthook = hook

    def __exit__(self, *exc: object) -> None:
        threading.excepthook = self._old
