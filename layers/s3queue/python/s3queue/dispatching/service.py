"""`serve`: one coordinator run over every configured queue, in the Lambda or the local runtime.

Cost and latency:

- A queue starts in *probe* mode: one `Coordinator.probe` (one LIST) says whether it has work.
  No lease is taken before that, so a run over idle queues costs one LIST per queue, then ends.
  A queue an S3 event named (low-latency mode) is ticked at once instead: the event said.
- A queue with work is ticked every ``busy_interval`` while anything was dispatched, is waiting
  or in flight. After a tick that dispatched, the interval counts from its start: a tick that
  took longer (its LISTs and PUTs on AWS take a few hundred ms) is followed at once, never by
  an interval more on top (a message waits about one tick for the LIST that finds it: issue
  22's p99). After one that only watched tickets in flight, from its end (fewer LISTs). Once a
  tick finds nothing left it goes back to probes, with a doubling backoff, keeping its lease;
  idle for ``release_after``, it hands the lease back.
- Queues due at the same time are stepped at once when the caller gives a `RunAll` (the
  coordinator Lambda: a thread per queue), so one function serves many queues without their
  ticks adding up; each queue's coordinator has its own state, and only the run's counters
  are shared (under a lock).
- Another coordinator leading a queue (two runs started together) is no error: this run asks
  again every ``follow_interval`` and takes over when the leader releases or lapses. A run
  that will end (a Lambda's) writes when it plans to release in the lease, and a follower
  asks again just after that time if it comes sooner, then every few ms until it comes: on
  Lambda every scheduled run takes over from the one before, and the handover is the worst
  of issue 22's p99.
- A queue with a ``schedule`` has its due slot enqueued before each step (schedules.py), and
  the run wakes up for the next slot.

A storage error on one queue is logged and retried later while the others go on; one on every
queue at the start, or a missing bucket or credentials, ends the run with that error.

The run ends when the remaining time runs short (``reserve``), when `stop` is set, or when every
queue has been quiet for ``linger`` seconds (never, with ``linger=None``); it releases every
lease it holds on the way out. All waiting goes through the injected clock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from s3queue.common.clock import Clock, ms
from s3queue.common.concurrency import RunAll, settled
from s3queue.dispatching.coordinator import Coordinator, TickResult
from s3queue.dispatching.gauges import Gauges
from s3queue.dispatching.schedules import Schedules
from s3queue.errors import AccessDenied, BucketNotFound, StorageError, Throttled

log = logging.getLogger(__name__)

OnTick = Callable[[str, TickResult], None]
Mode = Literal["probe", "tick"]
RELEASE_MARGIN_MS, RELEASE_POLL_MS = 100, 25
"""A follower asks this long after the leader's planned release (its release PUT's time), then
this often until the release comes (a GET each)."""
FATAL = (BucketNotFound, AccessDenied)
"""Storage errors no retry cures: they end the run (the Lambda's error alarm sees them)."""


@dataclass(frozen=True)
class ServeSettings:
    """Pacing of a coordinator run (seconds)."""

    busy_interval: float = 0.1
    idle_interval: float = 0.25
    """First wait once a queue is idle; doubles up to ``max_idle_interval``."""
    max_idle_interval: float = 2.0
    follow_interval: float = 1.0
    linger: float | None = 10.0
    """End the run once every queue has been quiet this long; None: run until stopped."""
    release_after: float = 30.0
    reserve: float = 10.0
    """Remaining time kept back to release leases and return."""


@dataclass
class ServeResult:
    """What a run did."""

    reason: str = ""
    """Why it ended: idle, time or stopped."""
    probes: int = 0
    ticks: int = 0
    dispatched: int = 0
    reaped: int = 0
    errors: int = 0
    led: set[str] = field(default_factory=set)

    def to_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "probes": self.probes,
            "ticks": self.ticks,
            "dispatched": self.dispatched,
            "reaped": self.reaped,
            "errors": self.errors,
            "led": sorted(self.led),
        }


@dataclass(slots=True)
class _Slot:
    """One queue's place in the run."""

    coordinator: Coordinator
    mode: Mode = "probe"
    due_ms: int = 0
    backoff: float = 0.0
    quiet_since_ms: int | None = None

    @property
    def queue(self) -> str:
        return self.coordinator.keys.queue


