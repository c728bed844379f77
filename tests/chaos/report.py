"""What the checker is told to expect, and what it reports."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Expect:
    """What the run was configured with and what it must end with."""

    max_retries: int
    visibility_ms: int
    backoff_base: float
    backoff_cap: float
    poison: frozenset[str] = frozenset()
    """Must be dead after exactly max_retries retries."""
    dead_at_once: frozenset[str] = frozenset()
    """Must be dead with no retry (malformed objects, PermanentError)."""
    maybe_dead: frozenset[str] = frozenset()
    """May be dead with no retry: a bad object whose put raised (it may have applied)."""
    skew_ms: int = 0
    """Clock skew allowed in the run: slack for rules that compare two actors' clocks."""
    slack_ms: int = 0
    """Measurement slack of the reference clock (0 in a simulation)."""
    drained: bool = True
    rate_limit: int = 0
    """The queue's rate_limit: handler starts allowed per second (0: none)."""
    partition_rate_limit: int = 0
    """Handler starts allowed per second of one partition (0: none)."""
    partition_concurrency: int = 0
    """Messages of one partition allowed in live tickets at once (0: no cap)."""
    schedule_ms: int = 0
    """The queue's schedule, every so many ms (0: none; slots.py)."""
    schedule_catch_up_ms: int = 0
    """How old a slot may be when it is enqueued (``schedule_catch_up``)."""


@dataclass(frozen=True)
class Violation:
    invariant: str
    subject: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.subject}: {self.detail}"


@dataclass(frozen=True)
class Redelivery:
    """A handler run after a lease expiry: a duplicate execution, and why it happened."""

    id: str
    attempt: int
    previous_actor: str
    reason: str
    """A category: which fault let the lease expire."""
    detail: str = ""


@dataclass
class Report:
    violations: list[Violation] = field(default_factory=list)
    redeliveries: list[Redelivery] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    lateness_ms: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def add(self, invariant: str, subject: str, detail: str) -> None:
        self.violations.append(Violation(invariant, subject, detail))

    def invariants(self) -> set[str]:
        return {v.invariant for v in self.violations}

    def summary(self, limit: int = 20) -> str:
        lines = [str(v) for v in self.violations[:limit]]
        more = len(self.violations) - limit
        return "\n".join(lines + ([f"... and {more} more"] if more > 0 else []))
