"""Where the coordinator reads ``msg/`` from: a cursor, a rewind point, wake-ups and sweeps.

A tick must cost O(new messages), never O(backlog). The cursor is a ``start_after`` key:

- with capacity left over and the end reached, it moves to ``now - straggler_margin``, so a
  message whose PUT landed late (or whose producer's clock is a little behind) is still seen;
- when capacity runs out it stays at the first message held back;
- every ``sweep_interval`` it goes back to the start once, for stragglers beyond the margin.

A busy queue's margin holds more than a page (at 1,880 messages a second, 1,000 or more keys
in flight), and a tick listed the margin, then what is new, one after the other (issue 22). So
a cursor whose scan read more than a page keeps a *frontier*: its next tick lists from there
and, at once, one *trailing* page of the margin (`join`).

A busy group's later messages are skipped, and the cursor moves past them. When the group's
ticket finishes, a one-page *rewind* reads from the group's next message (and the ticket's
released ones), apart from the cursor, so a long backlog in one group never holds the cursor
back for everyone else. A group head in backoff schedules a wake-up: a rewind once it is due.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from s3queue.contract.settings import CoordinatorSettings
from s3queue.dispatching import scan
from s3queue.protocol.keys import MsgKey, QueueKeys
from s3queue.storage.base import Entry, Storage, written_ago

PAGE = 1000  # the most keys one LIST returns


@dataclass(slots=True)
class Cursor:
    """The scan state of one leader; rebuilt (from the start) at every new epoch."""

    keys: QueueKeys
    config: CoordinatorSettings
    start_after: str = ""
    rewind_ms: int | None = None
    wakeups: dict[int, int] = field(default_factory=dict)
    """sort time -> due time of group heads in backoff."""
    held: dict[str, str] = field(default_factory=dict)
    """group -> key of its first message known to wait undispatched (busy group, backoff,
    capacity). Often behind the cursor: while a tick does not read it again, the group's later
    messages must not go out (`absent_heads`)."""
    swept: bool = False
    """This tick's scan started over from the first message."""
    swept_ms: int = 0
    expired: list[str] = field(default_factory=list)
    """Tombstones past their TTL met by the scan, to delete (`take_done`)."""
    notices: list[str] = field(default_factory=list)
    """Late notices this tick read and followed: deleted once its tickets are published."""
    frontier: str = ""
    """Where the last scan ended, having read more than a page up to now: the next tick lists
    what is new from here, and its margin (from `start_after`) beside it. "": not dense."""
    caught_up: str = ""  # where the last scan that read up to now ended: for a successor (lease)
    _now: int = 0
    _reached: str = ""  # the last key this tick's scan from the cursor (or frontier) read
    _listed: int = 0  # keys this tick listed from the cursor, frontier and trailing page

    def snapshot(self) -> Cursor:
        """A copy of the scan state, to restore when a tick fails after reading."""
        return replace(
            self, wakeups=dict(self.wakeups), held=dict(self.held), expired=[], notices=[]
        )

    def restore(self, saved: Cursor) -> None:
        """Back to `saved`: the next tick reads again what this one read and did not publish.

        A tick consumes its rewind, wake-ups and sweep and moves `held` on as it plans; if
        publishing then fails, the planned messages were never dispatched and may lie behind
        the cursor, where nothing would read them again before the sweep while their group's
        later messages go out (FIFO). Reading again is always safe: what did go out is in
        flight and skipped.
        """
        self.start_after, self.rewind_ms = saved.start_after, saved.rewind_ms
        self.wakeups, self.held = saved.wakeups, saved.held
        self.swept, self.swept_ms = saved.swept, saved.swept_ms
        self.frontier = saved.frontier
        self.notices = []  # kept in S3: read and followed again

    def read(
        self,
        storage: Storage,
        now: int,
        enough: Callable[[Iterable[scan.Candidate]], bool],
        *,
        want: int,
        inbox: Iterable[scan.Candidate] = (),
        dense: bool = False,
    ) -> tuple[list[scan.Candidate], str]:
        """Candidates: this partition's `inbox` ones (the caller lists the inbox once for every
        partition), one page from the rewind point if any, and pages from the cursor until
        there is `enough` to dispatch, at most ``scan_pages``. Also the last key read if the
        scan stopped short of now.

        The first page is sized to `want`, the messages the tick can dispatch (parsing a full
        page of 1,000 costs a busy coordinator more than the LIST itself); later ones ask for
        a full page, so a long run of a busy group's messages is crossed quickly.

        `dense` (`trailing_start` said so): the pages start at the `frontier`, and the caller
        reads the trailing page beside them and `join`s it. Late notices are not followed
        here: the caller follows them once it has every candidate (`follow`).
        """
        self._now, self._listed = now, 0
        swept = self._sweep_due(now)
        start_after = "" if swept else self.start_after  # the periodic sweep for stragglers
        due = [] if swept else [s for s, when in self.wakeups.items() if when <= now]
        rewinds = [] if swept else [r for r in (self.rewind_ms, *due) if r is not None]
        found = {c.key: c for c in inbox}
        if rewinds and self.keys.msg_after(min(rewinds)) < start_after:
            self._page(storage, self.keys.msg_after(min(rewinds)), found, 1000)
        first_page = min(PAGE, 2 * want + 100)
        start_after = self.frontier if dense else start_after
        self._reached = start_after
        stopped = self._main(storage, start_after, found, now, enough, first_page=first_page)
        # Every LIST answered: only now are the rewind and the wake-ups used up (a tick that
        # fails half-way must not lose them, or a group's waiting head is left behind).
        self.swept, self.rewind_ms = swept, None
        if swept:
            self.start_after, self.swept_ms, self.wakeups = "", now, {}
        for sort_ms in due:
            del self.wakeups[sort_ms]
        return _ordered(found), stopped

    def _main(
        self,
        storage: Storage,
        start_after: str,
        found: dict[str, scan.Candidate],
        now: int,
        enough: Callable[[Iterable[scan.Candidate]], bool],
        *,
        first_page: int,
    ) -> str:
        """The pages from the cursor; the last key read if they stopped short of now."""
        start, stopped, limit = start_after or None, "", first_page
        for _ in range(self.config.scan_pages):
            stopped = self._page(storage, start, found, limit, main=True)
            if not stopped or _sort_ms(self.keys, stopped) > now:
                return ""
            start, limit = stopped, PAGE
            if enough(found.values()):
                break
        return stopped

    def trailing_start(self, now: int) -> str | None:
        """Where this tick's trailing page starts, if the cursor is dense and no sweep is due:
        the margin, read beside the pages from the `frontier`."""
        if not self.frontier or self._sweep_due(now) or self.start_after >= self.frontier:
            return None
        return self.start_after

    def trailing(self, storage: Storage, start: str) -> Trailing:
        """The trailing page from `start` (`trailing_start`); run beside `read`."""
        page = storage.list(self.keys.msg, start_after=start, limit=PAGE)
        found: dict[str, scan.Candidate] = {}
        self._take(page.entries, found)
        last = page.entries[-1].key if page.truncated and page.entries else ""
        short = last if last and last < self.frontier else ""
        return Trailing(list(found.values()), short, len(page.entries))

    def join(
        self, candidates: list[scan.Candidate], stopped: str, trailing: Trailing
    ) -> tuple[list[scan.Candidate], str]:
        """A dense read's candidates with its trailing page's, and where the scan stopped.

        A trailing page that ended before the frontier left the keys up to it unread, and a
        group's head may be a straggler there: the grouped messages and late notices read past
        the frontier are dropped, and the scan stops at the page's end (they are read again
        from there). Ungrouped messages past it go at once: no order binds them."""
        self._listed += trailing.listed
        found = {c.key: c for c in candidates}
        found.update((c.key, c) for c in trailing.candidates)
        if not trailing.short:
            return _ordered(found), stopped
        kept = {
            key: c
            for key, c in found.items()
            if c.inbox or key <= self.frontier or (c.group is None and c.target is None)
        }
        return _ordered(kept), trailing.short

    def follow(self, storage: Storage, candidates: list[scan.Candidate]) -> list[scan.Candidate]:
        """`candidates` with the target of each late notice among them that they do not hold
        (it landed behind the cursor), so the planner sees it ahead of its group's later
        messages."""
        found = {c.key: c for c in candidates}
        for notice in [c for c in found.values() if c.target is not None]:
            self.notices.append(notice.key)
            target = notice.target
            assert target is not None
            if any(key.startswith(target) for key in found):
                continue
            # The target, or a retry copy of it (same name, more attributes), sorts first here.
            page = storage.list(self.keys.msg, start_after=target[:-1], limit=3)
            for entry in page.entries:
                tombstone = self.keys.is_tombstone(entry.key, entry.size)
                if entry.key.startswith(target) and not tombstone:
                    found[entry.key] = scan.msg_candidate(entry, self.keys)
        return _ordered(found) if len(found) > len(candidates) else candidates

    def delete_done(self, storage: Storage) -> None:
        """Delete what the tick is done with once it published: expired tombstones, followed
        late notices. Forgotten only once deleted, so a failed delete is retried next tick."""
        done = self.expired + self.notices
        if done:
            storage.delete_many(done)
            self.expired, self.notices = [], []

    def advance(self, plan: scan.Plan, stopped: str, now: int) -> None:
        """Resume at the first message held back by capacity; else where the scan stopped;
        else, having read up to now, a straggler margin before now."""
        self.wakeups.update(plan.wakeups)
        held = plan.hold_key
        self.frontier = self.caught_up = ""
        if held is not None:
            self.start_after = held[:-1]  # lists from `held` on (and its few same-prefix elders)
        elif stopped:
            self.start_after = stopped
        else:
            margin = round(self.config.straggler_margin * 1000)
            self.start_after = self.keys.msg_after(now - margin)
            # Where this scan ended (keys due later are read again); dense if it read over a page
            frontier = self.caught_up = min(self._reached, self.keys.msg_after(now))
            if self._listed > PAGE and frontier > self.start_after:
                self.frontier = frontier

    def absent_heads(self, candidates: list[scan.Candidate]) -> set[str]:
        """Held groups whose waiting message this tick did not read: blocked for this plan."""
        seen: dict[str, str] = {}
        for c in candidates:
            if c.group is not None and c.target is None:
                seen[c.group] = min(c.key, seen.get(c.group, c.key))
        return {g for g, key in self.held.items() if g not in seen or seen[g] > key}

    def settle_held(self, plan: scan.Plan, absent: set[str], stopped: str) -> None:
        """Held groups after a plan: still waiting unseen, or held back by this plan.

        A sweep that read past a held message's place without finding it proves it gone
        (purged): its group is free again.
        """
        held = {
            g: key
            for g, key in self.held.items()
            if g in absent and not (self.swept and (not stopped or key <= stopped))
        }
        for group, key in plan.held_groups.items():
            held[group] = min(key, held.get(group, key))
        self.held = held

    def finished(self, refs: Iterable[MsgKey]) -> None:
        """A ticket is gone: rewind to its groups' released messages and next in line.

        Ungrouped copies are written ahead of the cursor (apply.py) and need no rewind.
        """
        sorts: list[int] = []
        for parsed in refs:
            if parsed.group is not None:
                sorts.append(parsed.sort_ms)
                following = self.held.get(parsed.group)
                if following is not None:
                    sorts.append(_sort_ms(self.keys, following))
        if sorts:
            self._rewind(min(sorts))

    def _rewind(self, sort_ms: int) -> None:
        self.rewind_ms = sort_ms if self.rewind_ms is None else min(self.rewind_ms, sort_ms)

    def _sweep_due(self, now: int) -> bool:
        return now - self.swept_ms >= round(self.config.sweep_interval * 1000)

    def _page(
        self,
        storage: Storage,
        start: str | None,
        found: dict[str, scan.Candidate],
        limit: int,
        *,
        main: bool = False,
    ) -> str:
        """One LIST of msg/ into `found`; its last key when truncated, else "". A `main` page
        (from the cursor or the frontier) counts towards `_listed` and `_reached`."""
        page = storage.list(self.keys.msg, start_after=start, limit=limit)
        if main and page.entries:
            self._listed += len(page.entries)
            self._reached = max(self._reached, page.entries[-1].key)
        self._take(page.entries, found)
        return page.entries[-1].key if page.truncated and page.entries else ""

    def _take(self, entries: list[Entry], found: dict[str, scan.Candidate]) -> None:
        """Listed entries into `found`; tombstones past their TTL into `expired`."""
        ttl = round(self.config.tombstone_ttl * 1000)
        for entry in entries:
            if self.keys.is_tombstone(entry.key, entry.size):
                if written_ago(entry.last_modified_ms, entry.served_ms, self._now) > ttl:
                    self.expired.append(entry.key)
                continue
            found[entry.key] = scan.msg_candidate(entry, self.keys)


