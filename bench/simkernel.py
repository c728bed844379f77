"""Virtual time for the AWS simulation: real code in threads, one at a time, on a shared clock.

Every simulated process (a producer, a coordinator or worker invocation) is an *actor*: a
thread that runs the real s3queue code until that code waits — an S3 request, an invoke, a
`Clock.sleep`, a `SimClock.condition` (group commit's waits) — and then hands the baton to the
actor or timer due next. Only one thread ever runs, so the order of events is the order of
virtual time, and waiting costs no wall time::

    kernel heap   (t=30 ms, producer-1) (t=42, coordinator) (t=55, timer: deliver event)
    coordinator   ... LIST (wait 50 ms) ------------------------------> resumes at t=92
    producer-1    PUT (wait 30 ms) --> resumes at t=30, applies the PUT, runs on ...

The CPU an actor spends between two waits (its own Python: parsing listings, planning,
encoding) can be charged to its virtual time too: a Lambda's code is not free, and the charge
shows where a busy coordinator's time goes. Each actor runs on a `Cpu`: a processor whose
`scale` is the virtual seconds one second of this machine's CPU takes on it (0 charges
nothing), shared by the actors of one process (a Lambda container's invocation and its threads:
CPython runs one thread at a time, so they queue for it, first come first served). A producer
or a process of its own gets a `Cpu` of its own at the kernel's `cpu_scale`; a Lambda container
gets one at its memory's share of a vCPU (`simaws.LambdaModel.cpu_scale`). Work that runs
outside this interpreter but would cost a real process CPU (the client's HTTP exchange of an S3
call) is charged with `charge`.

Except the part of a full garbage collection that a Lambda would not pay: every actor shares
this one interpreter's heap (the whole simulated world: S3's objects, every actor's state, the
tracker's records), so a full (generation 2) collection that an actor's allocation sets off
walks all of it, 255 ms of CPU at the median and up to 860 ms in a run at 1,801 messages a
second (41 of them), where a function's own heap (boto3 and s3queue loaded: ~72,000 objects)
takes ~30 ms. A full collection is charged at most what one of a heap like that costs,
measured when the kernel starts (`full_gc_ms`); the rest is left out (`gc_excluded_ms`).
Young collections (generations 0 and 1) scale with what the actor itself allocated: charged.

`stop` ends a run: every waiting actor is woken with `Stopped` (a `WorkerKilled`, which no
s3queue code catches), so its thread unwinds at once without touching the simulated world.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from s3queue.working.guard import WorkerKilled

Timer = Callable[[], None]


class Stopped(WorkerKilled):
    """The simulation ended: the actor's thread unwinds."""


@dataclass(eq=False)
class Cpu:
    """The processor an actor's Python runs on, shared by one process's actors."""

    scale: float
    """Virtual ms per ms of this machine's CPU (0: CPU is free)."""
    free_ms: float = 0.0
    """When the CPU charged to it so far is done: an actor resuming earlier waits for it."""


@dataclass(eq=False)
class Actor:
    """One simulated process: a thread that runs only while it holds the baton."""

    name: str
    role: str
    cpu: Cpu
    baton: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    cpu_mark: float = 0.0
    waited_ms: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    """Virtual time spent waiting, by cause (an S3 operation, "sleep", "invoke", ...)."""
    cpu_ms: float = 0.0
    """Virtual time charged for its own CPU (waiting for a busy `Cpu`: "cpu queue")."""


