"""`Sim`: a deterministic runner. Actors are threads, but exactly one runs at a time.

Each actor (a coordinator schedule, a worker, the producer) runs real queue code in its own
thread and *parks* at every storage call (`ProcessStorage.step`), at every sleep, and while it
waits for an invocation. The scheduler then picks the next actor among those whose wake time
has come, with a seeded generator; when none is ready it moves the `FakeClock` to the earliest
wake time. So S3 calls interleave at random but reproducibly, a handler "taking 20 s" lets
everyone else run for 20 simulated seconds, and an hour of chaos takes seconds of CPU.

Replay: the same seed and configuration give the same interleaving, faults and history
(message ids come from a seeded generator during a run, see `patch_ids`; ETags and tokens
stay random, but only their equality matters).
"""

from __future__ import annotations

import contextlib
import math
import random
import threading
from collections.abc import Callable, Iterator

from s3queue.common.clock import FakeClock

Body = Callable[["SimActor"], None]


class Stopped(BaseException):
    """The run is over: unwinds a parked actor's thread."""


class SimActor:
    """One actor's handle on the simulation: its name, its generator, and how it yields."""

    def __init__(self, sim: Sim, name: str, body: Body, seed: int) -> None:
        self.sim, self.name, self.body = sim, name, body
        self.rng = random.Random(f"{seed}:{name}")
        self.wake_at: float = 0
        self.done = False
        self.error: BaseException | None = None
        self.go = threading.Event()
        self.thread = threading.Thread(target=self._main, name=f"sim-{name}", daemon=True)

    def _main(self) -> None:
        self.go.wait()
        self.go.clear()
        try:
            if not self.sim.stopping:
                self.body(self)
        except Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - reported by Sim.run
            self.error = exc
        finally:
            self.done = True
            self.sim.parked.set()

    def _park(self, wake_at: float) -> None:
        self.wake_at = wake_at
        self.sim.parked.set()
        self.go.wait()
        self.go.clear()
        if self.sim.stopping:
            raise Stopped

    def now_ms(self) -> int:
        return self.sim.clock.now_ms()

    def step(self) -> None:
        """Let any other ready actor run first (a yield point)."""
        self._park(self.now_ms())

    def sleep(self, seconds: float) -> None:
        self._park(self.now_ms() + max(round(seconds * 1000), 0))

    def wait(self, seconds: float = math.inf) -> None:
        """Park until `notify` or until `seconds` have passed."""
        self._park(self.now_ms() + seconds * 1000 if math.isfinite(seconds) else math.inf)

    def notify(self) -> None:
        self.wake_at = min(self.wake_at, self.now_ms())

    @property
    def stopping(self) -> bool:
        return self.sim.stopping


class Sim:
    """The scheduler (see module)."""

    def __init__(self, seed: int, clock: FakeClock | None = None) -> None:
        self.seed = seed
        self.clock = clock or FakeClock()
        self.rng = random.Random(f"{seed}:scheduler")
        self.actors: list[SimActor] = []
        self.parked = threading.Event()
        self.stopping = False
        self.steps = 0

    def spawn(self, name: str, body: Body) -> SimActor:
        actor = SimActor(self, name, body, self.seed)
        self.actors.append(actor)
        actor.thread.start()
        return actor

    def run(self, until: Callable[[], bool], *, max_s: float, check_every: int = 500) -> bool:
        """Run until `until()` (checked when time moves, and every `check_every` steps) or
        `max_s` simulated seconds; True if `until` held. Raises the first actor error."""
        deadline = self.clock.now_ms() + max_s * 1000
        finished = False
        try:
            while not finished:
                ready = [a for a in self.actors if not a.done and a.wake_at <= self.clock.now_ms()]
                if ready:
                    self._grant(self.rng.choice(ready))
                    self.steps += 1
                    finished = self.steps % check_every == 0 and until()
                    continue
                waiting = [a.wake_at for a in self.actors if not a.done]
                if not waiting or min(waiting) > deadline:
                    break
                self.clock.advance((min(waiting) - self.clock.now_ms()) / 1000)
                finished = until()
        finally:
            self._stop()
        return finished

    def _grant(self, actor: SimActor) -> None:
        self.parked.clear()
        actor.go.set()
        self.parked.wait()
        if actor.error is not None:
            raise ActorFailed(actor.name) from actor.error

    def _stop(self) -> None:
        self.stopping = True
        for actor in self.actors:
            while not actor.done:
                self.parked.clear()
                actor.go.set()
                self.parked.wait()
            actor.thread.join()


class SeededIds:
    """ULID-like message ids from a seeded generator, for `patch_ids`: S3Queue's own ids mix in
    os.urandom, and two copies sharing a sort time list in the order of their ids, so random
    ids would make a replay diverge."""

    _CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(f"{seed}:ids")
        self.last = 0

    def __call__(self, now_ms: int | None = None) -> str:
        value = max(((now_ms or 0) << 80) | self.rng.getrandbits(80), self.last + 1)
        self.last = value
        return "".join(self._CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


@contextlib.contextmanager
def patch_ids(seed: int) -> Iterator[None]:
    """Seeded message ids in the producer for the duration (see `SeededIds`)."""
    from s3queue.producing import batch, producer
    from s3queue.protocol import writer

    original = producer.new_id  # type: ignore[attr-defined]
    seeded = SeededIds(seed)
    producer.new_id = writer.new_id = batch.new_id = seeded  # type: ignore[attr-defined]
    try:
        yield
    finally:
        producer.new_id = writer.new_id = batch.new_id = original  # type: ignore[attr-defined]


class ActorFailed(Exception):
    """An actor raised something the queue should never raise (a crashed coordinator...)."""
