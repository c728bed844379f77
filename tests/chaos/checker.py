"""The five guarantees, checked against a recorded history and the bucket's final state.

`check` returns a `Report`: the violations (each naming its invariant, the message or ticket,
and the evidence), every duplicate execution with the expiry that explains it, and counts.

Invariants (the ``invariant`` name of a `Violation`):

    lost                    an acknowledged message is not completed, dead or pending
    stuck                   a drained run left a message pending, or a ticket live
    committed_twice         a message has two terminal outcomes (done/dead) committed
    duplicated              the bucket holds a message twice (twice pending, pending and dead...)
    phantom                 a handler ran a message nobody enqueued
    unexplained_duplicate   a handler ran again with no retry committed and no lease expiry
    invisible_redelivery    a redelivered run did not see a higher attempt number
    attempt_accounting      an attempt number rose by more (or less) than its failures + expiries
    double_claim            two claims of one ticket generation
    two_valid_leases        a message claimed while another worker's lease on it was still valid
    fenced_live_ticket      a ticket that had been claimed was deleted as fenced
    stale_commit            a commit accepted from a worker whose claim had been reaped
    dlq_mismatch            the DLQ is not exactly the expected dead set (poison, malformed...)
    retries_not_exact       a dead letter after more or fewer than max_retries retries
    error_history           a dead letter's errors do not match the failed runs
    early_redelivery        a lease reaped less than the visibility timeout after its renewal
    early_retry             a retry ran before its backoff delay
    backoff_bounds          a backoff delay outside [0, min(cap, base * 2^(attempt-1))]
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from s3queue.backoff import backoff_bound

from chaos import timeline as tl
from chaos.history import Entry, FinalState
from chaos.timeline import Run, Timeline


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
    skew_ms: int = 0
    """Clock skew allowed in the run: slack for rules that compare two actors' clocks."""
    slack_ms: int = 0
    """Measurement slack of the reference clock (0 in a simulation)."""
    drained: bool = True


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


def check(entries: list[Entry], final: FinalState, expect: Expect) -> Report:
    """Every invariant of the module docstring, on one run."""
    t = tl.build(entries)
    _ENDS.clear()
    report = Report()
    _check_outcomes(t, final, expect, report)
    _check_runs(t, expect, report)
    _check_leases(t, expect, report)
    _check_dead_letters(t, final, expect, report)
    _count(t, final, report)
    return report


def _status(t: Timeline, final: FinalState) -> dict[str, set[str]]:
    """Completed (a done outcome committed), dead (in the DLQ now), pending (in the bucket now).
    A committed dead outcome counts only once its dead letter exists."""
    done = set()
    for entry, _ in t.commits:
        done |= {str(i) for i, kind in entry["outcomes"] if kind == "done"}
    return {"done": done, "dead": set(final.dead_ids()), "pending": set(final.pending_ids())}


def _check_outcomes(t: Timeline, final: FinalState, expect: Expect, report: Report) -> None:
    status = _status(t, final)
    pending = final.pending_ids()
    for message_id in t.acked:
        if not any(message_id in s for s in status.values()):
            report.add("lost", message_id, "acknowledged, but neither completed, dead nor pending")
        elif message_id in pending and expect.drained:
            report.add("stuck", message_id, f"still pending at {pending[message_id][0].key}")
    for ticket in final.tickets if expect.drained else ():
        report.add("stuck", ticket, "ticket still live at the end of a drained run")
    _check_once(t, final, status, expect, report)
    failed = {n for e in t.failed_enqueues for n in e.get("ns", [])}
    failed |= {i for e in t.failed_enqueues for i in e.get("ids", [])}
    number = {e["id"]: e.get("n") for e in t.execs}
    for message_id in sorted({r.id for r in t.runs} - set(t.acked)):
        # An enqueue that raised may have applied all the same.
        if number.get(message_id) not in failed and message_id not in failed:
            report.add("phantom", message_id, "handled, but never enqueued")


