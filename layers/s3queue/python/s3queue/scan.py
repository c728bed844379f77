"""Choosing what to dispatch: pure functions over listed keys, no I/O.

Order is key order (visible time, then id). Ungrouped messages batch freely. A group's
messages go out in order, one ticket per group at a time: a busy group, or one whose next
message is not visible yet (a retry in backoff), holds back every later message of that group
and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from s3queue.keys import parse_msg_name
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


def msg_candidate(entry: Entry, name: str) -> Candidate:
    """A ``msg/`` entry; a name the library did not write is a foreign message, ready now."""
    key = parse_msg_name(name)
    if key is None:
        return Candidate(entry.key, entry.etag, entry.size, 0, 0)
    return Candidate(
        entry.key,
        entry.etag,
        entry.size,
        key.sort_ms,
        key.ready_ms,
        key.group,
        key.count,
        key.origin,
    )


def inbox_candidate(entry: Entry) -> Candidate:
    return Candidate(
        entry.key, entry.etag, entry.size, entry.last_modified_ms, entry.last_modified_ms
    )


@dataclass(slots=True)
class Plan:
    """Batches to publish, and where the next incremental scan must start."""

    batches: list[list[Candidate]] = field(default_factory=list)
    hold_ms: int | None = None
    """Earliest sort time of a message held back by capacity or a backoff; None if none."""
    waiting: int = 0
    """Ready messages left undispatched (capacity or busy groups)."""

    def hold(self, sort_ms: int) -> None:
        self.hold_ms = sort_ms if self.hold_ms is None else min(self.hold_ms, sort_ms)


@dataclass(slots=True)
class Planner:
    """Fills tickets from candidates in order, within `capacity` tickets."""

    now_ms: int
    batch_size: int
    capacity: int
    in_flight: set[str]
    busy_groups: set[str]
    live_origins: set[str]
    plan: Plan = field(default_factory=Plan)
    _open: list[Candidate] | None = None
    _group_batches: dict[str, list[Candidate]] = field(default_factory=dict)
    _blocked: set[str] = field(default_factory=set)

    def run(self, candidates: list[Candidate]) -> Plan:
        for candidate in candidates:
            if candidate.key in self.in_flight or candidate.origin in self.live_origins:
                continue
            if candidate.group is None and candidate.ready_ms > self.now_ms:
                continue  # a delayed message; the scan stops at the first one
            if candidate.group is None:
                self._add_ungrouped(candidate)
            else:
                self._add_grouped(candidate, candidate.group)
        return self.plan

    def _new_batch(self, candidate: Candidate) -> list[Candidate] | None:
        if len(self.plan.batches) >= self.capacity:
            self.plan.hold(candidate.sort_ms)
            self.plan.waiting += candidate.count
            return None
        batch = [candidate]
        self.plan.batches.append(batch)
        return batch

    def _add_ungrouped(self, candidate: Candidate) -> None:
        batch = self._open
        if batch is not None and sum(c.count for c in batch) + candidate.count <= self.batch_size:
            batch.append(candidate)
        else:
            self._open = self._new_batch(candidate)

    def _add_grouped(self, candidate: Candidate, group: str) -> None:
        if group in self.busy_groups or group in self._blocked:
            self._blocked.add(group)
            self.plan.waiting += candidate.count
            return
        if candidate.ready_ms > self.now_ms:
            self._blocked.add(group)  # FIFO: nothing after a message in backoff may overtake it
            self.plan.hold(candidate.sort_ms)
            return
        batch = self._group_batches.get(group)
        if batch is not None and len(batch) < self.batch_size:
            batch.append(candidate)
            return
        if batch is not None:
            self._blocked.add(group)
            self.plan.waiting += candidate.count
            return
        new = self._new_batch(candidate)
        if new is None:
            self._blocked.add(group)
        else:
            self._group_batches[group] = new
