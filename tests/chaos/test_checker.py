"""The checker, on hand-made histories: a correct one passes, and each broken one is flagged
with exactly the invariant it breaks (a checker that cannot fail proves nothing)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from s3queue.protocol.keys import encode_group

from chaos.checker import Expect, check
from chaos.history import Entry, FinalState, Pending

pytestmark = pytest.mark.chaos

ROOT = "s3queue/chaos/"
VIS = 30_000
EXPECT = Expect(
    max_retries=1,
    visibility_ms=VIS,
    backoff_base=1.0,
    backoff_cap=10.0,
    poison=frozenset({"p"}),
    schedule_ms=10_000,
    schedule_catch_up_ms=4_000,
)
SLOT = "schedule-19700101T000050Z"
"""The slot at 50 s of a schedule every 10 s (`scheduled`)."""


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

    def enqueue_grouped(
        self, group: str, *ids: str, producer: str = "producer", folder: str = "msg/"
    ) -> Story:
        """Each message keyed at the reference clock, as a library producer would."""
        for message_id in ids:
            name = f"{1_700_000_000_000 + self.now:013d}-{message_id}~g{encode_group(group)}"
            self.add("enqueue", producer, message_id=message_id, key=f"{ROOT}{folder}{name}")
        return self

    def dispatch(self, n: int, *ids: str) -> Story:
        return self.add("dispatch", "c1", ticket=ticket(n), refs=[key(i) for i in ids])

    def claim(self, n: int, worker: str, gen: int = 0) -> Story:
        return self.add("claim", worker, ticket=ticket(n), owner=worker, generation=gen)

    def run(
        self, worker: str, message_id: str, attempt: int, outcome: str = "done", **extra: Any
    ) -> Story:
        again = extra.pop("redelivered", False)
        self.add("handler_start", worker, message_id=message_id, attempt=attempt, redelivered=again)
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

    def release(self, n: int, worker: str, message_id: str) -> Story:
        why = "earlier message of its group failed"
        return self.add("release", worker, ticket=ticket(n), message_id=message_id, reason=why)


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


def good_fifo() -> Story:
    """good(), then a group g of a, b, c, d. a fails once: b, released in a's ticket, waits for
    a's retry; b and c then run in one ticket (c after b's done, before their commit). d's first
    run outlives its lease: its redelivery runs while the stale run is still going (no longer in
    flight: its lease was reaped)."""
    s = good().at(100_000).enqueue_grouped("g", "a", "b", "c", "d")
    s.dispatch(10, "a", "b").claim(10, "w1").run("w1", "a", 1, "retry").release(10, "w1", "b")
    s.commit(10, "w1", ("a", "retry"), ("b", "release"))
    s.at(101_000).dispatch(11, "a").claim(11, "w2").run("w2", "a", 2)
    s.commit(11, "w2", ("a", "done"))
    s.dispatch(12, "b", "c").claim(12, "w1").run("w1", "b", 1).run("w1", "c", 1)
    s.commit(12, "w1", ("b", "done"), ("c", "done"))
    s.dispatch(13, "d").claim(13, "w1").add("handler_start", "w1", message_id="d", attempt=1)
    s.at(102_000 + VIS + 5_000).expire(13, 1, "w1").claim(13, "w2", gen=1).run("w2", "d", 2)
    s.add("handler_finish", "w1", message_id="d", attempt=1, outcome="done", duration_ms=1)
    return s.commit(13, "w2", ("d", "done"))


def test_a_correct_fifo_history_passes() -> None:
    report = check(good_fifo().entries, final(), EXPECT)
    assert report.ok, report.summary()
    assert (report.counts["groups"], report.counts["grouped"]) == (1, 4)
    assert report.counts["fifo_exempt"] == 0


def _fifo_overtaken() -> Story:
    """b, enqueued after a, runs while a waits for its retry."""
    s = good().at(100_000).enqueue_grouped("g", "a", "b")
    s.dispatch(10, "a").claim(10, "w1").run("w1", "a", 1, "retry")
    s.commit(10, "w1", ("a", "retry"))
    s.dispatch(11, "b").claim(11, "w2").run("w2", "b", 1).commit(11, "w2", ("b", "done"))
    s.at(101_000).dispatch(12, "a").claim(12, "w1").run("w1", "a", 2)
    return s.commit(12, "w1", ("a", "done"))


def _fifo_two_in_flight() -> Story:
    """x and y of one group, from two producers in one millisecond (no order between them:
    exempt from the order rule), run at once on two valid leases."""
    s = good().at(100_000).enqueue_grouped("g", "x").enqueue_grouped("g", "y", producer="p2")
    s.dispatch(10, "x").dispatch(11, "y").claim(10, "w1").claim(11, "w2")
    s.add("handler_start", "w1", message_id="x", attempt=1)
    s.run("w2", "y", 1).commit(11, "w2", ("y", "done"))
    s.add("handler_finish", "w1", message_id="x", attempt=1, outcome="done", duration_ms=1)
    return s.commit(10, "w1", ("x", "done"))


def _fifo_redelivery_forgets_the_failure() -> Story:
    """A heartbeat records a's retry, b is released, the worker dies before its commit; the
    redelivered ticket runs b (bug K of test_core_bugs.py) before a's retry."""
    s = good().at(100_000).enqueue_grouped("g", "a", "b")
    s.dispatch(10, "a", "b").claim(10, "w1").run("w1", "a", 1, "retry")
    s.add("heartbeat", "w1", ticket=ticket(10)).release(10, "w1", "b")
    s.add("crash", "w1", where="before put tickets")
    s.at(100_000 + VIS + 5_000).expire(10, 1, "w1").claim(10, "w2", gen=1)
    s.run("w2", "b", 1, redelivered=True)
    s.commit(10, "w2", ("a", "retry"), ("b", "done"))
    s.at(140_000).dispatch(11, "a").claim(11, "w1").run("w1", "a", 2)
    return s.commit(11, "w1", ("a", "done"))