class Kernel:
    """The event loop of virtual time (see the module docstring). Times are ms."""

    def __init__(self, start_ms: float = 1_800_000_000_000.0, *, cpu_scale: float = 0.0) -> None:
        self.start_ms = start_ms
        self.now = start_ms
        self.cpu_scale = cpu_scale
        self.stopped = False
        self.errors: list[str] = []
        self.actors: list[Actor] = []
        self._heap: list[tuple[float, int, Actor | Timer]] = []
        self._seq = itertools.count()
        self._current: Actor | None = None
        self._local = threading.local()
        self._main = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self._parked: dict[Actor, int] = {}
        """Actors waiting for `unpark` (or their timeout): the token of their current park."""
        self.full_gc_ms = 0.0
        """What a full collection costs a heap of the library alone (see the module docstring)."""
        self.gc_excluded_ms = 0.0
        """CPU of full collections beyond `full_gc_ms`, charged to no actor."""
        self._gc_started = 0.0
        if cpu_scale:
            gc.collect()  # what an earlier run left, not part of the measure
            started = time.thread_time()
            gc.collect()
            self.full_gc_ms = (time.thread_time() - started) * 1000
            gc.callbacks.append(self._full_gc)

    # -- time as the running actor sees it ------------------------------------------------

    def actor(self) -> Actor | None:
        return getattr(self._local, "actor", None)

    def local_ms(self) -> float:
        """Now, for the calling actor: when its `Cpu` is free (not before the kernel's time)
        plus the CPU it spent since it resumed, at its `Cpu`'s scale."""
        me = self.actor()
        if me is None or not me.cpu.scale:
            return self.now
        return max(self.now, me.cpu.free_ms) + self._spent_ms(me)

    def _spent_ms(self, me: Actor) -> float:
        return (time.thread_time() - me.cpu_mark) * 1000 * me.cpu.scale

    def charge(self, ms: float) -> None:
        """Charge the calling actor `ms` of this machine's CPU it did not spend here."""
        me = self.actor()
        if me is not None:
            me.cpu_mark -= ms / 1000

    def _yield(self, me: Actor) -> float:
        """The calling actor stops running: its time now, its CPU booked on its `Cpu`."""
        if not me.cpu.scale:
            return self.now
        spent = self._spent_ms(me)
        queued = max(me.cpu.free_ms - self.now, 0.0)
        me.cpu_ms += spent
        me.waited_ms["cpu queue"] += queued
        me.cpu.free_ms = self.now + queued + spent
        return me.cpu.free_ms

    def _full_gc(self, phase: str, info: dict[str, int]) -> None:
        """A full collection costs the running actor at most `full_gc_ms` (module docstring)."""
        if info["generation"] != 2:
            return
        if phase == "start":
            self._gc_started = time.thread_time()
            return
        me = self.actor()
        spent_ms = (time.thread_time() - self._gc_started) * 1000
        beyond = max(spent_ms - self.full_gc_ms, 0.0)
        if me is not None:
            me.cpu_mark += beyond / 1000
            self.gc_excluded_ms += beyond

    def elapsed_s(self) -> float:
        return (self.now - self.start_ms) / 1000

    def wait(self, ms: float, cause: str) -> None:
        """Block the calling actor for `ms` of virtual time (from its local time)."""
        me = self._require()
        local = self._yield(me)
        me.waited_ms[cause] += max(ms, 0.0)
        self._push(local + max(ms, 0.0), me)
        self._switch(me)

    def park(self, timeout_ms: float | None, cause: str) -> None:
        """Block the calling actor until `unpark`, or until `timeout_ms` of virtual time passed."""
        me = self._require()
        local = self._yield(me)
        token = next(self._seq)
        self._parked[me] = token
        if timeout_ms is not None:
            self._push(local + max(timeout_ms, 0.0), lambda: self._wake(me, token))
        self._switch(me)
        me.waited_ms[cause] += self.now - local

    def unpark(self, actor: Actor) -> None:
        """Let a parked actor run on, at the caller's time (a no-op if it is not parked)."""
        if self._parked.pop(actor, None) is not None:
            self._push(self.local_ms(), actor)

    def _wake(self, actor: Actor, token: int) -> None:
        """A park's timeout: wake `actor` if it is still in that park."""
        if self._parked.get(actor) == token:
            del self._parked[actor]
            self._push(self.now, actor)

    def _require(self) -> Actor:
        me = self.actor()
        if me is None:
            raise RuntimeError("only a simulated actor can wait")
        if self.stopped:
            raise Stopped
        return me

    # -- scheduling ------------------------------------------------------------------------

    def spawn(
        self,
        body: Callable[[], object],
        *,
        at_ms: float,
        name: str,
        role: str,
        cpu: Cpu | None = None,
    ) -> Actor:
        """A new actor that starts running `body` at `at_ms` (virtual), on `cpu` (a process's
        thread) or on a CPU of its own at `cpu_scale`."""
        actor = Actor(name, role, cpu or Cpu(self.cpu_scale))
        self.actors.append(actor)
        thread = threading.Thread(target=self._body, args=(actor, body), name=name, daemon=True)
        self._threads.append(thread)
        thread.start()
        self._push(max(at_ms, self.now), actor)
        return actor

    def run_all(self, jobs: list[Callable[[], Any]]) -> list[Any]:
        """Run `jobs` at once, each as an actor of its own (threads in production: the
        coordinator's block of ticket publications), and wait until every one has returned."""
        me = self._require()
        results: dict[int, Any] = {}
        for i, job in enumerate(jobs):

            def body(i: int = i, job: Callable[[], Any] = job) -> None:
                results[i] = job()

            self.spawn(body, at_ms=self.local_ms(), name=f"{me.name}/{i}", role=me.role, cpu=me.cpu)
        while len(results) < len(jobs):
            self.wait(1.0, "publish")  # the threads' join, at 1 ms resolution
        return [results[i] for i in range(len(jobs))]

    def pool(self, size: int) -> Lanes:
        """A `RunAll` (and `Submit`) as production's `Threads(size)`: at most `size` jobs at once,
        each lane taking the next job as soon as its last one returned."""
        return Lanes(self, size)

    def call_at(self, at_ms: float, timer: Timer) -> None:
        """Run `timer` (which must not wait) at `at_ms`, in whichever thread passes the baton."""
        self._push(max(at_ms, self.now), timer)

    def _push(self, at_ms: float, item: Actor | Timer) -> None:
        heapq.heappush(self._heap, (at_ms, next(self._seq), item))

    def _body(self, actor: Actor, body: Callable[[], object]) -> None:
        actor.baton.acquire()
        if self.stopped:
            return
        self._local.actor = actor
        actor.cpu_mark = time.thread_time()
        try:
            body()
        except Stopped:
            return
        except Exception as exc:  # noqa: BLE001 - a crashed actor is reported, the run goes on
            self.errors.append(f"{actor.name}: {type(exc).__name__}: {exc}")
        if not self.stopped:
            self._yield(actor)
            self._switch(None)

    def _switch(self, me: Actor | None) -> None:
        """Hand the baton to whatever is due next; if `me` is an actor, block until its turn."""
        while self._heap:
            at, _, item = heapq.heappop(self._heap)
            self.now = max(self.now, at)
            if item is _END:
                self._main.release()
                break
            if isinstance(item, Actor):
                if item is me:  # our own turn at once: run on
                    me.cpu_mark = time.thread_time()
                    return
                item.baton.release()
                break
            item()  # a timer runs in this thread, then the next item is due
        else:
            self._main.release()  # nothing left to run
        if me is not None:
            me.baton.acquire()
            if self.stopped:
                raise Stopped
            me.cpu_mark = time.thread_time()

    def run(self, until_ms: float) -> None:
        """Run virtual time up to `until_ms` (absolute), or until nothing is left to run."""
        self._push(until_ms, _END)
        self._switch(None)
        self._main.acquire()

    def stop(self, join_s: float = 10.0) -> None:
        """End the run: every waiting actor unwinds (`Stopped`)."""
        self.stopped = True
        if self._full_gc in gc.callbacks:
            gc.callbacks.remove(self._full_gc)
        for _, _, item in self._heap:
            if isinstance(item, Actor):
                item.baton.release()
        for actor in self._parked:
            actor.baton.release()
        self._heap.clear()
        self._parked.clear()
        deadline = time.monotonic() + join_s
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0.01))


