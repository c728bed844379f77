"""Reading a tick's folders: the inbox, which partition folders exist, which of them this tick
reads in turn, and each one's candidates from its cursor.

Apart from the tick (coordinator.py) because this is the tick's read side, all its LISTs after
the LIST of tickets, and nothing here writes: what is read is planned by planning.py and
published by publishing.py. Where a folder's cursor stands and how it reads is cursor.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial

from s3queue.common.concurrency import RunAll, attempted, settled
from s3queue.dispatching import scan
from s3queue.dispatching.cursor import Trailing
from s3queue.dispatching.reconcile import Send
from s3queue.dispatching.view import (
    LiveRef,
    Memory,
    Part,
    Sight,
    busy_groups,
    by_priority,
    dispatchable,
)
from s3queue.protocol.keys import QueueKeys, is_folder_name
from s3queue.storage.base import Entry, Storage

__all__ = [
    "Inbox",
    "adopt_frontiers",
    "discover_beside",
    "frontiers",
    "inbox_and_partitions",
    "list_inbox",
    "read_folder",
    "read_round",
    "read_tick",
    "this_round",
    "undo",
]

Inbox = dict[str | None, list[scan.Candidate]]
"""The inbox's first page, by partition."""


def inbox_and_partitions(
    storage: Storage,
    keys: QueueKeys,
    memory: Memory,
    run_all: RunAll,
    now: int,
    every_ms: int,
    background: Send | None = None,
) -> Inbox:
    """The inbox, and the partition folders when due (every `every_ms`, into `memory`), listed
    at once (neither needs the other; both come after the LIST of tickets, as coordinator.py's
    docstring requires).

    An inbox found empty is listed again only with the folders: a plain PUT waits at most
    `every_ms` more, and a busy queue's ticks, which follow each other at once on AWS
    latencies (service.py), pay two LISTs, not three. An inbox that had objects is listed at
    every tick until it is found empty.

    With `background` (the coordinator Lambda's threads, which its invokes run on), a queue
    whose inbox was empty does not wait for the discovery at all: it is listed beside the tick
    and learnt for the next one (`_discover`). Only whether the inbox has objects and which
    folders exist is taken from it, never an object: the next tick lists the inbox again after
    its own LIST of tickets, so the order of the LISTs holds (coordinator.py). A plain PUT into
    an empty inbox then waits at most one tick more."""
    due = memory.discovered_ms is None or now - memory.discovered_ms >= every_ms
    if not due:
        if not memory.inbox_busy:
            return {}
        inbox = list_inbox(storage, keys)
        memory.inbox_busy = bool(inbox)
        return inbox
    if background is not None and memory.discovered_ms is not None and not memory.inbox_busy:
        memory.discovered_ms = now
        background(partial(_discover, storage, keys, memory))
        return {}
    inbox, folders = settled(
        run_all, [partial(list_inbox, storage, keys), partial(storage.list_folders, keys.parts)]
    )
    _learn_folders(keys, memory, folders)
    memory.discovered_ms = now
    memory.inbox_busy = bool(inbox)
    return inbox  # type: ignore[no-any-return]


def discover_beside(
    list_tickets: Callable[[], list[Entry]],
    storage: Storage,
    keys: QueueKeys,
    memory: Memory,
    run_all: RunAll,
    background: Send | None,
    now: int,
) -> list[Entry]:
    """The tick's LIST of tickets (`list_tickets`). A leader's first tick with `background`
    (the coordinator Lambda, whose every run takes over from the one before) discovers beside
    it, as `_discover` does beside a later tick: the folders, and whether the inbox has
    objects (never an object: `inbox_and_partitions` lists a busy inbox after this LIST, in
    the order coordinator.py requires), so its first read waits for no discovery of its own
    (issue 22: the handover's p99)."""
    if background is None or memory.discovered_ms is not None:
        return list_tickets()
    memory.discovered_ms = now  # `_discover` clears it if a LIST fails: found in line then
    listed, _ = settled(run_all, [list_tickets, partial(_discover, storage, keys, memory)])
    return listed  # type: ignore[no-any-return]


def _discover(storage: Storage, keys: QueueKeys, memory: Memory) -> None:
    """The folders and whether the inbox has objects, for the next tick (`background`). If a
    LIST fails, the next tick discovers again itself, and its error is the tick's."""
    try:
        busy = bool(storage.list(keys.inbox, limit=1).entries)
        folders = storage.list_folders(keys.parts)
    except Exception:  # noqa: BLE001 - the next tick lists again, in line, and raises
        memory.discovered_ms = None
        return
    _learn_folders(keys, memory, folders)
    memory.inbox_busy = busy


def _learn_folders(keys: QueueKeys, memory: Memory, folders: tuple[str, ...]) -> None:
    named = [folder[len(keys.parts) : -1] for folder in folders]
    memory.partitions = [None, *(p for p in named if is_folder_name(p))]


def list_inbox(storage: Storage, keys: QueueKeys) -> Inbox:
    """The inbox's first page (listed once a tick, from its start), by partition."""
    found: Inbox = {}
    for entry in storage.list(keys.inbox).entries:
        lane = keys.lane_of(entry.key)
        found.setdefault(lane, []).append(scan.inbox_candidate(entry))
    return found


def this_round(memory: Memory, inbox: Inbox, per_tick: int) -> list[str | None]:
    """The partitions this tick reads, starting at this tick's turn: every partition found
    in ``parts/`` (listed every `discover_interval`) or the inbox, and the default one;
    at most `per_tick` (`partitions_per_tick`) of them, the next ones first at the next tick.
    Priority lanes come first, the highest first (`by_priority`)."""
    known = set(memory.partitions)
    everyone = memory.partitions + sorted(p for p in inbox if p not in known and p)
    start = everyone.index(memory.served) + 1 if memory.served in everyone else 0
    rotated = by_priority(everyone[start:] + everyone[:start])
    return rotated[: max(1, per_tick)]


