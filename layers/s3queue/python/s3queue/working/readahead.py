"""Reading a ticket's objects ahead of its handler: each object once per claim, GETs that overlap.

Apart from the ticket flow (worker.py) because it is the worker's one throughput knob and
touches no ticket: how many GETs are in flight, how far ahead of the handler they reach, and
which object a failed read leaves to be read again in its turn. Reading one ref is load.py's.

A `Stream` keeps the GETs of the next objects going while the handler runs: each message's
handler waits for its own object's GET only. Read in windows (the whole window read before its
first handler started), a message waited for its window's slowest GET, a few of which sit in
S3's long tail (p99 several times the median) in every window of a grown ticket: issue 22's p99.

A ticket whose holders keep dying before they record anything reads less far ahead
(`stalled_window`): a redelivery saves what it finished before each handler start, so a holder
that lives through its first few reads makes progress, where one that sends the GETs of 250
objects at once may die on any of them, every generation (issue 22: 200 generations of one
ticket in the chaos suite's ``clocks`` profile, each holder crashed in its burst of reads).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from s3queue.common.concurrency import (
    Pending,
    RunAll,
    Submit,
    Threads,
    is_done,
    submitter,
    wait_any,
)
from s3queue.contract.settings import QueueSettings
from s3queue.errors import S3QueueError
from s3queue.protocol.keys import QueueKeys
from s3queue.protocol.tickets import Ref, Ticket
from s3queue.storage.base import Storage
from s3queue.working.load import Loaded, load_ref

__all__ = [
    "READ_AHEAD",
    "READ_AHEAD_BYTES",
    "READ_WINDOW",
    "WORKER_POOL",
    "Reader",
    "Source",
    "Stream",
    "read_lanes",
    "read_pool",
]

READ_AHEAD = 64
"""GETs of a ticket's objects in flight at once in one walk (a Lambda's), at most (threads:
one connection each). A walk waits on S3, not on its CPU: at 32, a grown ticket of 770
messages took ~850 ms from its first handler to its last in the AWS simulation (a GET's mean
latency over 32 lanes), and p99 at 1,880 messages a second was 1,684 ms over three seeds;
at 64, 1,255 (issue 22). 128 did no better."""
READ_WINDOW = 4 * READ_AHEAD
"""Objects read (or being read) ahead of the handler, at most: the `READ_AHEAD` threads take
the next as soon as their last GET returned, and each object the handler moves past lets one
more in."""
READ_AHEAD_BYTES = 8 * 1024 * 1024
"""...and at most this many bytes of them (by the sizes the LIST gave), at least one."""
READ_LANES_PER_THREAD = 8
"""GETs in flight per thread when several threads walk tickets of one worker (`read_lanes`)..."""
READ_LANES_MIN = 32
"""...at least this many (the local runtime's floor as measured under AWS-like latency in
issue 22; it did not follow `READ_AHEAD` to 64, which was measured for a Lambda's walk
alone)..."""
READ_LANES_MAX = 128
"""...and at most this many: 256 lanes for 16 threads drained no faster than 128 (712 msg/s
against 739-802), and each lane is a connection of the client's pool."""
WORKER_POOL = READ_AHEAD + 16
"""Connections of the worker Lambda's S3 client: a walk's reads, and its claim, heartbeats,
commit and apply beside them."""


def stalled_window(ticket: Ticket, invoked_again: int = 0) -> int:
    """How many objects a holder of `ticket` reads ahead: `READ_WINDOW`, halved for each
    generation that ended with its lease and no outcome recorded (`Ticket.stalls`) and for each
    time the leader invoked it again while pending (`invoked_again`: workers that died before
    their claim), at least 1 (a read-killing object then stops its holders only once everything
    before it is saved)."""
    return max(1, READ_WINDOW >> min(ticket.stalls() + invoked_again, 16))


def read_lanes(threads: int) -> int:
    """The read-ahead threads of one queue's worker that `threads` threads share (the local
    runtime's). `READ_AHEAD` is one walk's (a Lambda runs one ticket at a time); 16 walks on
    32 lanes waited for each other's GETs under AWS-like latency: 16 threads drained 8,000
    single messages at 680-690 msg/s with 32 lanes, 740-800 with 128 (issue 22, item 4)."""
    return max(READ_LANES_MIN, min(READ_LANES_PER_THREAD * threads, READ_LANES_MAX))