def test_one_group_name_in_two_partitions_is_two_groups() -> None:
    """x and y of a group named g, but in two partitions: running at once breaks nothing."""
    s = good().at(100_000).enqueue_grouped("g", "x")
    s.enqueue_grouped("g", "y", producer="p2", folder="parts/p1/")
    s.dispatch(10, "x").dispatch(11, "y").claim(10, "w1").claim(11, "w2")
    s.add("handler_start", "w1", message_id="x", attempt=1)
    s.run("w2", "y", 1).commit(11, "w2", ("y", "done"))
    s.add("handler_finish", "w1", message_id="x", attempt=1, outcome="done", duration_ms=1)
    s.commit(10, "w1", ("x", "done"))
    report = check(s.entries, final(), EXPECT)
    assert report.ok and report.counts["groups"] == 2, report.summary()


FIFO_BREAKS: dict[str, Callable[[], Story]] = {
    "overtaken": _fifo_overtaken,
    "two-in-flight": _fifo_two_in_flight,
    "redelivery-forgets-the-failure": _fifo_redelivery_forgets_the_failure,
}


@pytest.mark.parametrize("name", sorted(FIFO_BREAKS))
def test_a_broken_fifo_history_is_flagged_with_fifo_alone(name: str) -> None:
    report = check(FIFO_BREAKS[name]().entries, final(), EXPECT)
    assert report.invariants() == {"fifo"}, report.summary() or "no violation found"


def test_fifo_exempts_only_an_ambiguous_order_and_a_reaped_run() -> None:
    # GIVEN two producers' messages of one group in one millisecond, run one after the other
    # in key order (y's key sorts first); THEN no violation, one exempt pair
    s = good().at(100_000).enqueue_grouped("g", "y").enqueue_grouped("g", "x", producer="p2")
    s.dispatch(10, "x").claim(10, "w1").run("w1", "x", 1).commit(10, "w1", ("x", "done"))
    s.dispatch(11, "y").claim(11, "w2").run("w2", "y", 1).commit(11, "w2", ("y", "done"))
    report = check(s.entries, final(), EXPECT)
    assert report.ok and report.counts["fifo_exempt"] == 1, report.summary()
    # and the same producer's two: y must wait for x
    s = good().at(100_000).enqueue_grouped("g", "y").enqueue_grouped("g", "x")
    s.dispatch(10, "x").claim(10, "w1").run("w1", "x", 1).commit(10, "w1", ("x", "done"))
    s.dispatch(11, "y").claim(11, "w2").run("w2", "y", 1).commit(11, "w2", ("y", "done"))
    assert check(s.entries, final(), EXPECT).invariants() == {"fifo"}


