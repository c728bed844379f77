"""The checker, on hand-made histories: a correct one passes, and each broken one is flagged
with exactly the invariant it breaks (a checker that cannot fail proves nothing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from chaos.checker import Expect, check
from chaos.history import Entry, FinalState, Pending

pytestmark = pytest.mark.chaos

ROOT = "s3queue/chaos/"
VIS = 30_000
EXPECT = Expect(
    max_retries=1, visibility_ms=VIS, backoff_base=1.0, backoff_cap=10.0, poison=frozenset({"p"})
)


def key(message_id: str) -> str:
    return f"{ROOT}msg/1700000000000-{message_id}"


def ticket(n: int) -> str:
    return f"{ROOT}tickets/0000000001-{n:010d}"


class Story:
    """Builds a history entry by entry; `at` moves the reference clock."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.now = 0

    def add(self, kind: str, actor: str, **fields: Any) -> Story:
        self.entries.append(Entry(len(self.entries), self.now, kind, actor, fields))
        return self

    def at(self, ms: int) -> Story:
        self.now = ms
        return self

    def enqueue(self, *ids: str) -> Story:
        for message_id in ids:
            self.add("enqueue", "producer", message_id=message_id, key=key(message_id))
        return self

    def dispatch(self, n: int, *ids: str) -> Story:
        return self.add("dispatch", "c1", ticket=ticket(n), refs=[key(i) for i in ids])

    def claim(self, n: int, worker: str, gen: int = 0) -> Story:
        return self.add("claim", worker, ticket=ticket(n), owner=worker, generation=gen)

    def run(
        self, worker: str, message_id: str, attempt: int, outcome: str = "done", **extra: Any
    ) -> Story:
        self.add("handler_start", worker, message_id=message_id, attempt=attempt)
        self.now += extra.pop("took", 100)
        delay = extra.pop("delay_ms", 500 if outcome == "retry" else 0)
        return self.add(
            "handler_finish",
            worker,
            message_id=message_id,
            attempt=attempt,
            outcome=outcome,
            delay_ms=delay,
            duration_ms=100,
        )

    def commit(self, n: int, worker: str, *outcomes: tuple[str, str]) -> Story:
        return self.add("commit", worker, ticket=ticket(n), outcomes=list(outcomes))

    def expire(self, n: int, gen: int, owner: str) -> Story:
        return self.add("expire", "c1", ticket=ticket(n), generation=gen, owner=owner)


def good() -> Story:
    """m: done at once. p: poison, retried once, then dead. r: its worker crashes, the lease
    expires after the visibility timeout, the redelivery (attempt 2) completes."""
    s = Story().enqueue("m", "p", "r")
    s.dispatch(0, "m").claim(0, "w1").run("w1", "m", 1).commit(0, "w1", ("m", "done"))
    s.dispatch(1, "p").claim(1, "w1").run("w1", "p", 1, "retry").commit(1, "w1", ("p", "retry"))
    s.at(2_000).dispatch(2, "p").claim(2, "w2").run("w2", "p", 2, "dead")
    s.commit(2, "w2", ("p", "dead"))
    s.at(3_000).dispatch(3, "r").claim(3, "w1").run("w1", "r", 1)
    s.add("crash", "w1", where="before put tickets")
    s.at(3_000 + VIS + 5_000).expire(3, 1, "w1").claim(3, "w2", gen=1).run("w2", "r", 2)
    return s.commit(3, "w2", ("r", "done"))


def dead_p(**changes: Any) -> dict[str, Any]:
    letter = {"id": "p", "attempts": 2, "reason": "RuntimeError: poison"}
    letter["errors"] = [{"attempt": 1}, {"attempt": 2}]
    return {**letter, **changes}


def final(**changes: Any) -> FinalState:
    return FinalState(**{"dead": [dead_p()], **changes})


def test_a_correct_history_passes_and_its_redelivery_is_explained() -> None:
    report = check(good().entries, final(), EXPECT)
    assert report.ok, report.summary()
    [redelivery] = report.redeliveries
    assert (redelivery.id, redelivery.attempt) == ("r", 2)
    assert "crashed" in redelivery.reason
    assert report.counts["completed"] == 2 and report.counts["dead"] == 1


Mutation = Callable[[], tuple[Story, FinalState]]

