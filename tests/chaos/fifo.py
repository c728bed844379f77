"""FIFO within a group: enqueue order, at most one in flight, nothing overtakes a failure.

The promise (README, ``Queue.enqueue``, protocol.md "FIFO groups"): messages that share a
``group`` are dispatched in enqueue order with at most one in flight per group; if one fails,
nothing of its group overtakes it until it succeeds or is dead-lettered. Two rules, both
reported as ``fifo``:

(a) *Order.* For messages m1 before m2 of one group, every handler start of m2 comes after m1
    reached its final outcome: a terminal outcome (done or dead) of m1 was in S3 (a commit, or
    a heartbeat that recorded it in its ticket, which every later generation commits), or a
    run of m1 ended done or dead earlier *in the same claim* (one ticket generation holding
    both, run in order: it commits both outcomes or neither, and if neither, both run again
    as a counted redelivery).

    "Before" is the producer's order: one producer's enqueues are sequential, so the order of
    their acknowledgements. Enqueues of different producers are ordered by their key's time
    (the producer's clock, which is what the queue orders by) when their acknowledgements agree;
    the same millisecond, or acknowledgements in the other order (concurrent enqueues), leave
    the order ambiguous and the pair is exempt (counted as ``fifo_exempt``). A grouped message
    whose enqueue raised (it may have applied all the same) has no known place and is not
    ordered either.

(b) *One in flight.* No two handler runs of one group overlap on different workers while both
    leases are valid. A run is in flight from its handler start to its end (the handler
    returned or raised, or its process died) or the end of its claim's lease, whichever comes
    first: a run whose lease was reaped is no longer in flight from the reap on (a stale
    worker may still be running it; only a lease expiry allows that, and it is counted as a
    redelivery).
"""

from __future__ import annotations

import math

from s3queue.protocol.keys import parse_msg_name

from chaos import reruns
from chaos import timeline as tl
from chaos.history import Entry
from chaos.report import Report
from chaos.timeline import Run, Timeline

Order = dict[str, list[tuple[str, list[str]]]]
"""group -> [(message id, the messages of its group known to be enqueued before it)]."""


def check(t: Timeline, report: Report) -> None:
    order = _order(t, report)
    _check_order(t, order, report)
    _check_one_in_flight(t, report)


def group_of_key(key: str) -> str | None:
    """A message key's group, named with its partition (a group lives inside one)."""
    parsed = parse_msg_name(key.rsplit("/", 1)[-1])
    if parsed is None or parsed.group is None:
        return None
    _, parts, rest = key.partition("/parts/")
    return f"{rest.split('/', 1)[0]}:{parsed.group}" if parts else parsed.group


def _order(t: Timeline, report: Report) -> Order:
    """Each group's messages in enqueue order (see module), counted in the report."""
    groups: dict[str, list[tuple[str, Entry]]] = {}
    for message_id, entry in t.grouped.items():
        group = group_of_key(str(entry["key"]))
        assert group is not None
        groups.setdefault(group, []).append((message_id, entry))
    order: dict[str, list[tuple[str, list[str]]]] = {}
    exempt = 0
    for group, members in groups.items():
        members.sort(key=lambda m: m[1].seq)
        rows = []
        for j, (later, b) in enumerate(members):
            before = []
            for earlier, a in members[:j]:
                if _before(a, b):
                    before.append(earlier)
                else:
                    exempt += 1
            rows.append((later, before))
        order[group] = rows
    report.counts["groups"] = len(groups)
    report.counts["grouped"] = sum(len(m) for m in groups.values())
    report.counts["fifo_exempt"] = exempt
    return order


def _before(a: Entry, b: Entry) -> bool:
    """Enqueue a (acknowledged first) is known to precede enqueue b (see module)."""
    if a.actor == b.actor:
        return True
    sort_a = parse_msg_name(str(a["key"]).rsplit("/", 1)[-1])
    sort_b = parse_msg_name(str(b["key"]).rsplit("/", 1)[-1])
    return sort_a is not None and sort_b is not None and sort_a.sort_ms < sort_b.sort_ms


def _final(t: Timeline) -> dict[str, float]:
    """Message id -> the first seq at which a terminal outcome of it was in S3: committed, or
    recorded by a heartbeat (S3's writes from the Oracle; else the heartbeat events)."""
    final: dict[str, float] = {}
    writes = [w for ws in t.writes.values() for w in ws] + [e for e, _ in t.commits]
    terminal = [(str(i), w.seq) for w in writes for i, kind in w["outcomes"] if kind in tl.TERMINAL]
    terminal += [
        (r.id, r.recorded_seq)
        for r in t.runs
        if r.outcome in tl.TERMINAL and r.recorded_seq is not None
    ]
    for message_id, seq in terminal:
        final[message_id] = min(seq, final.get(message_id, seq))
    return final


def _check_order(t: Timeline, order: Order, report: Report) -> None:
    final = _final(t)
    # (message id, id of a claim) -> seq of its first terminal finish in that claim
    finished: dict[tuple[str, int], int] = {}
    for e, claim in t.finishes:
        if claim is not None:
            finished.setdefault((str(e["message_id"]), id(claim)), e.seq)
    runs = t.runs_of()
    for group, rows in order.items():
        for later, before in rows:
            for run in runs.get(later, []):
                start = run.start.seq
                for earlier in before:
                    at = final.get(earlier, math.inf)
                    if at < start or finished.get((earlier, id(run.claim)), start) < start:
                        continue
                    if at == math.inf and tl.maybe_purged(t, earlier):
                        continue  # the operator purged it: nothing of it is left to wait for
                    report.add(
                        "fifo",
                        later,
                        f"group {group}: {run.actor} started it (attempt {run.attempt}, seq "
                        f"{start}) before {earlier}, enqueued earlier, was done or dead "
                        f"({'never' if at == math.inf else f'at seq {at}'})",
                    )
                    break  # one report per run: its first unfinished predecessor


def _check_one_in_flight(t: Timeline, report: Report) -> None:
    by_group: dict[str, list[tuple[int, float, Run]]] = {}
    for run in t.runs:
        group = _group_of_run(t, run)
        if group is None:
            continue
        end = run.end.seq if run.end is not None else math.inf
        lease = reruns.lease_end(t, run.claim) if run.claim is not None else None
        until = min(end, lease if lease is not None else math.inf)
        if until > run.start.seq:  # else a stale worker's run: never in flight
            by_group.setdefault(group, []).append((run.start.seq, until, run))
    for group, spans in by_group.items():
        spans.sort(key=lambda s: s[0])
        for i, (_, until, a) in enumerate(spans):
            for start, _, b in spans[i + 1 :]:
                if start >= until:
                    break
                if a.actor == b.actor:
                    continue
                report.add(
                    "fifo",
                    b.id,
                    f"group {group}: {b.actor} started it (attempt {b.attempt}, seq {start}) "
                    f"while {a.actor}'s run of {a.id} (seq {a.start.seq}) was in flight on a "
                    "valid lease: two in flight",
                )


def _group_of_run(t: Timeline, run: Run) -> str | None:
    entry = t.grouped.get(run.id)
    if entry is not None:
        return group_of_key(str(entry["key"]))
    ref = run.start.get("ref")
    return group_of_key(str(ref)) if ref else None
