"""Process faults: a process killed between two S3 calls, a process frozen, a skewed clock.

`ProcessStorage` is the storage one process (one worker or coordinator incarnation) sees. Before
each call it gives the runner a chance to switch to another actor (`step`), may freeze the
process (`pause` for a while, as a GC pause, a stopped VM or a hung connection would), and may
kill it: `Crash` is a `WorkerKilled`, the `BaseException` the core never catches (not even
around a handler), and once a process has crashed every later call of it raises `Crash` again
(a dead process sends nothing: not even the release in a ``finally``).

A crash *before* call n means the request never left; *after* call n means S3 applied it and
the process died before it could use the answer. Between them they cover every point between
two calls, which is all a process can be killed at, as far as S3 can tell.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

from s3queue.common.clock import Clock
from s3queue.errors import MalformedMessage
from s3queue.protocol.tickets import Ticket
from s3queue.storage.base import Head, Object, Page, Storage
from s3queue.storage.servertime import ServerClock
from s3queue.storage.streams import Source
from s3queue.working.guard import WorkerKilled

from chaos.history import History

OPS = ("get", "head", "put", "delete", "delete_many", "list")


class Crash(WorkerKilled):
    """The process died (killed, out of memory, Lambda timeout)."""


@dataclass(frozen=True)
class CrashAt:
    """Kill the process at its `index`-th storage call (0-based), before or after it."""

    index: int
    after: bool = False

    def __str__(self) -> str:
        return f"{'after' if self.after else 'before'} call {self.index}"


@dataclass(frozen=True)
class Hazards:
    """Random process faults, per storage call."""

    crash_rate: float = 0.0
    freeze_rate: float = 0.0
    freeze_s: tuple[float, float] = (0.0, 0.0)


class ProcessStorage:
    """The storage of one process, with yield points, freezes and crashes (see module)."""

    def __init__(
        self,
        inner: Storage,
        actor: str,
        *,
        history: History | None = None,
        crash_at: CrashAt | None = None,
        hazards: Hazards | None = None,
        rng: random.Random | None = None,
        step: Callable[[], None] = lambda: None,
        pause: Callable[[float], None] | None = None,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self.inner, self.actor, self.history = inner, actor, history
        self.crash_at, self.hazards = crash_at, hazards or Hazards()
        self.rng = rng or random.Random(0)
        self.step, self.pause, self.now_ms = step, pause, now_ms
        self.calls: list[tuple[str, str]] = []
        self.dead = False
        self.frozen_until = 0

    def _call(self, op: str, key: str, run: Callable[[], Any], body: bytes | None = None) -> Any:
        if self.dead:
            raise Crash(f"{self.actor} is dead")
        self.step()
        self._hold()
        index = len(self.calls)
        self.calls.append((op, key))
        self._maybe_freeze(op, key)
        if self._crashes(index, after=False):
            self._die(f"before {op} {key}", op, key)
        result = run()
        if self._crashes(index, after=True):
            self._die(f"after {op} {key}", op, key, body)
        return result

    def _crashes(self, index: int, *, after: bool) -> bool:
        if self.crash_at is not None:
            return self.crash_at.index == index and self.crash_at.after == after
        rate = self.hazards.crash_rate / 2  # half before, half after the call
        return rate > 0 and self.rng.random() < rate

    def _maybe_freeze(self, op: str, key: str) -> None:
        h = self.hazards
        if self.now_ms is None or h.freeze_rate <= 0 or self.rng.random() >= h.freeze_rate:
            return
        seconds = self.rng.uniform(*h.freeze_s)
        if self.history is not None:
            self.history.record("freeze", self.actor, where=f"{op} {key}", seconds=seconds)
        self.frozen_until = self.now_ms() + round(seconds * 1000)
        self._hold()

    def _hold(self) -> None:
        """A frozen process makes no call, from any of its threads, until the freeze ends."""
        if self.now_ms is None or self.pause is None:
            return
        while (left := self.frozen_until - self.now_ms()) > 0:
            self.pause(left / 1000)

    def _die(self, where: str, op: str, key: str, body: bytes | None = None) -> None:
        self.dead = True
        fields: dict[str, Any] = {"where": where}
        if body is not None and "/tickets/" in key:
            fields.update(_ticket_fields(key, body))
        if self.history is not None:
            self.history.record("crash", self.actor, **fields)
        raise Crash(where)

    def get(self, key: str, *, if_match: str | None = None) -> Object | None:
        # The gate GETs the controls document (``tickets/~controls``) when the LIST of tickets
        # showed it changed: that GET, not the LIST, is what its tick then goes by, and it may
        # come well after the LIST (a slow reconcile). Recorded as a read of its own, before
        # the request leaves and once its answer came, as `list` records the LIST (flow.py).
        watched = self.history is not None and key.endswith("/tickets/~controls")
        if watched and self.history is not None:
            self.history.record("controls_read", self.actor)
        result: Object | None = self._call(
            "get", key, lambda: self.inner.get(key, if_match=if_match)
        )
        if watched and self.history is not None:
            self.history.record("controls_seen", self.actor)
        return result

    def head(self, key: str) -> Head | None:
        result: Head | None = self._call("head", key, lambda: self.inner.head(key))
        return result

    def put(
        self,
        key: str,
        body: bytes,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
        token: str | None = None,
        resend_if: Callable[[], bool] | None = None,
    ) -> str:
        def run() -> str:
            return self.inner.put(
                key,
                body,
                if_match=if_match,
                if_none_match=if_none_match,
                token=token,
                resend_if=resend_if,
            )

        result: str = self._call("put", key, run, body)
        return result

    def delete(self, key: str, *, if_match: str | None = None) -> None:
        self._call("delete", key, lambda: self.inner.delete(key, if_match=if_match))

    def delete_many(
        self, keys: Iterable[str], *, if_match: Mapping[str, str] | None = None
    ) -> None:
        keys = list(keys)
        first = keys[0] if keys else ""
        self._call("delete_many", first, lambda: self.inner.delete_many(keys, if_match=if_match))

    def open(self, key: str, *, etag: str | None = None) -> BinaryIO | None:
        result: BinaryIO | None = self._call("get", key, lambda: self.inner.open(key, etag=etag))
        return result

    def put_file(self, key: str, source: Source) -> Head:
        result: Head = self._call("put", key, lambda: self.inner.put_file(key, source))
        return result

    def copy(self, source: str, dest: str, *, if_match: str | None, size: int) -> None:
        def run() -> None:
            self.inner.copy(source, dest, if_match=if_match, size=size)

        self._call("put", dest, run)

    def list(self, prefix: str, *, start_after: str | None = None, limit: int = 1000) -> Page:
        # The LIST of tickets shows the controls document (gate.py): recorded before the request
        # can leave and after its answer came, so the checker knows it read between (flow.py).
        watched = self.history is not None and prefix.endswith("/tickets/") and not start_after
        if watched and self.history is not None:
            self.history.record("controls_read", self.actor)

        def run() -> Page:
            return self.inner.list(prefix, start_after=start_after, limit=limit)

        result: Page = self._call("list", prefix, run)
        if watched and self.history is not None:
            self.history.record("controls_seen", self.actor)
        return result

    def list_folders(self, prefix: str) -> tuple[str, ...]:
        result: tuple[str, ...] = self._call(
            "list", prefix, lambda: self.inner.list_folders(prefix)
        )
        return result


def _ticket_fields(key: str, body: bytes) -> dict[str, Any]:
    """What a ticket write that reached S3 just before the crash said (a commit, maybe)."""
    try:
        ticket = Ticket.decode(body)
    except MalformedMessage:
        return {}
    return {
        "ticket": key,
        "wrote_state": ticket.state,
        "owner": ticket.owner,
        "applied": ticket.applied,
        "outcomes": [(o.id, o.kind) for o in ticket.outcomes],
    }


@dataclass(frozen=True)
class Drift:
    """How a process's clock wanders (issue 19): a rate and steps (NTP corrections)."""

    ppm: float = 0.0
    """Runs this many millionths fast (negative: slow) of the reference time."""
    step_rate: float = 0.0
    """Chance per reading that the clock steps (an NTP correction, or a bad one) ..."""
    step_ms: int = 0
    """... to a uniform error in [-step_ms, +step_ms] from its offset: back and forth."""


