"""The leader's view of its queue, rebuilt at every epoch, and the pure rules of a round.

A tick reads each partition's cursor in turn (`Part`), shares the free ticket slots fairly
(`fair_shares`: one each in turn before any gets a second), and plans; these helpers are
pure functions over what the tick listed, no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from s3queue.dispatching import scan, sizing
from s3queue.dispatching.cursor import Cursor, Cursors
from s3queue.dispatching.limits import Limits
from s3queue.dispatching.reconcile import Known
from s3queue.protocol.keys import MsgKey, QueueKeys, split_lane
from s3queue.protocol.tickets import Ticket
from s3queue.storage.base import Entry


@dataclass(frozen=True, slots=True)
class TickResult:
    """What one tick did and saw."""

    leader: bool
    dispatched: int = 0
    live_tickets: int = 0
    waiting: int = 0
    """Ready messages it could not dispatch yet (backpressure or busy groups)."""
    reaped: int = 0
    in_flight: int = 0
    """Messages in live tickets (a packed object counts all its messages)."""
    oldest_ready_ms: int | None = None
    """Visible time of the oldest ready message not in flight, if the tick scanned."""
    paused: bool = False
    """The queue is paused (gate.py): this tick dispatched nothing new and scanned nothing."""
    held: dict[str, int] = field(default_factory=dict)
    """Ready messages held back this tick, by the limit that held them (limits.py)."""

    @property
    def idle(self) -> bool:
        return self.leader and not (self.dispatched or self.live_tickets or self.waiting)


@dataclass(slots=True)
class Memory:
    """The leader's view; rebuilt from S3 at every new epoch."""

    cursors: Cursors
    epoch: int = 0
    next_seq: int = 0
    reserved: int = 0
    """The end of our last reserved block of seqs (lease.py): tickets below it go out at once."""
    known: dict[str, Known] = field(default_factory=dict)
    parsed: dict[str, list[LiveRef]] = field(default_factory=dict)
    """Each known ticket's refs, parsed once (a ticket's refs never change)."""
    partitions: list[str | None] = field(default_factory=lambda: [None])
    """The partitions found by the last LIST of ``parts/`` (None: the default, always there)."""
    discovered_ms: int | None = None
    inbox_busy: bool = True
    """The inbox's last LIST found objects: list it at every tick (folders.py)."""
    served: str | None = None
    """The partition served last in the last round: the next round starts after it."""
    limits: Limits | None = None
    """The queue's limits and their pacing in this epoch (limits.py); None: it has none."""
    planned_ms: int | None = None
    """When the last tick planned: the ready messages over the time since say how fast work
    arrives (`sizing.sizes`)."""
    overlap: bool = False
    """The next tick may list tickets and messages at once: this leader's last tick ended
    cleanly, after a LIST of tickets of its own, and busy (coordinator.py)."""


@dataclass(frozen=True, slots=True)
class Sight:
    """The live tickets a tick's read is judged by: known after its LIST of tickets, or, in a
    tick that lists tickets and messages at once, known before both (coordinator.py)."""

    live: list[LiveRef]
    """Each live ticket's refs."""
    in_flight: set[str]
    """Their messages' keys: not dispatched again."""
    origins: set[str]
    """Their names: copies made by them (their origin) are not dispatched while they live."""

    @classmethod
    def of(cls, tickets: dict[str, list[LiveRef]], keys: QueueKeys) -> Sight:
        live = [r for refs in tickets.values() for r in refs]
        origins = {keys.ticket_origin(key) for key in tickets}
        return cls(live, {r.key for r in live}, origins)


@dataclass(slots=True)
class Part:
    """One partition's share of a tick: what its cursor read, and the plan for it."""

    partition: str | None
    cursor: Cursor
    saved: Cursor
    candidates: list[scan.Candidate]
    stopped: str
    blocked: set[str]
    """Its groups that may not move this tick: busy in a live ticket, or their waiting head
    unread (`Cursor.absent_heads`)."""
    absent: set[str]
    plan: scan.Plan = field(default_factory=scan.Plan)


def running(known: dict[str, Known]) -> int:
    """The live tickets that hold a slot: all but those parked behind another."""
    return sum(1 for found in known.values() if not found.parked)


def parking_spots(known: dict[str, Known]) -> list[str]:
    """The live tickets a successor may be parked behind, the oldest first (the soonest
    done): marked to chain, a first delivery, not committed as far as the leader knows, not
    parked themselves, with no successor yet."""
    taken = {found.ticket.after for found in known.values()}
    spots = [
        key
        for key, found in known.items()
        if found.ticket.chain
        and not found.parked
        and not found.ticket.generation
        and found.ticket.state != "committed"
        and key not in taken
    ]
    return sorted(spots, key=lambda key: known[key].started_ms)