def _end() -> None:  # pragma: no cover - a marker, never called
    raise AssertionError


_END: Timer = _end


class SimLock:
    """`threading.Lock` for production code that holds a lock across an S3 call (the
    coordinator's `Publisher.doubting`): a real lock taken by a second actor would block the
    one running thread, and with it the whole simulation (it did, in an overload run). A
    waiter here waits 1 ms of virtual time and looks again."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.held = False

    def acquire(self) -> bool:
        while self.held:
            self.kernel.wait(1.0, "lock")
        self.held = True
        return True

    def release(self) -> None:
        self.held = False

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class SimClock:
    """The s3queue `Clock` on virtual time: what every simulated actor's code is given."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def now_ms(self) -> int:
        return int(self.kernel.local_ms())

    def sleep(self, seconds: float) -> None:
        # Even a zero sleep yields, so that actors due at the same instant take their turn.
        self.kernel.wait(max(seconds, 0.0) * 1000, "sleep")

    def condition(self) -> SimCondition:
        """What group commit (`producing.batching`) waits on: a condition on virtual time."""
        return SimCondition(self.kernel, "group commit")


class SimCondition:
    """`threading.Condition` on virtual time: `wait` parks the actor until a notify or its
    timeout. Only one actor runs at a time and none yields while it holds the condition except
    in `wait`, so holding it needs no lock (re-entrant, as `threading.Condition` is)."""

    def __init__(self, kernel: Kernel, cause: str) -> None:
        self.kernel, self.cause = kernel, cause
        self._waiters: list[Actor] = []

    def __enter__(self) -> bool:
        return True

    def __exit__(self, *exc: object) -> None:
        return None

    def wait(self, timeout: float | None = None) -> bool:
        """Park until notified (True) or `timeout` seconds of virtual time passed (False)."""
        me = self.kernel._require()
        self._waiters.append(me)
        try:
            self.kernel.park(None if timeout is None else timeout * 1000, self.cause)
        finally:
            notified = me not in self._waiters
            if not notified:
                self._waiters.remove(me)
        return notified

    def wait_for(self, predicate: Callable[[], Any], timeout: float | None = None) -> Any:
        """As `threading.Condition.wait_for`, with its deadline in virtual time."""
        end = None if timeout is None else self.kernel.local_ms() + timeout * 1000
        result = predicate()
        while not result:
            left = None if end is None else (end - self.kernel.local_ms()) / 1000
            if left is not None and left <= 0:
                break
            self.wait(left)
            result = predicate()
        return result

    def notify(self, n: int = 1) -> None:
        woken, self._waiters = self._waiters[:n], self._waiters[n:]
        for actor in woken:
            self.kernel.unpark(actor)

    def notify_all(self) -> None:
        self.notify(len(self._waiters))


