"""A tick's first pages of messages, listed beside its LIST of tickets rather than after it.

The tick's order (coordinator.py) lists the tickets first, so that a ticket missing from that
LIST was deleted before the LIST of messages began, and that LIST cannot show its retired
messages as new. Listed one after the other, the two LISTs are the longest part of a busy
tick, and the tick is how long a new message waits to be seen (issue 22's p99). So a leader
that knows its tickets lists each folder's first page beside them, where the next read starts
(`Cursor.ahead`), and keeps the race harmless instead:

- It knows every ticket the LIST of tickets can miss: it published or learnt them. Its first
  tick of an epoch, and the tick after a publication it could not tell apart from another
  process's write (publishing.py), list one after the other; so does a tick after one that
  had no slot to read with (a page would be listed for nothing).
- The tickets this LIST shows gone are held live for this tick (`dying`): their messages are
  in flight, so a page that still shows one does not dispatch it again. A retry copy a page
  shows was written before its ticket was deleted: it may go out at once, as it would have.
- A FIFO group's retry copy must go out before the group's next message, and a page listed
  beside the tickets may show the next message and not the copy. A folder in which a ticket
  this LIST shows gone held a grouped message does not use its page: it lists after the
  tickets, as always (`held_live`).

Same requests as before: the page is the one the read would have listed first.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from s3queue.common.concurrency import RunAll, settled
from s3queue.contract.settings import CoordinatorSettings, QueueSettings
from s3queue.dispatching import sizing
from s3queue.dispatching.folders import this_round
from s3queue.dispatching.view import LiveRef, Memory
from s3queue.storage.base import Entry, Page, Storage

Starts = dict[str | None, tuple[str, int]]
"""Folder -> where its first page starts (`start_after`) and how many keys it asks for."""
Pages = dict[str | None, tuple[str, Page]]
"""Folder -> its first page, with the `start_after` it was listed from."""


def starts(
    memory: Memory,
    settings: QueueSettings,
    config: CoordinatorSettings,
    pace: sizing.Pace,
    now: int,
) -> Starts:
    """The first page of each folder of the next round, if the last tick of this epoch read
    its folders (`Memory.read`); none otherwise."""
    if not memory.read:
        return {}
    most = sizing.most(settings, pace)
    limit = min(1000, 2 * settings.max_in_flight_tickets * most + 100)
    found: Starts = {}
    for folder in this_round(memory, {}, config.partitions_per_tick):
        start = memory.cursors.of(folder).ahead(now)
        if start is not None:
            found[folder] = (start, limit)
    return found


def list_beside(
    storage: Storage,
    memory: Memory,
    run_all: RunAll,
    list_tickets: Callable[[], list[Entry]],
    at: Starts,
) -> tuple[list[Entry], Pages]:
    """The LIST of tickets, and the first pages `at` listed at the same time."""
    if not at:
        return list_tickets(), {}
    folders = list(at.items())
    jobs: list[Callable[[], Any]] = [list_tickets]
    for folder, (start, limit) in folders:
        msg = memory.cursors.of(folder).keys.msg
        jobs.append(partial(storage.list, msg, start_after=start or None, limit=limit))
    listed, *pages = settled(run_all, jobs)
    return listed, {
        folder: (start, page) for (folder, (start, _)), page in zip(folders, pages, strict=True)
    }


def held_live(pages: Pages, finished: list[LiveRef]) -> list[LiveRef]:
    """The refs of the tickets this LIST showed gone, held in flight for this tick in the
    folders whose page was listed beside it; the page of a folder where one held a group is
    dropped first (that folder lists after the tickets, and holds nothing: a message such a
    ticket released is its group's next, and must go out before the group's later ones)."""
    for folder in {r.partition for r in finished if r.parsed is not None and r.parsed.group}:
        pages.pop(folder, None)
    return [r for r in finished if r.partition in pages]