def count_refs(refs: list[LiveRef]) -> int:
    """The messages `refs` carry (a packed object counts all of its)."""
    return sum(r.count for r in refs)


def queued(listed: list[Entry], known: dict[str, Known], now: int) -> int:
    """Live tickets still as published (a claim changes the ETag) `sizing.QUEUED_MS` after
    it: they wait for a worker."""
    return sum(
        1
        for entry in listed
        if (found := known.get(entry.key)) is not None
        and found.ticket.state == "pending"
        and not found.parked
        and entry.etag == found.etag
        and now - found.started_ms >= sizing.QUEUED_MS
    )


def fair_shares(wanted: list[int], capacity: int) -> list[int]:
    """Tickets for each of `wanted` (in turn order) out of `capacity`: one each in turn while
    any wants more, so no partition gets a second before every other got its first."""
    shares = [0] * len(wanted)
    left = capacity
    while left > 0:
        given = 0
        for i, want in enumerate(wanted):
            if left > 0 and shares[i] < want:
                shares[i] += 1
                left -= 1
                given += 1
        if not given:
            break
    return shares


def prioritized_shares(wanted: list[int], priorities: list[int], capacity: int) -> list[int]:
    """`fair_shares` one priority at a time, the highest first: a lower priority gets only
    the slots every higher one left (strict priority); equal ones share fairly, in turn."""
    shares = [0] * len(wanted)
    left = capacity
    for level in sorted(set(priorities), reverse=True):
        at = [i for i, p in enumerate(priorities) if p == level]
        given = fair_shares([wanted[i] for i in at], left)
        for i, share in zip(at, given, strict=True):
            shares[i] = share
        left -= sum(given)
    return shares


def by_priority(lanes: list[str | None]) -> list[str | None]:
    """`lanes` (folder names) with the highest priority first, in their order otherwise."""
    return sorted(lanes, key=lambda lane: -split_lane(lane)[1])


def interleaved(
    batches: list[list[list[scan.Candidate]]],
) -> list[tuple[int, list[scan.Candidate]]]:
    """(partition index, batch) taking each partition's next batch in turn."""
    out: list[tuple[int, list[scan.Candidate]]] = []
    for row in range(max((len(b) for b in batches), default=0)):
        out += [(i, b[row]) for i, b in enumerate(batches) if row < len(b)]
    return out


def busy_groups(live: list[LiveRef], partition: str | None) -> set[str]:
    """The groups of `partition` with a message in a live ticket (a group is a partition's)."""
    return {
        r.parsed.group
        for r in live
        if r.partition == partition and r.parsed is not None and r.parsed.group
    }


def dispatchable(
    found: Iterable[scan.Candidate], in_flight: set[str], busy: set[str], batch_size: int
) -> int:
    """About how many of `found` a plan could take: a free group gives one batch at most."""
    count, per_group = 0, Counter[str]()
    for candidate in found:
        if candidate.key in in_flight:
            continue
        if candidate.group is None:
            count += candidate.count
        elif candidate.group not in busy and per_group[candidate.group] < batch_size:
            per_group[candidate.group] += 1
            count += 1
    return count


def oldest_ready(candidates: list[scan.Candidate], in_flight: set[str], now: int) -> int | None:
    """Visible time of the oldest ready message not in flight (late notices are not messages)."""
    ready = [
        c.ready_ms
        for c in candidates
        if c.key not in in_flight and c.ready_ms <= now and c.target is None
    ]
    return min(ready) if ready else None


@dataclass(frozen=True, slots=True)
class LiveRef:
    """A live ticket's ref, parsed once: its key, its partition and what its key says."""

    key: str
    partition: str | None
    parsed: MsgKey | None

    @property
    def count(self) -> int:
        return self.parsed.count if self.parsed is not None else 1


def live_refs(memory: Memory, keys: QueueKeys) -> dict[str, list[LiveRef]]:
    """Each live ticket's refs, parsed: each ticket once, not at every tick."""
    parsed = memory.parsed
    for key in parsed.keys() - memory.known.keys():
        del parsed[key]
    for key, known in memory.known.items():
        if key not in parsed:
            parsed[key] = ticket_refs(known.ticket, keys)
    return parsed


def ticket_refs(ticket: Ticket, keys: QueueKeys) -> list[LiveRef]:
    """A ticket's refs, parsed."""
    return [
        LiveRef(r.key, owning.partition, owning.parse_msg(r.key))
        for r in ticket.refs
        for owning in (keys.owning(r.key),)
    ]