class Lanes:
    """`Kernel.pool`: production's `Threads(size)` in virtual time. `__call__` runs a list and
    returns once every job has (ThreadPoolExecutor.map); `submit` queues one job, started by
    the first free lane, whose `result` the caller waits for (Executor.submit)."""

    def __init__(self, kernel: Kernel, size: int) -> None:
        self.kernel, self.size = kernel, max(size, 1)
        self._queue: list[_Job] = []
        self._lanes = 0

    def __call__(self, jobs: list[Callable[[], Any]]) -> list[Any]:
        if len(jobs) < 2:
            return [job() for job in jobs]
        pending = [self.submit(job) for job in jobs]
        return [p.result() for p in pending]

    def submit(self, job: Callable[[], Any]) -> _Job:
        item = _Job(self.kernel, job)
        self._queue.append(item)
        if self._lanes < self.size:
            self._lanes += 1
            me = self.kernel.actor()
            name = f"{me.name if me else 'main'}/lane{self._lanes}"
            role, cpu = (me.role, me.cpu) if me else ("lane", None)
            self.kernel.spawn(
                self._lane, at_ms=self.kernel.local_ms(), name=name, role=role, cpu=cpu
            )
        return item

    def _lane(self) -> None:
        try:
            while self._queue:
                item = self._queue.pop(0)
                if not item.cancelled:
                    item.run()
        finally:
            self._lanes -= 1


class _Job:
    """A submitted job in virtual time: its waiter parks until it ran."""

    def __init__(self, kernel: Kernel, job: Callable[[], Any]) -> None:
        self.kernel, self.job = kernel, job
        self.done = self.cancelled = False
        self.value: Any = None
        self.error: BaseException | None = None
        self.waiter: Actor | None = None

    def run(self) -> None:
        try:
            self.value = self.job()
        except Exception as exc:  # noqa: BLE001 - raised where its result is wanted
            self.error = exc
        self.done = True
        if self.waiter is not None:
            self.kernel.unpark(self.waiter)

    def result(self) -> Any:
        while not self.done:
            self.waiter = self.kernel.actor()
            self.kernel.park(None, "read-ahead")
        if self.error is not None:
            raise self.error
        return self.value

    @staticmethod
    def wait_any(jobs: list[_Job]) -> None:
        """Park the caller until one of `jobs` ran (concurrency.py, `wait_any`); the others
        forget it as their waiter, so that none wakes it later, wherever it waits then."""
        kernel = jobs[0].kernel
        me = kernel.actor()
        while not any(job.done for job in jobs):
            for job in jobs:
                job.waiter = me
            kernel.park(None, "read-ahead")
        for job in jobs:
            if job.waiter is me:
                job.waiter = None

    def cancel(self) -> bool:
        if self.done or self.cancelled:
            return False
        self.cancelled = True
        return True
