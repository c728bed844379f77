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
    invisible_redelivery    a redelivered run saw neither a higher attempt nor `redelivered`
    attempt_accounting      an attempt rose by under its failures, or over failures + expiries
    attempt_overcount       an attempt counted a delivery that never started the handler
    dead_without_running    the delivery limit dead-lettered a message that ran too few times
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
    fifo                    a group ran out of enqueue order, or had two messages in flight at once
    partition               a handler saw another partition than its message was enqueued into
    paused_dispatch         a ticket published by a tick that read the queue paused (flow.py)
    rate_limit              a second saw more handler starts than the queue's rate_limit
    foreign_version         a version of a foreign key put again ran twice, or its last never ran
    partition_rate_limit    a second saw more handler starts of one partition than its limit
    partition_concurrency   a partition had more messages in live tickets than its cap
    slot_twice              a scheduled slot's handler ran twice with no lease expiry (slots.py)
    slot_missing            a slot due by a coordinator's clock not enqueued, or enqueued, not run
    slot_catch_up           a try enqueued a slot other than its latest, or one older than catch-up
    slot_early              a slot enqueued before its time, beyond the run's clock bound
    slot_attribute          a scheduled message's schedule-slot attribute or body is not its slot
"""

from __future__ import annotations

import math
from typing import Any

from chaos import fifo, flow, reruns, slots
from chaos import timeline as tl
from chaos.history import Entry, FinalState
from chaos.report import Expect, Redelivery, Report, Violation
from chaos.timeline import Run, Timeline

__all__ = ["Expect", "Redelivery", "Report", "Violation", "check"]


def check(entries: list[Entry], final: FinalState, expect: Expect) -> Report:
    """Every invariant of the module docstring, on one run."""
    t = tl.build(entries)
    reruns.ENDS.clear()
    report = Report()
    _check_outcomes(t, final, expect, report)
    reruns.check_runs(t, expect, report)
    reruns.check_starts(t, final.dead, expect, report)
    _check_leases(t, expect, report)
    _check_dead_letters(t, final, expect, report)
    _check_versions(t, expect, report)
    fifo.check(t, report)
    flow.check_pauses(entries, report)
    flow.check_rate(entries, expect.rate_limit, expect.skew_ms, report)
    flow.check_partition_rate(entries, expect.partition_rate_limit, expect.skew_ms, report)
    flow.check_partition_concurrency(entries, expect.partition_concurrency, report)
    slots.check(entries, t, expect, report)
    for e in t.wrong_partitions:
        report.add("partition", str(e["id"]), f"sent to {e['sent']!r}, ran as {e['got']!r}")
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
            if tl.maybe_purged(t, message_id):
                continue  # the operator purged it
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
    first_run = {run.id: run.start.seq for run in reversed(t.runs)}
    for message_id, count in terminal.items():
        if message_id in t.reput_ids:
            continue  # one terminal outcome per version: `_check_versions`
        first = first_run.get(message_id)
        resent = first is not None and reruns.handled_before_acked(t, message_id, first)
        redriven = len(t.redrives.get(message_id, []))  # each a fresh message to complete
        if count > 1 + resent + redriven:  # a resent enqueue is a second message to complete
            report.add("committed_twice", message_id, f"{count} terminal outcomes committed")
    # Mid-run, an apply in progress holds a message twice (copy written, source not yet gone).
    for message_id, copies in final.pending_ids().items() if expect.drained else ():
        done = message_id in status["done"]
        if len(copies) > 1 or message_id in status["dead"] or done:
            where = [p.key for p in copies]
            report.add("duplicated", message_id, f"pending at {where} and completed or dead")


def _check_versions(t: Timeline, expect: Expect, report: Report) -> None:
    """Each version of a key another service PUT again is a message of its own (its `n`): it
    runs at most once unless a lease on a ticket holding the key expired, and the last version,
    which nothing overwrote, runs. (An earlier one may never run: overwritten before a worker
    read it, S3 no longer has it.)"""
    ran: dict[int, int] = {}
    key_of: dict[int, str] = {}
    for e in t.execs:
        if e["id"] in t.reput_ids:
            ran[int(e["n"])] = ran.get(int(e["n"]), 0) + 1
            key_of[int(e["n"])] = str(e["id"])
    failed = {int(n) for e in t.failed_enqueues for n in e.get("ns", [])}
    # Every version that ran, its PUT acknowledged or not (one that raised may have landed).
    for n, count in sorted(ran.items()):
        message_id = key_of[n]
        expired = any(message_id in t.ticket_ids(ticket) for ticket in t.reaps)
        if count > 1 and not expired:
            report.add(
                "foreign_version", message_id, f"version n={n} ran {count} times with no expiry"
            )
    for message_id, puts in t.versions.items():
        last = int(puts[-1]["n"])
        # A failed PUT of the key may have landed all the same, even after the last one (a
        # zombie request), overwriting it.
        later = any(n != last and n // 1000 == last // 1000 for n in failed)
        purged = tl.purged_between(t, puts[-1].seq, math.inf)
        if expect.drained and not later and not purged and not ran.get(last):
            report.add("foreign_version", message_id, f"its last version n={last} never ran")


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
    # which absorbs any skew within the tolerance. The lease counts from when its holder
    # computed lease_until (known from S3's copy of the write), not from when the PUT
    # returned: on a loaded machine or under SDK retries that can be seconds later.
    held = expire.true_ms - claim.renewed_ms
    if claim.lease_until_ms is not None:
        held = max(held, expire.true_ms - (claim.lease_until_ms - expect.visibility_ms))
    if held < expect.visibility_ms - expect.slack_ms:
        report.add(
            "early_redelivery",
            claim.ticket,
            f"gen {claim.gen} of {claim.actor} reaped {held} ms after its last renewal "
            f"(visibility {expect.visibility_ms} ms)",
        )


def _check_overlaps(t: Timeline, report: Report) -> None:
    """Each claim is a lease on every message of its ticket: no message may be under two valid
    leases of different tickets at once (one ticket's generations are ordered by its CAS chain)."""
    holders: dict[str, list[tl.Claim]] = {}
    # A stale record of an explicit id (re-created by a repeated enqueue after the message
    # moved on) is retired unrun ("skip"): holding it is no lease on the message.
    stale = {
        (str(entry["ticket"]), str(i))
        for entry, _ in t.commits
        for i, kind in entry["outcomes"]
        if kind == "skip" and str(i) in t.explicit
    }
    for claim in sorted(t.claims, key=lambda c: c.entry.seq):
        for message_id in sorted(t.ticket_ids(claim.ticket)):
            if (claim.ticket, message_id) in stale:
                continue
            for other in holders.get(message_id, []):
                if (other.ticket, message_id) in stale:
                    continue
                end = reruns.lease_end(t, other)
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
            if not tl.maybe_purged(t, message_id):
                report.add("dlq_mismatch", message_id, "expected in the DLQ, not there")


def _check_letter(
    message_id: str, letter: dict[str, Any], runs: list[Run], expect: Expect, report: Report
) -> None:
    reason = str(letter.get("reason", ""))
    failed = [r for r in runs if r.committed and r.outcome in ("retry", "dead")]
    by_expiry = reason.startswith("delivered ")
    if message_id in expect.dead_at_once or message_id in expect.maybe_dead:
        if any(r.outcome == "retry" and r.committed for r in runs):
            report.add("retries_not_exact", message_id, "retried, but must die at once")
        return
    if message_id not in expect.poison and not by_expiry:
        report.add("dlq_mismatch", message_id, f"dead but not expected: {reason}")
        return
    # The delivery limit's errors are not handler runs (a redriven message may hold several).
    recorded = [
        int(e["attempt"])
        for e in letter.get("errors", [])
        if not str(e.get("error") or "").startswith("delivered ")
    ]
    if recorded != [r.attempt for r in failed]:
        report.add(
            "error_history",
            message_id,
            f"errors at attempts {recorded}, failed runs at attempts {[r.attempt for r in failed]}",
        )
    attempts = int(letter.get("attempts", 0))
    limit = expect.max_retries + 1
    if (attempts != limit and not by_expiry) or (by_expiry and attempts < limit):
        report.add("retries_not_exact", message_id, f"dead at attempt {attempts} ({reason})")
    if by_expiry and not reason.startswith(f"delivered {attempts} times"):
        # The delivery limit counts the deliveries that started: the two counts agree.
        report.add("retries_not_exact", message_id, f"attempts {attempts} but {reason}")


def _count(t: Timeline, final: FinalState, report: Report) -> None:
    status = _status(t, final)
    first: dict[str, int] = {}
    for run in t.runs:
        first.setdefault(run.id, run.start.true_ms)
    for message_id, entry in t.acked.items():
        if message_id in first:
            visible = entry.true_ms + int(entry.get("delay_ms", 0))
            report.lateness_ms.append(max(first[message_id] - visible, 0))
    report.counts |= {
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
        "purged": sum(
            1 for m in t.acked if not any(m in s for s in status.values()) and tl.maybe_purged(t, m)
        ),
    }