def _check_once(
    t: Timeline, final: FinalState, status: dict[str, set[str]], expect: Expect, report: Report
) -> None:
    terminal: dict[str, int] = {}
    for entry, _ in t.commits:
        for message_id, kind in entry["outcomes"]:
            terminal[message_id] = terminal.get(message_id, 0) + (kind in tl.TERMINAL)
    for message_id, count in terminal.items():
        if count > 1:
            report.add("committed_twice", message_id, f"{count} terminal outcomes committed")
    # Mid-run, an apply in progress holds a message twice (copy written, source not yet gone).
    for message_id, copies in final.pending_ids().items() if expect.drained else ():
        done = message_id in status["done"]
        if len(copies) > 1 or message_id in status["dead"] or done:
            where = [p.key for p in copies]
            report.add("duplicated", message_id, f"pending at {where} and completed or dead")


def _check_runs(t: Timeline, expect: Expect, report: Report) -> None:
    for message_id, runs in t.runs_of().items():
        live = []
        for run in runs:
            end = _lease_end(t, run.claim) if run.claim else None
            if end is not None and end < run.start.seq:
                why = "a stale worker started the handler after its lease had been reaped"
                report.redeliveries.append(Redelivery(message_id, run.attempt, run.actor, why))
            else:
                live.append(run)
        for before, after in itertools.pairwise(live):
            _check_rerun(t, before, after, expect, report)
        for run in runs:
            _check_backoff(run, expect, report)


def _check_rerun(t: Timeline, a: Run, b: Run, expect: Expect, report: Report) -> None:
    retried = a.outcome == "retry" and a.committed
    expired = _expired(t, a, b)
    if not (retried or expired):
        report.add(
            "unexplained_duplicate",
            b.id,
            f"ran at seq {b.start.seq} (attempt {b.attempt}, {b.actor}) after a run at seq "
            f"{a.start.seq} (attempt {a.attempt}, {a.actor}, outcome {a.outcome}, "
            f"committed {a.committed}) with no retry committed and no lease expiry",
        )
    elif expired and not retried:
        report.redeliveries.append(
            Redelivery(b.id, b.attempt, a.actor, *_why(t, a, expect.visibility_ms))
        )
        if b.attempt <= a.attempt:
            report.add(
                "invisible_redelivery", b.id, f"attempt {a.attempt} ran again as {b.attempt}"
            )
    allowed = int(retried) + _counted_expiries(t, a, b)
    if b.attempt - a.attempt != allowed:
        report.add(
            "attempt_accounting",
            b.id,
            f"attempt {a.attempt} -> {b.attempt}, but {int(retried)} committed failure(s) and "
            f"{allowed - int(retried)} expired delivery(ies) in between",
        )
    if retried and a.end is not None:
        due = a.end.true_ms + a.delay_ms - expect.skew_ms - expect.slack_ms
        if b.start.true_ms < due:
            report.add(
                "early_retry", b.id, f"retry ran {due - b.start.true_ms} ms before its backoff"
            )


def _expired(t: Timeline, a: Run, b: Run) -> bool:
    """Run a's claim was reaped, on record (a reap written to S3, or an expire event), before
    run b: within the generations between them, or before b started in another ticket."""
    if a.ticket is None:
        return False
    for gen, e in t.reaps.get(a.ticket, {}).items():
        if gen > a.gen and (gen <= b.gen if b.ticket == a.ticket else e.seq < b.start.seq):
            return True
    return False


def _counted_expiries(t: Timeline, a: Run, b: Run) -> int:
    """Expiries between runs a and b of one message that count as one of its deliveries: those
    of a ticket holding it while its outcome was not recorded in that ticket."""
    count = 0
    for ticket, reaps in t.reaps.items():
        if a.id not in t.ticket_ids(ticket):
            continue
        for gen, e in reaps.items():
            if ticket == a.ticket and gen <= a.gen:
                continue  # before run a
            if ticket == b.ticket and gen > b.gen:
                continue  # after run b started
            if ticket not in (a.ticket, b.ticket) and not a.start.seq < e.seq < b.start.seq:
                continue
            if ticket == a.ticket and a.recorded_seq is not None and a.recorded_seq < e.seq:
                continue  # a's outcome was in S3 already: this expiry redelivers the others
            count += 1
    return count