def try_slot(s: Story, process: str, now: int, result: str, *, enqueues: str = "") -> Story:
    """One try of a coordinator process's latest slot (slots.Watched), its clock at `now`."""
    s.add("slot_check", process, now=now)
    if enqueues:
        s.add("enqueue", process, message_id=enqueues, key=key(SLOT))
    return s.add("slot_result", process, now=now, result=result)


def run_slot(s: Story, n: int, worker: str, slot: str = "1970-01-01T00:00:50Z") -> Story:
    s.dispatch(n, SLOT).claim(n, worker).run(worker, SLOT, 1)
    s.add("exec", worker, id=SLOT, attempt=1, slot=slot, body_slot=slot)
    return s.commit(n, worker, (SLOT, "done"))


def scheduled() -> Story:
    """good(), then the slot at 50 s: c1 puts it, c2 finds it put; w1 runs it once; c1 then
    finds it tried already, and c3, back at 54.5 s (more than 4 s late), skips it."""
    s = good().at(50_100).add("explicit_id", "c1.1", id=SLOT)
    try_slot(s, "c1.1", 50_100, "put", enqueues=SLOT)
    try_slot(s, "c2.1", 50_300, "found", enqueues=SLOT)
    run_slot(s.at(50_400), 20, "w1")
    try_slot(s, "c1.1", 50_600, "none")
    return try_slot(s.at(54_500), "c3.1", 54_500, "none")


def test_a_scheduled_history_passes() -> None:
    report = check(scheduled().entries, final(), EXPECT)
    assert report.ok, report.summary()


def test_a_duplicated_slot_and_a_missing_slot_are_flagged() -> None:
    # WHEN the slot runs again, in another ticket, with no lease expiry THEN slot_twice
    twice = run_slot(scheduled(), 21, "w2")
    assert "slot_twice" in check(twice.entries, final(), EXPECT).invariants()
    # WHEN c3 finds the slot due (its clock 0.5 s past it) and enqueues nothing THEN slot_missing
    missing = try_slot(scheduled(), "c3.2", 50_500, "none")
    flagged = check(missing.entries, final(), EXPECT)
    assert [v.invariant for v in flagged.violations] == ["slot_missing"], flagged.summary()
    # ... and also after a try of its own that failed on an S3 error
    retried = try_slot(scheduled(), "c3.2", 50_500, "error")
    assert check(retried.entries, final(), EXPECT).ok
    assert (
        "slot_missing"
        in check(try_slot(retried, "c3.2", 51_000, "none").entries, final(), EXPECT).invariants()
    )
    # WHEN a slot put by a try never ran THEN slot_missing (besides lost)
    unrun = try_slot(good().at(60_100), "c1.1", 60_100, "put")
    assert "slot_missing" in check(unrun.entries, final(), EXPECT).invariants()


def test_a_slot_put_twice_that_ran_once_is_one_message() -> None:
    """c2's PUT of the slot's message was held up until the slot ran and its message was
    deleted: it puts the message again, and a worker retires that stale copy unrun (``skip``:
    its marker is done). Two puts, one run: no violation (the chaos run found this case)."""
    s = scheduled()
    try_slot(s.at(70_000), "c2.1", 50_300, "put", enqueues=SLOT)
    s.dispatch(22, SLOT).claim(22, "w1").commit(22, "w1", (SLOT, "skip"))
    report = check(s.entries, final(), EXPECT)
    assert report.ok, report.summary()


Mutation = Callable[[], tuple[Story, FinalState]]


def _paused_dispatch() -> Story:
    """good(), its coordinator having read the controls inside a pause before dispatching."""
    s = Story().add("pause_done", "pauser").add("controls_read", "c1").add("controls_seen", "c1")
    for e in good().entries:
        s.entries.append(Entry(len(s.entries), e.true_ms, e.kind, e.actor, e.fields))
    return s


def _starts_in_one_partition() -> Story:
    """good(), each start of it carrying its (default partition's) ref: over a limit of 1."""
    s = good()
    for i, e in enumerate(s.entries):
        if e.kind == "handler_start":
            fields = {**e.fields, "ref": key(e["message_id"])}
            s.entries[i] = Entry(e.seq, e.true_ms, e.kind, e.actor, fields)
    return s


def _two_live_tickets() -> Story:
    """good(), and two more tickets of its partition out at once: over a cap of 1."""
    return good().enqueue("a", "b").dispatch(8, "a").dispatch(9, "b")