CASES: dict[str, Mutation] = {
    "lost": lambda: (good().enqueue("x"), final()),
    "stuck": lambda: (good().enqueue("x"), final(pending=[Pending("x", key("x"), 1)])),
    "committed_twice": lambda: (good().commit(9, "w3", ("m", "done")), final()),
    "duplicated": lambda: (good(), final(pending=[Pending("m", key("m"), 1)])),
    "phantom": lambda: (good().dispatch(9, "zz").claim(9, "w3").run("w3", "zz", 1), final()),
    "unexplained_duplicate": lambda: (
        good().dispatch(9, "m").claim(9, "w3").run("w3", "m", 2).commit(9, "w3", ("m", "retry")),
        final(),
    ),
    "invisible_redelivery": lambda: (
        _replace_attempt(good(), "r", 2, 1),
        final(),
    ),
    "attempt_accounting": lambda: (_replace_attempt(good(), "r", 2, 3), final()),
    "double_claim": lambda: (good().claim(0, "w9"), final()),
    "two_valid_leases": lambda: (
        Story()
        .enqueue("m")
        .dispatch(0, "m")
        .dispatch(1, "m")
        .claim(0, "w1")
        .claim(1, "w2")
        .run("w2", "m", 1)
        .commit(1, "w2", ("m", "done"))
        .commit(0, "w1"),
        FinalState(),
    ),
    "fenced_live_ticket": lambda: (good().add("fenced", "c0", ticket=ticket(0)), final()),
    "stale_commit": lambda: (good().commit(3, "w1", ("r", "done")), final()),
    "dlq_mismatch": lambda: (good(), FinalState()),
    "retries_not_exact": lambda: (good(), final(dead=[dead_p(attempts=3)])),
    "error_history": lambda: (good(), final(dead=[dead_p(errors=[{"attempt": 2}] * 2)])),
    "early_redelivery": lambda: (_early_expiry(), final()),
    "early_retry": lambda: (_early_retry(), final()),
    "backoff_bounds": lambda: (_long_backoff(), final()),
}


def _replace_attempt(story: Story, message_id: str, old: int, new: int) -> Story:
    for i, e in enumerate(story.entries):
        if e.get("message_id") == message_id and e.get("attempt") == old:
            story.entries[i] = Entry(
                e.seq, e.true_ms, e.kind, e.actor, {**e.fields, "attempt": new}
            )
    return story


def _early_expiry() -> Story:
    s = good()
    late = next(e for e in s.entries if e.kind == "expire")
    s.entries[late.seq] = Entry(late.seq, 3_000 + VIS // 2, late.kind, late.actor, late.fields)
    return s


def _early_retry() -> Story:
    s = good()
    starts = [e for e in s.entries if e.kind == "handler_start" and e["message_id"] == "p"]
    moved = starts[1]
    s.entries[moved.seq] = Entry(
        moved.seq, starts[0].true_ms + 150, moved.kind, moved.actor, moved.fields
    )
    return s


def _long_backoff() -> Story:
    s = good()
    for i, e in enumerate(s.entries):
        if e.kind == "handler_finish" and e["outcome"] == "retry":
            s.entries[i] = Entry(e.seq, e.true_ms, e.kind, e.actor, {**e.fields, "delay_ms": 1_500})
    return s


def test_every_invariant_has_a_case() -> None:
    import chaos.checker

    documented = {
        line.split()[0]
        for line in (chaos.checker.__doc__ or "").splitlines()
        if line.startswith("    ") and line.split()
    }
    assert documented == set(CASES)


@pytest.mark.parametrize("invariant", sorted(CASES))
def test_a_broken_history_is_flagged(invariant: str) -> None:
    story, state = CASES[invariant]()
    report = check(story.entries, state, EXPECT)
    assert invariant in report.invariants(), report.summary() or "no violation found"


def test_a_redelivery_before_the_lease_expired_is_not_explained_by_a_later_expiry() -> None:
    # GIVEN r's second run starts BEFORE the expiry that would have explained it
    s = Story().enqueue("r").dispatch(0, "r").claim(0, "w1").run("w1", "r", 1)
    s.dispatch(1, "r").claim(1, "w2").run("w2", "r", 2).commit(1, "w2", ("r", "done"))
    s.at(VIS + 5_000).expire(0, 1, "w1")
    report = check(s.entries, FinalState(), EXPECT)
    assert {"unexplained_duplicate", "two_valid_leases"} <= report.invariants()