def read_pool(threads: int) -> Threads:
    """The read-ahead pool of one queue's worker that `threads` threads share."""
    return Threads(read_lanes(threads), "s3queue-read")


class Source(Protocol):
    """What a reader needs of the worker it reads for (read when it reads, not copied)."""

    storage: Storage
    keys: QueueKeys
    settings: QueueSettings
    read_ahead: RunAll
    """How the objects ahead are read, `READ_AHEAD` at a time: its ``submit`` if it has one,
    else lists of what was submitted (concurrency.py, `submitter`)."""


@dataclass(frozen=True, slots=True)
class Reader:
    """The objects of one claim (or one apply), each read once: `cache` holds what was read."""

    source: Source
    cache: dict[str, Loaded | None]

    def __call__(self, ref: Ref) -> Loaded | None:
        """`ref`'s object, read once per claim: the cache holds what was read before."""
        cache = self.cache
        if ref.key not in cache:
            source = self.source
            max_bytes = source.settings.max_message_bytes
            cache[ref.key] = load_ref(source.storage, source.keys, ref, max_bytes)
        return cache[ref.key]

    def attempt(self, ref: Ref) -> tuple[str, Loaded | None] | None:
        """`ref`'s object read, or None if the read failed: the call for it in its turn reads
        it again, and its error surfaces there, where it would have without a read-ahead."""
        source = self.source
        max_bytes = source.settings.max_message_bytes
        try:
            return ref.key, load_ref(source.storage, source.keys, ref, max_bytes)
        except S3QueueError:
            return None


@dataclass(slots=True)
class Stream:
    """`refs`' objects in order, each read ahead by `submit` (`READ_WINDOW` objects and
    `READ_AHEAD_BYTES` ahead of the handler at most), each handed out once its own read
    returned. `close` drops the reads not started: a walk that stops early (time short, a lost
    lease) does not leave GETs behind it."""

    reader: Reader
    refs: list[Ref]
    submit: Submit
    window: int = READ_WINDOW
    """Objects read ahead of the handler at most (`stalled_window`)."""
    _pending: dict[int, Pending] = field(default_factory=dict)
    _next: int = 0
    _bytes: int = 0

    @classmethod
    def of(cls, reader: Reader, refs: list[Ref], window: int = READ_WINDOW) -> Stream:
        return cls(reader, refs, submitter(reader.source.read_ahead), window)

    def ready(self, at: int) -> bool:
        """Whether `refs[at]`'s object can be handed out without waiting (read, or its
        read-ahead returned)."""
        pending = self._pending.get(at)
        return self.refs[at].key in self.reader.cache or (pending is not None and is_done(pending))

    def read(self, at: int, base: int | None = None) -> Loaded | None:
        """`refs[at]`'s object (read now if its read-ahead failed; its error raised then).
        `base`: the first object the handler has not had yet, if not `at` (the window counts
        from it)."""
        ref = self.refs[at]
        self._top_up(at if base is None else base)
        pending = self._pending.pop(at, None)
        if pending is not None:
            self._bytes -= ref.size
            found = pending.result()
            if found is not None:
                self.reader.cache[found[0]] = found[1]
        return self.reader(ref)

    def read_ahead_from(self, base: int) -> None:
        """Start the reads the bounds let in, counting the window from `base`."""
        self._top_up(base)

    def wait_any(self, indexes: list[int]) -> None:
        """Return once one of `indexes`' objects is `ready` (concurrency.py, `wait_any`)."""
        if any(self.ready(i) for i in indexes):
            return
        wait_any([self._pending[i] for i in indexes if i in self._pending])

    def _top_up(self, at: int) -> None:
        """Submit the reads of the objects after `at` that the bounds let in."""
        refs, cache = self.refs, self.reader.cache
        self._next = max(self._next, at)
        end = min(len(refs), at + self.window)
        while self._next < end:
            ref = refs[self._next]
            if ref.key not in cache:
                if self._pending and self._bytes + ref.size > READ_AHEAD_BYTES:
                    return
                self._pending[self._next] = self.submit(partial(self.reader.attempt, ref))
                self._bytes += ref.size
            self._next += 1

    def close(self) -> None:
        for pending in self._pending.values():
            pending.cancel()
        self._pending.clear()