CASES: dict[str, Mutation] = {
    "paused_dispatch": lambda: (_paused_dispatch(), final()),
    "rate_limit": lambda: (good(), final()),
    "partition_rate_limit": lambda: (_starts_in_one_partition(), final()),
    "partition_concurrency": lambda: (_two_live_tickets(), final()),
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
    "attempt_overcount": lambda: (_replace_attempt(good(), "m", 1, 2), final()),
    "dead_without_running": lambda: (_killed_before_starting(), final(dead=[dead_p(), _dead_k()])),
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
    "fifo": lambda: (_fifo_overtaken(), final()),
    "foreign_version": lambda: (_version_twice(), final()),
    "partition": lambda: (
        good().add("wrong_partition", "w1", id="m", sent="p1", got=None),
        final(),
    ),
    "slot_twice": lambda: (run_slot(scheduled(), 21, "w2"), final()),
    "slot_missing": lambda: (try_slot(scheduled(), "c3.2", 50_500, "none"), final()),
    "slot_catch_up": lambda: (
        # c3, 4.5 s late, enqueues the slot all the same; c4 enqueues the slot before its latest
        try_slot(
            try_slot(scheduled(), "c3.2", 54_500, "put"), "c4.1", 60_100, "put", enqueues=SLOT
        ),
        final(),
    ),
    "slot_early": lambda: (
        # c4's clock is 1 s ahead: it enqueues the slot at 49 s of the reference clock
        try_slot(Story().at(49_000), "c4.1", 50_000, "put", enqueues=SLOT),
        FinalState(),
    ),
    "slot_attribute": lambda: (run_slot(good(), 20, "w1", slot="1970-01-01T00:00:51Z"), final()),
}


def _replace_attempt(story: Story, message_id: str, old: int, new: int) -> Story:
    for i, e in enumerate(story.entries):
        if e.get("message_id") == message_id and e.get("attempt") == old:
            story.entries[i] = Entry(
                e.seq, e.true_ms, e.kind, e.actor, {**e.fields, "attempt": new}
            )
    return story


def _killed_before_starting() -> Story:
    """k's workers die twice before its handler starts; then the delivery limit takes it."""
    s = good().enqueue("k").dispatch(20, "k").claim(20, "w1").add("crash", "w1", where="get")
    s.at(200_000).expire(20, 1, "w1").claim(20, "w2", gen=1).add("crash", "w2", where="get")
    return s.at(300_000).expire(20, 2, "w2").claim(20, "w3", gen=2).commit(20, "w3", ("k", "dead"))


def _dead_k() -> dict[str, Any]:
    why = "delivered 2 times (its handler started each time; the lease expired 2 of them)"
    return {"id": "k", "attempts": 2, "reason": why, "errors": [{"attempt": 2, "error": why}]}


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
    # good() starts its handlers within one second: over a limit of 1
    limits = {"rate_limit", "partition_rate_limit", "partition_concurrency"}
    expect = dataclasses.replace(EXPECT, **{invariant: 1}) if invariant in limits else EXPECT
    report = check(story.entries, state, expect)
    assert invariant in report.invariants(), report.summary() or "no violation found"


def test_a_helper_that_dies_after_recording_apply_progress_did_not_commit() -> None:
    """A clocks soak (seed 171753): w1's claim of ticket 3 was reaped, w2 committed the next
    generation, and w1, helping to apply it, died right after a PUT of its progress: the
    ticket it wrote was committed, by w2, with ``applied`` set. Not a stale commit of w1's."""

    def w1_dies_after_writing(owner: str, applied: int) -> Story:
        return good().add(
            "crash",
            "w1",
            where="after put tickets",
            ticket=ticket(3),
            wrote_state="committed",
            owner=owner,
            applied=applied,
            outcomes=[("r", "done")],
        )

    report = check(w1_dies_after_writing("w2", 1).entries, final(), EXPECT)
    assert report.ok, report.summary()
    # ... while w1's own commit that reached S3 just before it died, after the reap, is one
    stale = w1_dies_after_writing("w1", 0)
    assert "stale_commit" in check(stale.entries, final(), EXPECT).summary()


def test_a_redelivery_before_the_lease_expired_is_not_explained_by_a_later_expiry() -> None:
    # GIVEN r's second run starts BEFORE the expiry that would have explained it
    s = Story().enqueue("r").dispatch(0, "r").claim(0, "w1").run("w1", "r", 1)
    s.dispatch(1, "r").claim(1, "w2").run("w2", "r", 2).commit(1, "w2", ("r", "done"))
    s.at(VIS + 5_000).expire(0, 1, "w1")
    report = check(s.entries, FinalState(), EXPECT)
    assert {"unexplained_duplicate", "two_valid_leases"} <= report.invariants()


