"""Choosing what to dispatch: pure functions over listed keys, no I/O.

Order is key order (visible time, then id). Ungrouped messages batch freely. A group's
messages go out in order, one ticket per group at a time: a busy group, or one whose next
message is not visible yet (a retry in backoff), holds back every later message of that group
and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from s3queue.protocol.keys import QueueKeys
from s3queue.storage.base import Entry


@dataclass(frozen=True, slots=True)
class Candidate:
    """A listed message object, with what its key says about it."""

    key: str
    etag: str
    size: int
    sort_ms: int
    ready_ms: int
    group: str | None = None
    count: int = 1
    origin: str | None = None
    inbox: bool = False
    target: str | None = None
    """A late notice's target (a full key): not a message, never dispatched (producer.py)."""


def msg_candidate(entry: Entry, keys: QueueKeys) -> Candidate:
    """A ``msg/`` entry; a name the library did not write is a foreign message, ready now."""
    key = keys.parse_msg(entry.key)
    if key is None:
        return Candidate(entry.key, entry.etag, entry.size, 0, 0)
    target = key.target_key()
    return Candidate(
        entry.key,
        entry.etag,
        entry.size,
        key.sort_ms,
        key.ready_ms,
        key.group,
        key.count,
        key.origin,
        target=keys.msg_key(target) if target else None,
    )


def inbox_candidate(entry: Entry) -> Candidate:
    modified = entry.last_modified_ms
    return Candidate(entry.key, entry.etag, entry.size, modified, modified, inbox=True)


@dataclass(slots=True)
class Plan:
    """Batches to publish, and where the next incremental scan must start."""

    batches: list[list[Candidate]] = field(default_factory=list)
    hold_key: str | None = None
    """The first message held back by capacity (candidates come in key order); None if none."""
    wakeups: dict[int, int] = field(default_factory=dict)
    """sort time -> due time of group heads in backoff: rescan from there once due."""
    held_groups: dict[str, str] = field(default_factory=dict)
    """group -> key of its first message not dispatched by this plan (busy, in backoff, no
    capacity, batch full): the group may not move past it until it goes out."""
    waiting: int = 0
    """Ready messages left undispatched (capacity or busy groups)."""
    limited: int = 0
    """... of which held back by the rate limit's budget (`Planner.budget`)."""
    spent: int = 0
    """Messages the batches hold."""

    def hold(self, key: str) -> None:
        if self.hold_key is None or key < self.hold_key:
            self.hold_key = key


@dataclass(slots=True)
class Planner:
    """Fills tickets from candidates in order, within `capacity` tickets, the n-th new ticket
    with at most ``limit(n)`` messages and bytes (sizing.py; None: no bound on bytes)."""

    now_ms: int
    limit: Callable[[int], tuple[int, int | None]]
    capacity: int
    in_flight: set[str]
    busy_groups: set[str]
    live_origins: set[str]
    budget: int | None = None
    """Messages this plan may take in all (what the limits leave, limits.py); None: any."""
    whole: bool = False
    """The budget is a limit's whole amount: an object larger than it may go, alone."""
    plan: Plan = field(default_factory=Plan)
    _open: list[Candidate] | None = None
    _rooms: dict[int, _Room] = field(default_factory=dict)
    """id() of each new batch -> what it may still take (kept as it fills: a grown ticket of
    1,000 messages is not summed again for each one)."""
    _group_batches: dict[str, list[Candidate]] = field(default_factory=dict)
    _blocked: set[str] = field(default_factory=set)

    def run(self, candidates: list[Candidate]) -> Plan:
        for candidate in candidates:
            if candidate.target is not None:
                continue  # a late notice: its target was fetched among the candidates
            if candidate.key in self.in_flight or candidate.origin in self.live_origins:
                continue
            if candidate.group is None and candidate.ready_ms > self.now_ms:
                continue  # a delayed message; the scan stops at the first one
            if self._over_budget(candidate):
                self._limit(candidate)
                continue
            if candidate.group is None:
                self._add_ungrouped(candidate)
            else:
                self._add_grouped(candidate, candidate.group)
        return self.plan

    def _new_batch(self, candidate: Candidate) -> list[Candidate] | None:
        if len(self.plan.batches) >= self.capacity:
            if not candidate.inbox:  # the inbox is listed from its start every tick
                self.plan.hold(candidate.key)
            self.plan.waiting += candidate.count
            return None
        batch = [candidate]
        messages, size = self.limit(len(self.plan.batches))
        room = _Room(messages, size)
        room.take(candidate)  # the first always goes in, whatever its size
        self.plan.spent += candidate.count
        self._rooms[id(batch)] = room
        self.plan.batches.append(batch)
        return batch

    def _admit(self, batch: list[Candidate], candidate: Candidate) -> bool:
        """Make room for `candidate` in `batch` if it fits (the caller then appends it)."""
        room = self._rooms[id(batch)]
        if not room.holds(candidate):
            return False
        room.take(candidate)
        self.plan.spent += candidate.count
        return True

    def _over_budget(self, candidate: Candidate) -> bool:
        """Would `candidate` take the plan past its budget? A packed object larger than a
        whole budget goes when nothing else does, or it would never go."""
        if self.budget is None or self.plan.spent + candidate.count <= self.budget:
            return False
        return not (self.whole and self.plan.spent == 0)

    def _limit(self, candidate: Candidate) -> None:
        """Held back by the budget: it waits in its place in line, as for capacity (the cursor
        stops before it: the chaos suite caught a group's head skipped when only its group was
        blocked)."""
        if not candidate.inbox:
            self.plan.hold(candidate.key)
        if candidate.group is not None:
            self._block(candidate.group, candidate)
        self.plan.waiting += candidate.count
        self.plan.limited += candidate.count

    def _add_ungrouped(self, candidate: Candidate) -> None:
        batch = self._open
        if batch is not None and self._admit(batch, candidate):
            batch.append(candidate)
        else:
            self._open = self._new_batch(candidate)

    def _add_grouped(self, candidate: Candidate, group: str) -> None:
        if group in self.busy_groups or group in self._blocked:
            self._block(group, candidate)
            self.plan.waiting += candidate.count
            return
        if candidate.ready_ms > self.now_ms:
            self._block(group, candidate)  # FIFO: nothing after a message in backoff overtakes it
            self.plan.wakeups[candidate.sort_ms] = candidate.ready_ms
            return
        batch = self._group_batches.get(group)
        if batch is not None and self._admit(batch, candidate):
            batch.append(candidate)
            return
        if batch is not None:
            self._block(group, candidate)
            self.plan.waiting += candidate.count
            return
        new = self._new_batch(candidate)
        if new is None:
            self._block(group, candidate)
        else:
            self._group_batches[group] = new

    def _block(self, group: str, candidate: Candidate) -> None:
        self._blocked.add(group)
        self.plan.held_groups.setdefault(group, candidate.key)


@dataclass(slots=True)
class _Room:
    """What a batch may still take: messages, and bytes (None: no bound)."""

    messages: int
    size: int | None

    def holds(self, candidate: Candidate) -> bool:
        fits_size = self.size is None or candidate.size <= self.size
        return candidate.count <= self.messages and fits_size

    def take(self, candidate: Candidate) -> None:
        self.messages -= candidate.count
        if self.size is not None:
            self.size -= candidate.size
