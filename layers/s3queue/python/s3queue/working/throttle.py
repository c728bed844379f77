"""A rate-limited ticket's starts, taken from the limits' counters where the handlers start.

The worker takes the starts it needs (`acquire`) from every counter its ticket's permit names
(`s3queue.protocol.budgets`: the queue's, the partition's) before it claims the ticket, so it
waits for a window with budget holding no lease, and a crash while it waits counts nothing: the
claim, which notes the first message as running, comes only once a start is granted, and the
handler starts next. A handler may start only within the window of its grant and only as many
as granted; a ticket that outlasts its grant takes again, heartbeating while it waits. Nothing
is released for want of a permit, so a ticket no worker reached in time loses nothing and is
never dispatched again for it (the liveness bug of permits issued at dispatch).

Two counters: the second is asked for no more than the first granted, and what the first
granted beyond the second's grant is given back; a grant of windows that differ (a clock
ahead) is given back whole and taken again later.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from s3queue.common.clock import Clock
from s3queue.protocol.budgets import WINDOW_MS, Grant, give_back, take
from s3queue.protocol.keys import QueueKeys
from s3queue.protocol.permits import Permit
from s3queue.storage.base import Storage

WAIT_STEP_MS = 250
"""A wait for a window is slept in steps this long, so heartbeats fall due in between."""


@dataclass(slots=True)
class Throttle:
    """The starts one delivery of a rate-limited ticket holds, and how to take more."""

    storage: Storage
    clock: Clock
    counters: list[tuple[str, int]]
    """(counter key, limit) of every limit the ticket's starts are taken against."""
    grants: list[Grant] = field(default_factory=list)
    used: int = 0

    @classmethod
    def of(
        cls, storage: Storage, keys: QueueKeys, clock: Clock, permit: Permit, partition: str | None
    ) -> Throttle:
        """The throttle of a ticket of `partition` (its messages' partition)."""
        counters = []
        if permit.partition_rate:
            counters.append((keys.budget(partition), permit.partition_rate))
        if permit.rate:
            counters.append((keys.budget(None, whole=True), permit.rate))
        return cls(storage, clock, counters)

    def may_start(self) -> bool:
        now = self.clock.now_ms()
        return bool(self.grants) and self.grants[0].covers(now) and self.used < self.starts

    @property
    def starts(self) -> int:
        return min(g.starts for g in self.grants) if self.grants else 0

    def started(self) -> None:
        self.used += 1

    def acquire(
        self,
        want: int,
        stop: Callable[[], str | None],
        beat: Callable[[], None] | None = None,
    ) -> str | None:
        """Take up to `want` starts of the current window, waiting for a window with budget;
        the reason `stop` gives to stop waiting, if it gives one (then nothing is held)."""
        while True:
            reason = stop()
            if reason is not None:
                return reason
            now = self.clock.now_ms()
            grants = self._take(max(want, 1), now)
            if grants:
                self.grants, self.used = grants, 0
                self._wait(grants[0].window_ms, beat)  # a counter ahead: its window first
                return None
            self._wait(now - now % WINDOW_MS + WINDOW_MS, beat)

    def give_back(self) -> None:
        """Return the starts held and not made (a lost claim)."""
        self._give_back(self.grants, self.starts - self.used)
        self.grants, self.used = [], 0

    def _take(self, want: int, now: int) -> list[Grant]:
        """A grant from every counter, all of one window and of the same starts; [] if one
        has none left (what the others granted is given back)."""
        grants: list[Grant] = []
        for key, limit in self.counters:
            grant = take(self.storage, key, limit, want, now)
            if grant.starts == 0 or (grants and grant.window_ms != grants[0].window_ms):
                self._give_back(grants, want)
                give_back(self.storage, key, grant, grant.starts)
                return []
            self._give_back(grants, want - grant.starts)
            want = grant.starts
            grants.append(grant)
        return [Grant(g.window_ms, want) for g in grants]

    def _give_back(self, grants: list[Grant], starts: int) -> None:
        for (key, _), grant in zip(self.counters, grants, strict=False):
            give_back(self.storage, key, grant, starts)

    def _wait(self, until_ms: int, beat: Callable[[], None] | None) -> None:
        while (now := self.clock.now_ms()) < until_ms:
            if beat is not None:
                beat()
            self.clock.sleep(min(until_ms - now, WAIT_STEP_MS) / 1000)