class _Run:
    """The state of one `serve` call."""

    def __init__(
        self,
        coordinators: Iterable[Coordinator],
        clock: Clock,
        settings: ServeSettings,
        gauges: Gauges | None,
        on_tick: OnTick | None,
        hot: frozenset[str] = frozenset(),
        run_all: RunAll | None = None,
        schedules: Schedules | None = None,
    ) -> None:
        self.run_all = run_all
        self._lock = threading.Lock()
        """Guards the run's counters when queues are stepped at once (`run_all`)."""
        self.slots = [
            _Slot(c, mode="tick" if c.keys.queue in hot else "probe") for c in coordinators
        ]
        self.clock, self.settings = clock, settings
        self.gauges, self.on_tick = gauges, on_tick
        self.result = ServeResult()
        self.last_error: StorageError | None = None
        self.schedules = schedules
        self.next_slot_ms: int | None = None

    def enqueue_scheduled(self) -> None:
        """Enqueue the due slots of scheduled queues (schedules.py); a queue with a new slot is
        due at once (whichever process put the slot in), so this step looks at it."""
        if self.schedules is None:
            return
        due = self.schedules.enqueue_due(slot.coordinator for slot in self.slots)
        self.next_slot_ms = due.next_ms
        now = self.clock.now_ms()
        for slot in self.slots:
            if slot.queue in due.tried:
                slot.due_ms = min(slot.due_ms, now)

    def _follow_ms(self, slot: _Slot, now: int) -> int:
        """How long a follower waits before asking for the lease again: `follow_interval`, or
        until just after the leader's planned release (`LeaseDoc.ends_ms`) if that is sooner,
        then `RELEASE_POLL_MS`; a release not come a `follow_interval` later: that again."""
        follow, ends = ms(self.settings.follow_interval), slot.coordinator.lease.leader_ends_ms
        if not ends or ends + follow < now:
            return follow
        due = ends + RELEASE_MARGIN_MS - now
        return min(due, follow) if due > 0 else RELEASE_POLL_MS

    def step_due(self) -> None:
        now = self.clock.now_ms()
        due = [slot for slot in self.slots if slot.due_ms <= now]
        if self.run_all is None or len(due) < 2:
            for slot in due:
                self._step(slot)
        else:  # each queue's coordinator has its own state: only the counters are shared
            settled(self.run_all, [partial(self._step, slot) for slot in due])

    def _step(self, slot: _Slot) -> None:
        try:
            if slot.mode == "probe" and not self._probe(slot):
                return
            self._tick(slot)
        except FATAL:
            raise
        except StorageError as exc:  # S3 trouble on one queue: the others go on, this one waits
            with self._lock:
                self.result.errors += 1
                self.last_error = exc
            log.warning("queue %s: %s", slot.queue, exc, extra={"queue": slot.queue})
            if isinstance(exc, Throttled):
                self._throttled(slot, self.clock.now_ms())
            else:
                self._quiet(slot, self.clock.now_ms())

    def _probe(self, slot: _Slot) -> bool:
        with self._lock:
            self.result.probes += 1
        if slot.coordinator.probe():
            slot.mode = "tick"
            return True
        if self.gauges is not None:
            self.gauges.idle(slot.coordinator)
        now = self.clock.now_ms()
        quiet_since = self._quiet(slot, now)
        if slot.coordinator.lease.leading and now - quiet_since >= ms(self.settings.release_after):
            slot.coordinator.release()  # idle for long: let whoever comes next take over at once
        return False

    def _tick(self, slot: _Slot) -> None:
        began = self.clock.now_ms()
        result = slot.coordinator.tick()
        now = self.clock.now_ms()
        with self._lock:
            self.result.ticks += 1
            if result.leader:
                self.result.led.add(slot.queue)
                self.result.dispatched += result.dispatched
                self.result.reaped += result.reaped
        if self.on_tick is not None:
            self.on_tick(slot.queue, result)
        if not result.leader:
            slot.due_ms = now + self._follow_ms(slot, now)
            slot.quiet_since_ms = slot.quiet_since_ms or now
            return
        if self.gauges is not None:
            self.gauges.observe(slot.coordinator, result)
        if not result.idle:
            # Messages are flowing: the next tick is due an interval after this one's start.
            # A tick that only watched tickets in flight rests a whole interval after its end.
            self._busy(slot, began if result.dispatched else now)
        else:
            # Nothing left: watch with probes (one LIST) rather than ticks (three), keeping the
            # lease, so the wait before the next message (or the run's end) costs little.
            self._quiet(slot, now)
            slot.mode = "probe"

    def _busy(self, slot: _Slot, now: int) -> None:
        slot.due_ms = now + ms(self.settings.busy_interval)
        slot.backoff, slot.quiet_since_ms = 0.0, None

    def _throttled(self, slot: _Slot, now: int) -> None:
        """S3 is over its rate: back off (longer each time, up to the idle ceiling) and tick
        again. The queue has work, so it is not quiet: throttling never ends the run."""
        self._back_off(slot, now)
        slot.quiet_since_ms = None
        slot.mode = "tick"

    def _quiet(self, slot: _Slot, now: int) -> int:
        """Nothing to do on this queue: wait longer each time, up to the idle ceiling.

        Returns since when the queue has been quiet.
        """
        self._back_off(slot, now)
        slot.quiet_since_ms = slot.quiet_since_ms or now
        return slot.quiet_since_ms

    def _back_off(self, slot: _Slot, now: int) -> None:
        """Wait longer than last time (double, from `idle_interval`), up to the idle ceiling."""
        s = self.settings
        slot.backoff = min(s.max_idle_interval, slot.backoff * 2 or s.idle_interval)
        slot.due_ms = now + ms(slot.backoff)

    def all_probing(self) -> bool:
        return all(slot.mode == "probe" for slot in self.slots)

    def quiet_for_ms(self) -> int:
        """How long every queue has been quiet (0 if one is busy)."""
        since = [s.quiet_since_ms for s in self.slots if s.quiet_since_ms is not None]
        if len(since) < len(self.slots):
            return 0
        return self.clock.now_ms() - max(since)

    def next_due_ms(self) -> int:
        due = min(slot.due_ms for slot in self.slots)
        return due if self.next_slot_ms is None else min(due, self.next_slot_ms)

    def release(self) -> None:
        for slot in self.slots:
            if slot.coordinator.lease.leading:
                try:
                    slot.coordinator.release()
                except StorageError as exc:  # the lease lapses by itself after its TTL
                    log.warning("queue %s: release failed: %s", slot.queue, exc)