class SkewedClock:
    """Another clock, `offset_ms` ahead (or behind, if negative), drifting and stepping as
    `drift` says (each step recorded as a ``clock_step`` in `history`); `sleep` as given."""

    def __init__(
        self,
        base: Clock,
        offset_ms: int,
        sleep: Callable[[float], None] | None = None,
        *,
        drift: Drift | None = None,
        rng: Any = None,
        history: History | None = None,
        actor: str = "",
    ) -> None:
        self.base, self.offset_ms = base, offset_ms
        self._sleep = sleep or base.sleep
        self.drift, self.rng, self.history, self.actor = drift or Drift(), rng, history, actor
        self._start, self._offset = base.now_ms(), offset_ms

    def now_ms(self) -> int:
        now = self.base.now_ms()
        drift = self.drift
        if drift.step_rate and self.rng is not None and self.rng.random() < drift.step_rate:
            error = self.rng.randint(-drift.step_ms, drift.step_ms)
            step = self._offset + error - self.offset_ms
            self.offset_ms += step
            if self.history is not None:
                self.history.record("clock_step", self.actor, step_ms=step)
        return now + self.offset_ms + round((now - self._start) * drift.ppm / 1e6)

    def sleep(self, seconds: float) -> None:
        self._sleep(seconds)


class Answering:
    """A storage whose every answer tells `order` S3's time as ``Date`` would: the reference
    clock `true`, in whole seconds (a producer's `ServerClock` learns from it)."""

    def __init__(self, inner: Storage, true: Clock, order: ServerClock) -> None:
        self.inner, self.true, self.order = inner, true, order

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def answered(*args: Any, **kwargs: Any) -> Any:
            sent = self.order.local_ms()
            try:
                return attr(*args, **kwargs)
            finally:
                date = self.true.now_ms() // 1000 * 1000
                self.order.observe(date, sent, self.order.local_ms())

        return answered
