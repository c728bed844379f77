"""The local runtime's apply behind its worker thread (`s3queue.working.behind`), as a chaos
worker process runs it: one actor, so the apply is run *between* the process's own calls.

The apply of the ticket a worker just committed is kept, and run before a random one of the
process's next storage calls (the next ticket's lease check, claim, reads, heartbeats, commit:
what a thread of its own would overlap), or at the latest when the next apply is handed over,
as `ApplyBehind` waits for a thread's last apply then. A crash in it (at any of its calls) is a
crash of the process, as in a real one; an error is recorded as the runtime logs it, and the
ticket stays committed for the coordinator to dispatch again.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from s3queue.errors import S3QueueError

from chaos.history import History
from chaos.process import ProcessStorage

CHANCE = 0.3
"""Chance that a kept apply runs before any one storage call of its process (or before it
waits for work)."""
SHARE = 0.5
"""Share of the worker processes that apply behind; the others apply inline (a Lambda)."""


class ChaosBehind:
    """A `Behind` that runs the kept apply at a random later call of the same process. Its
    draws come from a generator of its own, seeded by the run's seed and the process, so that
    the actors' own generators (the rest of a seed's run) draw as they did without it."""

    @classmethod
    def maybe(
        cls, storage: ProcessStorage, seed: int, owner: str, history: History
    ) -> ChaosBehind | None:
        """One for `SHARE` of the worker processes, None (apply inline) for the others."""
        rng = random.Random(f"{seed}:{owner}:behind")
        return cls(storage, rng, history, owner) if rng.random() < SHARE else None

    def __init__(
        self, storage: ProcessStorage, rng: random.Random, history: History, owner: str
    ) -> None:
        self.rng, self.history, self.owner = rng, history, owner
        self.kept: tuple[str, Callable[[], object]] | None = None
        step = storage.step

        def step_then_maybe() -> None:
            step()
            if self.kept is not None and self.rng.random() < CHANCE:
                self.run("call")

        storage.step = step_then_maybe

    def submit(self, ticket: str, job: Callable[[], object]) -> None:
        self.run("submit")
        self.kept = (ticket, job)

    def idle(self) -> None:
        """The process is about to wait for work: the kept apply may run first."""
        if self.kept is not None and self.rng.random() < CHANCE:
            self.run("idle")

    def run(self, at: str) -> None:
        """Run the kept apply now, if there is one (`at`: before a call of the process, before
        it waits for work, or at the next submit; recorded)."""
        kept, self.kept = self.kept, None
        if kept is None:
            return
        self.history.record("apply_behind", self.owner, ticket=kept[0], at=at)
        try:
            kept[1]()
        except S3QueueError as exc:
            self.history.record("worker_error", self.owner, ticket=kept[0], error=str(exc))