def _planned_end(clock: Clock, remaining_ms: Callable[[], int], reserve: int) -> int:
    """When a run releases its leases, by `clock`: when its remaining time reaches `reserve`;
    0 (no plan) for a run with no end in sight (the local runtime's)."""
    left = remaining_ms() - reserve
    return clock.now_ms() + max(left, 0) if left < DAY_MS else 0


DAY_MS = 86_400_000


def serve(
    coordinators: Iterable[Coordinator],
    *,
    remaining_ms: Callable[[], int],
    clock: Clock,
    settings: ServeSettings | None = None,
    gauges: Gauges | None = None,
    stop: threading.Event | None = None,
    on_tick: OnTick | None = None,
    hot: Iterable[str] = (),
    run_all: RunAll | None = None,
    schedules: Schedules | None = None,
) -> ServeResult:
    """Serve every queue until time runs short, `stop` is set, or all are quiet (see module).
    The `hot` queues are known to have work (an S3 event named them): ticked at once, with no
    probe first. `run_all` steps the queues that are due at the same time at once (the
    coordinator Lambda: threads, one per queue); None: one after another. Scheduled queues
    get their due slots enqueued before every step (schedules.py) by `schedules`, a new one
    if None (pass one to remember the slots enqueued from run to run)."""
    s = settings or ServeSettings()
    coordinators = list(coordinators)
    if schedules is None and any(c.settings.schedule is not None for c in coordinators):
        schedules = Schedules(clock)
    run = _Run(coordinators, clock, s, gauges, on_tick, frozenset(hot), run_all, schedules)
    if not run.slots:
        run.result.reason = "idle"
        return run.result
    reserve, first = ms(s.reserve), True
    for slot in run.slots:
        slot.coordinator.lease.ends = partial(_planned_end, clock, remaining_ms, reserve)
    try:
        while True:
            if stop is not None and stop.is_set():
                run.result.reason = "stopped"
                break
            if remaining_ms() <= reserve:
                run.result.reason = "time"
                break
            run.enqueue_scheduled()
            run.step_due()
            error = run.last_error
            # No queue answered at all: fail loudly (alarms see it); a throttled S3 is waited out.
            refused = error is not None and not isinstance(error, Throttled)
            if first and refused and error is not None and run.result.errors == len(run.slots):
                raise error
            if s.linger is not None and (
                (first and run.all_probing()) or run.quiet_for_ms() >= ms(s.linger)
            ):
                run.result.reason = "idle"
                break
            first = False
            wait = min(run.next_due_ms() - clock.now_ms(), remaining_ms() - reserve)
            clock.sleep(max(wait, 0) / 1000)
    finally:
        run.release()
    return run.result
