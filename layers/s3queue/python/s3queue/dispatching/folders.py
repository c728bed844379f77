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
from s3queue.dispatching.view import LiveRef, Memory, Part, busy_groups, by_priority, dispatchable
from s3queue.protocol.keys import QueueKeys, is_folder_name
from s3queue.storage.base import Storage

__all__ = [
    "Inbox",
    "inbox_and_partitions",
    "list_inbox",
    "read_folder",
    "read_round",
    "this_round",
]

Inbox = dict[str | None, list[scan.Candidate]]
"""The inbox's first page, by partition."""


def inbox_and_partitions(
    storage: Storage, keys: QueueKeys, memory: Memory, run_all: RunAll, now: int, every_ms: int
) -> Inbox:
    """The inbox, and the partition folders when due (every `every_ms`, into `memory`), listed
    at once (neither needs the other; both come after the LIST of tickets, as coordinator.py's
    docstring requires).

    An inbox found empty is listed again only with the folders: a plain PUT waits at most
    `every_ms` more, and a busy queue's ticks, which follow each other at once on AWS
    latencies (service.py), pay two LISTs, not three. An inbox that had objects is listed at
    every tick until it is found empty."""
    due = memory.discovered_ms is None or now - memory.discovered_ms >= every_ms
    if not due:
        if not memory.inbox_busy:
            return {}
        inbox = list_inbox(storage, keys)
        memory.inbox_busy = bool(inbox)
        return inbox
    inbox, folders = settled(
        run_all, [partial(list_inbox, storage, keys), partial(storage.list_folders, keys.parts)]
    )
    named = [folder[len(keys.parts) : -1] for folder in folders]
    memory.partitions = [None, *(p for p in named if is_folder_name(p))]
    memory.discovered_ms = now
    memory.inbox_busy = bool(inbox)
    return inbox  # type: ignore[no-any-return]


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
    LIST: the parts read, and the first error one raised (the caller undoes the others)."""
    reads: list[Callable[[], Part]] = [
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
        )
        for folder in this_round(memory, inbox, per_tick)
    ]
    return attempted(run_all, reads)


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
) -> Part:
    """One partition's candidates, read until there are `want` messages to dispatch."""
    cursor = memory.cursors.of(partition)
    busy = busy_groups(live, partition)

    def enough(found: Iterable[scan.Candidate]) -> bool:
        return dispatchable(found, in_flight, busy, batch_size) >= want

    saved = cursor.snapshot()
    candidates, stopped = cursor.read(storage, now, enough, want=want, inbox=inbox)
    # A group whose waiting message this tick did not read is blocked: its later messages
    # may not overtake it (FIFO), wherever the cursor is.
    absent = cursor.absent_heads(candidates)
    return Part(partition, cursor, saved, candidates, stopped, busy | absent, absent)