@dataclass(frozen=True, slots=True)
class Trailing:
    """A trailing page: candidates, last key if it ended before the frontier, keys listed."""

    candidates: list[scan.Candidate]
    short: str
    listed: int


@dataclass(slots=True)
class Cursors:
    """A leader's cursor per partition (each reads its own folder), made on first use."""

    keys: QueueKeys
    config: CoordinatorSettings
    by_partition: dict[str | None, Cursor] = field(default_factory=dict)

    def of(self, partition: str | None) -> Cursor:
        cursor = self.by_partition.get(partition)
        if cursor is None:
            cursor = Cursor(self.keys.partitioned(partition), self.config)
            self.by_partition[partition] = cursor
        return cursor

    def finished(self, ref_keys: Iterable[str]) -> None:
        """A ticket is gone: each partition's cursor rewinds for its own messages."""
        by_partition: dict[str | None, list[str]] = {}
        for key in ref_keys:
            by_partition.setdefault(self.keys.lane_of(key), []).append(key)
        for partition, keys in by_partition.items():
            cursor = self.of(partition)
            cursor.finished(msg_keys(cursor.keys, keys))


def _sort_ms(keys: QueueKeys, key: str) -> int:
    """A listed msg/ key's sort time (the key may be a tombstone's, not in the candidates)."""
    parsed = keys.parse_msg(key)
    return parsed.sort_ms if parsed is not None else 0


def _ordered(found: dict[str, scan.Candidate]) -> list[scan.Candidate]:
    return sorted(found.values(), key=lambda c: (c.sort_ms, c.key))


def msg_keys(keys: QueueKeys, names: Iterable[str]) -> list[MsgKey]:
    """The parsed ``msg/`` keys among `names` (inbox keys and foreign names are skipped)."""
    return [p for n in names if (p := keys.parse_msg(n)) is not None]
