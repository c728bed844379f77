"""The rules about runs: why a handler ran again, attempts, backoff, and when a lease ended."""

from __future__ import annotations

import itertools
from typing import Any

from s3queue.common.backoff import backoff_bound

from chaos import timeline as tl
from chaos.report import Expect, Redelivery, Report
from chaos.timeline import Run, Timeline


def lease_end(t: Timeline, claim: tl.Claim) -> int | None:
    """The seq at which a claim stopped being a valid lease (None: valid to the end)."""
    if id(claim) not in ENDS:
        ENDS[id(claim)] = (claim, _findlease_end(t, claim))
    return ENDS[id(claim)][1]


ENDS: dict[int, tuple[tl.Claim, int | None]] = {}
"""Memo of `_lease_end` for the run being checked (cleared by `check`)."""


def _findlease_end(t: Timeline, claim: tl.Claim) -> int | None:
    ends = [e.seq for e in (claim.commit, claim.lost, t.fenced.get(claim.ticket)) if e]
    ends += [e.seq for gen, e in t.reaps.get(claim.ticket, {}).items() if gen > claim.gen]
    ends += [c.entry.seq for c in t.claims if c.ticket == claim.ticket and c.gen > claim.gen]
    ends += [
        writes[0].seq
        for (ticket, gen), writes in t.writes.items()
        if ticket == claim.ticket and gen > claim.gen
    ]
    ends += [e.seq for e in t.deletes if e["ticket"] == claim.ticket and e.seq > claim.entry.seq]
    # Applied means committed, even when the commit's own answer (and record) was lost.
    ends += [e.seq for e in t.applied.get(claim.ticket, []) if e.seq > claim.entry.seq]
    return min(ends) if ends else None


def check_runs(t: Timeline, expect: Expect, report: Report) -> None:
    for message_id, runs in t.runs_of().items():
        if message_id in t.reput_ids:
            continue  # each version a message of its own: checker._check_versions
        live = []
        for run in runs:
            end = lease_end(t, run.claim) if run.claim else None
            if end is not None and end < run.start.seq:
                why = "a stale worker started the handler after its lease had been reaped"
                report.redeliveries.append(Redelivery(message_id, run.attempt, run.actor, why))
            else:
                live.append(run)
        for before, after in itertools.pairwise(live):
            _check_rerun(t, before, after, expect, report)
        for run in runs:
            _check_backoff(run, expect, report)


def handled_before_acked(t: Timeline, message_id: str, seq: int) -> bool:
    """A run at `seq` started before the message's enqueue returned: an earlier attempt of that
    PUT had applied while the producer still waited. If S3 kept failing until the message was
    handled and deleted, S3Storage's resend (after a HEAD that found nothing) created it again:
    an enqueue without an id is at-least-once there (README, guarantee 3)."""
    if message_id in t.explicit:
        return False  # its marker makes a resent PUT a no-op: a second run is a duplicate
    acked = t.acked.get(message_id)
    return acked is not None and seq < acked.seq


def redriven_between(t: Timeline, message_id: str, after: int, before: int) -> bool:
    """The operator redrove the message from the DLQ between two sequence numbers: a fresh
    message (attempt 1), which may run again."""
    return any(after < e.seq < before for e in t.redrives.get(message_id, []))


def _check_rerun(t: Timeline, a: Run, b: Run, expect: Expect, report: Report) -> None:
    if redriven_between(t, a.id, a.start.seq, b.start.seq):
        why = "redriven from the DLQ by the operator"
        report.redeliveries.append(Redelivery(b.id, b.attempt, a.actor, why))
        return
    retried = a.outcome == "retry" and a.committed
    expired = _expired(t, a, b)
    if not (retried or expired) and handled_before_acked(t, a.id, a.start.seq):
        why = "its enqueue's PUT was resent after its first write had been handled"
        report.redeliveries.append(Redelivery(b.id, b.attempt, a.actor, why))
        return
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
        fresh = tl.purged_between(t, a.start.seq, b.start.seq)
        if b.attempt <= a.attempt and not b.start.get("redelivered") and not fresh:
            report.add(
                "invisible_redelivery",
                b.id,
                f"attempt {a.attempt} ran again as {b.attempt}, not marked redelivered",
            )
    # Each committed failure adds one. An expiry adds one only to the message its ticket
    # recorded as running (Ticket.expire) - so expiries give an upper bound; that no attempt
    # counts a delivery that never started is `check_starts`'s; that a rerun is visible at
    # all (a higher attempt, or `redelivered`) is `invisible_redelivery`'s.
    most = int(retried) + _counted_expiries(t, a, b)
    purged = tl.purged_between(t, a.start.seq, b.start.seq)  # then sent again: a new one
    if not purged and not int(retried) <= b.attempt - a.attempt <= most:
        report.add(
            "attempt_accounting",
            b.id,
            f"attempt {a.attempt} -> {b.attempt}, but {int(retried)} committed failure(s) and "
            f"{most - int(retried)} expired delivery(ies) in between",
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
        end = run.end.seq if run.end else -1
        where = next((str(e.get("where", "")) for e in t.crashes if e.seq == end), "")
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


def check_starts(t: Timeline, dead: list[dict[str, Any]], expect: Expect, report: Report) -> None:
    """Attempts count only deliveries that started the handler (README guarantee 4).

    A delivery is one generation of one ticket; it started the message if a handler run of it
    began there, or if the ticket recorded it as running (the worker writes that just before
    the call, with no I/O between). A run's attempt is at most 1 + the deliveries that started
    it before (``attempt_overcount``), and a message dead-lettered by the delivery limit had
    more than ``max_retries + 1`` of them (``dead_without_running``).
    """
    started: dict[str, list[tuple[int, tuple[str, int]]]] = {}
    for run in t.runs:
        if run.claim is not None:
            started.setdefault(run.id, []).append((run.start.seq, (run.claim.ticket, run.gen)))
    for (ticket, gen), writes in t.writes.items():
        for w in writes:
            if w.get("running"):
                started.setdefault(str(w["running"]), []).append((w.seq, (ticket, gen)))
    for run in t.runs:
        before = {d for seq, d in started.get(run.id, []) if seq < run.start.seq}
        before.discard((run.ticket or "", run.gen))
        if run.attempt > len(before) + 1:
            report.add(
                "attempt_overcount",
                run.id,
                f"ran as attempt {run.attempt} after {len(before)} delivery(ies) that started it",
            )
    for letter in dead:
        message_id, reason = str(letter["id"]), str(letter.get("reason", ""))
        deliveries = {d for _, d in started.get(message_id, [])}
        if reason.startswith("delivered ") and len(deliveries) <= expect.max_retries:
            report.add(
                "dead_without_running",
                message_id,
                f"dead-lettered by the delivery limit after {len(deliveries)} started "
                f"delivery(ies) (max_retries {expect.max_retries}): {reason}",
            )