def read_round(
    storage: Storage,
    memory: Memory,
    run_all: RunAll,
    inbox: Inbox,
    *,
    per_tick: int,
    now: int,
    want: int,
    batch_size: int,
    in_flight: set[str],
    live: list[LiveRef],
) -> tuple[list[Part], Exception | None]:
    """Every folder of this tick's round (`this_round`) read at once, each its own cursor's
    LIST, and beside it a dense cursor's trailing page (cursor.py): the parts read, and the
    first error one raised (the caller undoes the others)."""
    folders = this_round(memory, inbox, per_tick)
    starts = {f: memory.cursors.of(f).trailing_start(now) for f in folders}
    reads: list[Callable[[], Part | tuple[str | None, Trailing]]] = [
        partial(
            read_folder,
            storage,
            memory,
            folder,
            now=now,
            want=want,
            batch_size=batch_size,
            in_flight=in_flight,
            live=live,
            inbox=inbox.get(folder, []),
            dense=starts[folder] is not None,
        )
        for folder in folders
    ]
    for folder, start in starts.items():
        if start is not None:
            reads.append(partial(_trailing, storage, memory, folder, start))
    read, failed = attempted(run_all, reads)
    parts = [p for p in read if isinstance(p, Part)]
    if failed is not None:
        return parts, failed
    pages = dict(t for t in read if not isinstance(t, Part))
    try:
        for part in parts:
            if starts[part.partition] is not None:
                _join(storage, part, pages[part.partition])
    except Exception as exc:  # noqa: BLE001 - the caller undoes every part read
        return parts, exc
    return parts, None


def read_tick(
    storage: Storage,
    memory: Memory,
    run_all: RunAll,
    inbox: Inbox,
    per_tick: int,
    batch_size: int,
    *,
    sight: Sight,
    now: int,
    want: int,
) -> list[Part]:
    """`read_round`, judged by `sight` (which messages are in flight, which groups busy); a
    failure undoes every part read (`undo`) and is raised."""
    parts, failed = read_round(
        storage,
        memory,
        run_all,
        inbox,
        per_tick=per_tick,
        now=now,
        want=want,
        batch_size=batch_size,
        in_flight=sight.in_flight,
        live=sight.live,
    )
    if failed is not None:
        undo(parts)
        raise failed
    return parts


def undo(parts: list[Part]) -> None:
    """Reads not used: the next tick reads their messages again, in their place in line (a
    partition read used up its rewind and wake-ups: `Cursor.restore`)."""
    for part in parts:
        part.cursor.restore(part.saved)


def _trailing(
    storage: Storage, memory: Memory, folder: str | None, start: str
) -> tuple[str | None, Trailing]:
    return folder, memory.cursors.of(folder).trailing(storage, start)


def _join(storage: Storage, part: Part, trailing: Trailing) -> None:
    """A dense part with its trailing page (`Cursor.join`), its late notices followed; its
    `blocked` held only its busy groups until now (`read_folder`)."""
    cursor = part.cursor
    candidates, part.stopped = cursor.join(part.candidates, part.stopped, trailing)
    part.candidates = cursor.follow(storage, candidates)
    part.absent = cursor.absent_heads(part.candidates)
    part.blocked = part.blocked | part.absent


def read_folder(
    storage: Storage,
    memory: Memory,
    partition: str | None,
    *,
    now: int,
    want: int,
    batch_size: int,
    in_flight: set[str],
    live: list[LiveRef],
    inbox: list[scan.Candidate],
    dense: bool = False,
) -> Part:
    """One partition's candidates, read until there are `want` messages to dispatch (from the
    cursor's frontier if it is `dense`: the caller then joins its trailing page)."""
    cursor = memory.cursors.of(partition)
    busy = busy_groups(live, partition)

    def enough(found: Iterable[scan.Candidate]) -> bool:
        return dispatchable(found, in_flight, busy, batch_size) >= want

    saved = cursor.snapshot()
    candidates, stopped = cursor.read(storage, now, enough, want=want, inbox=inbox, dense=dense)
    if dense:  # absent heads once the trailing page is joined (read_round)
        return Part(partition, cursor, saved, candidates, stopped, busy, set())
    candidates = cursor.follow(storage, candidates)
    # A group whose waiting message this tick did not read is blocked: its later messages
    # may not overtake it (FIFO), wherever the cursor is.
    absent = cursor.absent_heads(candidates)
    return Part(partition, cursor, saved, candidates, stopped, busy | absent, absent)


def frontiers(memory: Memory) -> dict[str, str]:
    """Where each folder's last scan that read up to now ended ("" names the default folder),
    for the lease: where a successor's first tick lists what is new from (advisory.py)."""
    return {
        folder or "": cursor.caught_up
        for folder, cursor in list(memory.cursors.by_partition.items())
        if cursor.caught_up
    }


def adopt_frontiers(memory: Memory, inherited: dict[str, str], now: int) -> None:
    """A new leader's fresh cursors start dense at the frontiers its predecessor handed over:
    the first tick lists what is new from there and one page from each folder's start beside
    it (`Cursor.join`), instead of a sweep from the start. A key outside its folder's
    ``msg/``, or of no folder a queue can have, is ignored (advisory: never trusted beyond a
    place to list from)."""
    for name, frontier in inherited.items():
        if name and not is_folder_name(name):
            continue
        cursor = memory.cursors.of(name or None)
        if frontier.startswith(cursor.keys.msg) and not cursor.start_after:
            cursor.frontier, cursor.swept_ms = frontier, now
