"""Planning a tick: each folder's tickets within its fair share of the free slots, its limits
and the sizes the pace allows.

Apart from the tick (coordinator.py) because it does no I/O: it turns what folders.py read into
each `Part`'s plan and settles the cursors' held groups, and nothing it decides is written until
publishing.py publishes it. One folder's plan is scan.py's `Planner`; ticket sizes, sizing.py's;
the shares, shares.py's; the limits' budgets, limits.py's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from s3queue.contract.settings import QueueSettings
from s3queue.dispatching import scan, sizing
from s3queue.dispatching.limits import Budgets
from s3queue.dispatching.shares import folder_shares
from s3queue.dispatching.view import LiveRef, Memory, Part, count_refs, dispatchable
from s3queue.protocol.keys import split_lane

__all__ = ["budgets_of", "plan_round"]

MIN_TICK_MS = 50
"""Arrival rates are measured over at least this long (two ticks close together)."""


def budgets_of(memory: Memory, now: int, live: list[LiveRef]) -> Budgets | None:
    """This tick's budgets under the queue's limits (None: it has none)."""
    limits = memory.limits
    if limits is None:
        return None
    in_flight: Counter[str | None] = Counter()
    for ref in live:
        in_flight[split_lane(ref.partition)[0]] += count_refs([ref])
    return limits.budgets(now, in_flight)


def plan_round(
    memory: Memory,
    settings: QueueSettings,
    pace: sizing.Pace,
    parts: list[Part],
    *,
    live_tickets: Iterable[list[LiveRef]],
    now: int,
    capacity: int,
    in_flight: set[str],
    origins: set[str],
    queued: int,
    budgets: Budgets | None,
) -> None:
    """Each partition's plan, within its fair share of `capacity`: every partition with
    ready work gets a ticket in turn before any gets a second (round-robin). Under a
    backlog the first tickets grow (sizing.py). A limited queue's partitions each plan
    within what their limits leave (limits.py), the highest priority first. `live_tickets`:
    each live ticket's refs; `in_flight` and `origins`: the messages and copies' origins (live
    tickets' names) not to dispatch (`Sight`)."""
    batch_size = settings.batch_size
    each = [dispatchable(p.candidates, in_flight, p.blocked, batch_size) for p in parts]
    ready = sum(each)
    grown = sum(1 for refs in live_tickets if count_refs(refs) > batch_size)
    since, memory.planned_ms = memory.planned_ms, now
    rate = ready * 1000 / max(now - since, MIN_TICK_MS) if since is not None else None
    sizes = sizing.sizes(
        settings,
        pace,
        ready=ready,
        free=capacity,
        live_grown=grown,
        queued=queued,
        rate=rate,
        folders=sum(1 for n in each if n),
    )
    offset = 0

    def plan(part: Part, tickets: int) -> scan.Plan:
        tenant = split_lane(part.partition)[0]
        budget = None if budgets is None else budgets.left(tenant)[0]
        whole = budgets is not None and budgets.whole(tenant)
        return scan.Planner(
            now_ms=now,
            limit=lambda n: sizes.limit(offset + n),
            capacity=tickets,
            in_flight=in_flight,
            busy_groups=part.blocked,
            live_origins=origins,
            budget=budget,
            whole=whole,
        ).run(part.candidates)

    wanted = [plan(part, capacity) for part in parts]
    folders = [part.partition for part in parts]
    shares = folder_shares([len(w.batches) for w in wanted], folders, capacity)
    for part, want, share in zip(parts, wanted, shares, strict=True):
        if budgets is not None:  # what the limits leave, to each in turn (highest first)
            part.plan = plan(part, share)
            tenant = split_lane(part.partition)[0]
            budgets.spend(tenant, part.plan.spent, part.plan.limited)
        elif share == len(want.batches) and not offset:
            part.plan = want
        else:
            part.plan = plan(part, share)
        offset += len(part.plan.batches)
        part.cursor.settle_held(part.plan, part.absent, part.stopped)
        if share:
            memory.served = part.partition
    if len(parts) < len(memory.partitions) and not any(shares):
        memory.served = parts[-1].partition  # nothing to do here: read the next ones