def _why(t: Timeline, run: Run, visibility_ms: int) -> tuple[str, str]:
    """Why run's lease expired: a category, and the specifics."""
    if run.outcome == "crash":
        where = next((e.get("where", "") for e in t.crashes if e.seq == run.end.seq), "")
        if "Lambda timeout" in where:
            return "the Lambda timed out in the handler", where
        return "its worker crashed while the handler ran", where
    later = [e for e in t.crashes + t.freezes if e.actor == run.actor and e.seq > run.start.seq]
    if later:
        what = "crashed" if later[0].kind == "crash" else "froze"
        return f"its worker {what} before committing", str(later[0].get("where", ""))
    troubles = [e for e in t.troubles if e.actor == run.actor and e.seq > run.start.seq]
    if troubles:
        return "S3 errors kept its worker from renewing or committing", troubles[0]["error"]
    took = [r.end.true_ms - r.start.true_ms for r in run.claim.runs if r.end] if run.claim else []
    if took and max(took) >= visibility_ms:
        return "a handler of its ticket outlived the lease", f"{max(took)} ms, no heartbeat"
    return "its worker did not renew or commit in time (slow S3 calls)", ""


def _check_backoff(run: Run, expect: Expect, report: Report) -> None:
    if run.outcome != "retry":
        return
    bound = backoff_bound(run.attempt, expect.backoff_base, expect.backoff_cap) * 1000
    if not 0 <= run.delay_ms <= bound + 1:
        report.add("backoff_bounds", run.id, f"attempt {run.attempt}: {run.delay_ms} ms > {bound}")


def _check_leases(t: Timeline, expect: Expect, report: Report) -> None:
    seen: dict[tuple[str, int], str] = {}
    for claim in t.claims:
        key = (claim.ticket, claim.gen)
        if key in seen:
            report.add(
                "double_claim", claim.ticket, f"gen {claim.gen}: {seen[key]} and {claim.actor}"
            )
        seen[key] = claim.actor
        if claim.ticket in t.fenced:
            report.add("fenced_live_ticket", claim.ticket, f"claimed by {claim.actor}, then fenced")
        reap = t.reaps.get(claim.ticket, {}).get(claim.gen + 1)
        if claim.commit is not None and reap is not None:
            report.add(
                "stale_commit",
                claim.ticket,
                f"{claim.actor} committed gen {claim.gen} after a reap",
            )
        if reap is not None:
            _check_expiry(claim, reap, expect, report)
    _check_overlaps(t, report)


def _check_expiry(claim: tl.Claim, expire: Entry, expect: Expect, report: Report) -> None:
    # No skew slack: reaping waits for lease_until + skew_tolerance on the reaper's clock,
    # which absorbs any skew within the tolerance.
    held = expire.true_ms - claim.renewed_ms
    if held < expect.visibility_ms - expect.slack_ms:
        report.add(
            "early_redelivery",
            claim.ticket,
            f"gen {claim.gen} of {claim.actor} reaped {held} ms after its last renewal "
            f"(visibility {expect.visibility_ms} ms)",
        )


def _lease_end(t: Timeline, claim: tl.Claim) -> int | None:
    """The seq at which a claim stopped being a valid lease (None: valid to the end)."""
    if id(claim) not in _ENDS:
        _ENDS[id(claim)] = (claim, _find_lease_end(t, claim))
    return _ENDS[id(claim)][1]


_ENDS: dict[int, tuple[tl.Claim, int | None]] = {}
"""Memo of `_lease_end` for the run being checked (cleared by `check`)."""


def _find_lease_end(t: Timeline, claim: tl.Claim) -> int | None:
    ends = [e.seq for e in (claim.commit, claim.lost, t.fenced.get(claim.ticket)) if e]
    ends += [e.seq for gen, e in t.reaps.get(claim.ticket, {}).items() if gen > claim.gen]
    ends += [c.entry.seq for c in t.claims if c.ticket == claim.ticket and c.gen > claim.gen]
    ends += [
        writes[0].seq
        for (ticket, gen), writes in t.writes.items()
        if ticket == claim.ticket and gen > claim.gen
    ]
    ends += [e.seq for e in t.deletes if e["ticket"] == claim.ticket and e.seq > claim.entry.seq]
    return min(ends) if ends else None