def test_a_renewal_frozen_on_its_way_counts_from_when_it_was_sent() -> None:
    # GIVEN w1's heartbeat PUT held up 12 s by a freeze of its process: the lease_until it
    # carries was computed before the freeze, so a reap VIS + 1 s after the freeze is on time
    t0, oracle = ticket(0), {"owner": None, "outcomes": []}
    s = (
        Story()
        .enqueue("r")
        .add(
            "ticket_write",
            "s3",
            ticket=t0,
            state="pending",
            generation=0,
            refs=[key("r")],
            **oracle,
        )
    )
    s.dispatch(0, "r").claim(0, "w1").run("w1", "r", 1)
    s.add("ticket_write", "s3", ticket=t0, state="claimed", generation=0, **oracle)
    s.at(5_000).add("freeze", "w1", where=f"put {t0}", seconds=12.0)
    done = {"owner": "w1", "outcomes": [("r", "done")]}
    s.at(17_000).add("ticket_write", "s3", ticket=t0, state="claimed", generation=0, **done)
    s.add("heartbeat", "w1", ticket=t0).add("crash", "w1", where="before put tickets")
    s.at(5_000 + VIS + 1_000).add(
        "ticket_write", "s3", ticket=t0, state="pending", generation=1, **{**done, "owner": None}
    )
    s.expire(0, 1, "w1").claim(0, "w2", gen=1)
    s.add("ticket_write", "s3", ticket=t0, state="committed", generation=1, **done)
    s.commit(0, "w2", ("r", "done"))
    # THEN it is not an early redelivery (measured from the write's arrival it would be)
    report = check(s.entries, FinalState(), dataclasses.replace(EXPECT, poison=frozenset()))
    assert report.ok, report.summary()


def test_a_message_handled_before_its_enqueue_returned_may_run_twice() -> None:
    """A producer's PUT applied, its answer was lost, and S3 failed the HEAD that would have
    recognised it until the message had been handled and deleted: the resend created it again.
    That second run is explained (an enqueue without an id is at-least-once there); the same
    second run of a message handled after its enqueue returned is not."""
    s = Story().add("fault", "s3", fault="lost_response", op="PutObject", key=key("x"))
    s.dispatch(0, "x").claim(0, "w1").run("w1", "x", 1).commit(0, "w1", ("x", "done"))
    s.enqueue("x").dispatch(1, "x").claim(1, "w2").run("w2", "x", 1)
    s.commit(1, "w2", ("x", "done"))
    report = check(s.entries, FinalState(), dataclasses.replace(EXPECT, poison=frozenset()))
    assert report.ok, report.summary()
    assert [r.reason for r in report.redeliveries] == [
        "its enqueue's PUT was resent after its first write had been handled"
    ]
    late = Story().enqueue("x")
    late.dispatch(0, "x").claim(0, "w1").run("w1", "x", 1).commit(0, "w1", ("x", "done"))
    late.dispatch(1, "x").claim(1, "w2").run("w2", "x", 1).commit(1, "w2", ("x", "done"))
    flagged = check(late.entries, FinalState(), dataclasses.replace(EXPECT, poison=frozenset()))
    assert {"committed_twice", "unexplained_duplicate"} <= flagged.invariants()


def test_a_bad_object_whose_put_raised_may_be_dead_or_absent() -> None:
    """Soak seed 424284: the producer's put of an oversized inbox object raised, but had
    applied; its dead letter is expected then, and its absence too."""
    dead = {"id": "h", "attempts": 1, "reason": "MalformedMessage: oversized", "errors": []}
    s = good().add("enqueue_failed", "producer", ids=["h"], error="injected")
    s.dispatch(30, "h").claim(30, "w1").commit(30, "w1", ("h", "dead"))
    maybe = dataclasses.replace(EXPECT, maybe_dead=frozenset({"h"}))
    assert check(s.entries, final(dead=[dead_p(), dead]), maybe).ok
    assert check(good().entries, final(), maybe).ok
    assert "dlq_mismatch" in check(s.entries, final(dead=[dead_p(), dead]), EXPECT).invariants()


