"""`Cluster`: the real runner. Actors are threads running at once, on the wall clock.

The same actor bodies as in `sim.py` (they only ever call ``step``, ``sleep``, ``wait`` and
``notify``), but here those calls really wait, S3 calls really overlap, and a freeze really
stops a thread. Use it with a real S3 server (SeaweedFS) for the network faults and real
concurrency; the interleaving is the machine's, so a run replays its fault mix, not its order.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable

from chaos.sim import ActorFailed, Stopped

Body = Callable[["ThreadActor"], None]


class ThreadActor:
    """One thread, with the `SimActor` interface on real time."""

    def __init__(self, cluster: Cluster, name: str, body: Body, seed: int) -> None:
        self.cluster, self.name, self.body = cluster, name, body
        self.rng = random.Random(f"{seed}:{name}")
        self.error: BaseException | None = None
        self._wake = threading.Event()
        self.thread = threading.Thread(target=self._main, name=f"chaos-{name}", daemon=True)

    def _main(self) -> None:
        try:
            self.body(self)
        except Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - reported by Cluster.run
            self.error = exc
            self.cluster.stop.set()

    def _check(self) -> None:
        if self.cluster.stop.is_set():
            raise Stopped

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def step(self) -> None:
        self._check()

    def sleep(self, seconds: float) -> None:
        self.cluster.stop.wait(max(seconds, 0.0))
        self._check()

    def wait(self, seconds: float = math.inf) -> None:
        # Wakes on notify; the stop flag is looked at every 0.2 s.
        end = time.monotonic() + seconds if math.isfinite(seconds) else math.inf
        while not self._wake.wait(min(0.2, max(end - time.monotonic(), 0))):
            self._check()
            if time.monotonic() >= end:
                break
        self._wake.clear()
        self._check()

    def notify(self) -> None:
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self.cluster.stop.is_set()


class Cluster:
    """Starts actors as threads; `run` watches for the end."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.actors: list[ThreadActor] = []
        self.stop = threading.Event()

    def spawn(self, name: str, body: Body) -> ThreadActor:
        actor = ThreadActor(self, name, body, self.seed)
        self.actors.append(actor)
        actor.thread.start()
        return actor

    def run(self, until: Callable[[], bool], *, max_s: float, poll: float = 0.5) -> bool:
        """Until `until()` (looked at every `poll` s) or `max_s`; True if `until` held."""
        deadline = time.monotonic() + max_s
        finished = False
        try:
            while not self.stop.wait(poll):
                finished = until()
                if finished or time.monotonic() >= deadline:
                    break
        finally:
            self.stop.set()
            for actor in self.actors:
                actor.notify()
            for actor in self.actors:
                actor.thread.join()
        for actor in self.actors:
            if actor.error is not None:
                raise ActorFailed(actor.name) from actor.error
        return finished