def _check_overlaps(t: Timeline, report: Report) -> None:
    """Each claim is a lease on every message of its ticket: no message may be under two valid
    leases of different tickets at once (one ticket's generations are ordered by its CAS chain)."""
    holders: dict[str, list[tl.Claim]] = {}
    for claim in sorted(t.claims, key=lambda c: c.entry.seq):
        for message_id in sorted(t.ticket_ids(claim.ticket)):
            for other in holders.get(message_id, []):
                end = _lease_end(t, other)
                if other.ticket != claim.ticket and (end is None or end > claim.entry.seq):
                    report.add(
                        "two_valid_leases",
                        message_id,
                        f"{claim.actor} claimed {claim.ticket} gen {claim.gen} (seq "
                        f"{claim.entry.seq}) while {other.actor}'s lease on {other.ticket} "
                        f"gen {other.gen} (seq {other.entry.seq}) was valid",
                    )
            holders.setdefault(message_id, []).append(claim)


def _check_dead_letters(t: Timeline, final: FinalState, expect: Expect, report: Report) -> None:
    dead = final.dead_ids()
    runs = t.runs_of()
    for message_id, letters in dead.items():
        if len(letters) > 1:
            report.add("duplicated", message_id, f"{len(letters)} dead letters")
        _check_letter(message_id, letters[0], runs.get(message_id, []), expect, report)
    if expect.drained:
        for message_id in sorted((expect.poison | expect.dead_at_once) - set(dead)):
            report.add("dlq_mismatch", message_id, "expected in the DLQ, not there")


def _check_letter(
    message_id: str, letter: dict[str, Any], runs: list[Run], expect: Expect, report: Report
) -> None:
    reason = str(letter.get("reason", ""))
    failed = [r for r in runs if r.committed and r.outcome in ("retry", "dead")]
    by_expiry = reason.startswith("delivered ")
    if message_id in expect.dead_at_once:
        if any(r.outcome == "retry" and r.committed for r in runs):
            report.add("retries_not_exact", message_id, "retried, but must die at once")
        return
    if message_id not in expect.poison and not by_expiry:
        report.add("dlq_mismatch", message_id, f"dead but not expected: {reason}")
        return
    recorded = [int(e["attempt"]) for e in letter.get("errors", [])]
    if by_expiry:
        recorded = recorded[:-1]  # the last error is the delivery limit, not a handler run
    if recorded != [r.attempt for r in failed]:
        report.add(
            "error_history",
            message_id,
            f"errors at attempts {recorded}, failed runs at attempts {[r.attempt for r in failed]}",
        )
    attempts = int(letter.get("attempts", 0))
    limit = expect.max_retries + 1
    if (attempts != limit and not by_expiry) or (by_expiry and attempts <= limit):
        report.add("retries_not_exact", message_id, f"dead at attempt {attempts} ({reason})")


def _count(t: Timeline, final: FinalState, report: Report) -> None:
    status = _status(t, final)
    first: dict[str, int] = {}
    for run in t.runs:
        first.setdefault(run.id, run.start.true_ms)
    for message_id, entry in t.acked.items():
        if message_id in first:
            visible = entry.true_ms + int(entry.get("delay_ms", 0))
            report.lateness_ms.append(max(first[message_id] - visible, 0))
    report.counts = {
        "messages": len(t.acked),
        "completed": len(status["done"] & set(t.acked)),
        "dead": len(final.dead),
        "pending": len(final.pending),
        "runs": len(t.runs),
        "duplicates": len(report.redeliveries),
        "crashes": len(t.crashes),
        "freezes": len(t.freezes),
        "expiries": sum(len(v) for v in t.reaps.values()),
        "fenced": len(t.fenced),
    }