def test_a_dispatch_after_reading_the_queue_paused_is_flagged() -> None:
    def story(read_inside: bool) -> list[Entry]:
        s = Story().add("pause_done", "pauser").add("controls_read", "c1")
        if not read_inside:  # the LIST's answer came after the resume began: it may be either
            s.add("resume_start", "pauser")
        s.add("controls_seen", "c1").dispatch(1, "a")
        return s.entries

    final = FinalState()
    flagged = check(story(read_inside=True), final, EXPECT).violations
    assert [v.invariant for v in flagged if v.invariant == "paused_dispatch"] == ["paused_dispatch"]
    clean = check(story(read_inside=False), final, EXPECT).violations
    assert not [v for v in clean if v.invariant == "paused_dispatch"]
    # a process that dispatches without ever reading the controls, in a run with pauses
    unread = Story().add("pause_done", "pauser").add("resume_start", "pauser").dispatch(1, "a")
    assert "paused_dispatch" in check(unread.entries, final, EXPECT).invariants()


def test_a_delivery_limit_death_whose_two_counts_disagree_is_flagged() -> None:
    """Issue 19, defect 9: ``attempts`` and "delivered N times" of one dead letter agree."""
    disagreeing = {**_dead_k(), "attempts": 3}
    report = check(_killed_before_starting().entries, final(dead=[dead_p(), disagreeing]), EXPECT)
    assert "retries_not_exact" in report.invariants(), report.summary()
    agreeing = check(_killed_before_starting().entries, final(dead=[dead_p(), _dead_k()]), EXPECT)
    assert "retries_not_exact" not in agreeing.invariants()


def _version_twice() -> Story:
    """Another service put x twice (n=1, n=2): version 2 ran twice, version 1 never."""
    s = good().add("put_foreign", "producer", id="x", key=f"{ROOT}inbox/x", n=1)
    s.add("put_foreign", "producer", id="x", key=f"{ROOT}inbox/x", n=2)
    for n in (4, 5):
        s.add("dispatch", "c1", ticket=ticket(n), refs=[f"{ROOT}inbox/x"]).claim(n, "w1")
        s.run("w1", "x", 1).add("exec", "w1", id="x", n=2).commit(n, "w1", ("x", "done"))
    return s


def test_each_version_of_a_key_put_again_is_its_own_message() -> None:
    # GIVEN x put twice; WHEN each version runs once THEN no violation
    s = good().add("put_foreign", "producer", id="x", key=f"{ROOT}inbox/x", n=1)
    s.add("put_foreign", "producer", id="x", key=f"{ROOT}inbox/x", n=2)
    for n, version in ((4, 1), (5, 2)):
        s.add("dispatch", "c1", ticket=ticket(n), refs=[f"{ROOT}inbox/x"]).claim(n, "w1")
        s.run("w1", "x", 1).add("exec", "w1", id="x", n=version).commit(n, "w1", ("x", "done"))
    report = check(s.entries, final(), EXPECT)
    assert report.ok, report.summary()
    # WHEN only the first ran THEN the last version is missing
    lost = _version_twice()
    lost.entries = [e for e in lost.entries if not (e.kind == "exec" and e.get("n") == 2)]
    assert "foreign_version" in check(lost.entries, final(), EXPECT).invariants()


def test_versions_whose_puts_raised_are_messages_of_their_own() -> None:
    """Seed 29 of the `everything` soak: both PUTs of a key raised (a crash after the first, a
    zombie second) and both landed; each version ran once. Two versions, not one message
    committed twice; a version that raised and ran twice is still flagged."""
    s = good()
    for n in (1, 2):
        s.add("enqueue_failed", "producer", ns=[n], reput="x", error="it may still land")
    for n, version in ((4, 1), (5, 2)):
        s.add("dispatch", "c1", ticket=ticket(n), refs=[f"{ROOT}inbox/x"]).claim(n, "w1")
        s.run("w1", "x", 1).add("exec", "w1", id="x", n=version).commit(n, "w1", ("x", "done"))
    report = check(s.entries, final(), EXPECT)
    assert report.ok, report.summary()
    s.add("dispatch", "c1", ticket=ticket(6), refs=[f"{ROOT}inbox/x"]).claim(6, "w1")
    s.run("w1", "x", 1).add("exec", "w1", id="x", n=2).commit(6, "w1", ("x", "done"))
    assert "foreign_version" in check(s.entries, final(), EXPECT).invariants()
