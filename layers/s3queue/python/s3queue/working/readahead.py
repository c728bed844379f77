"""Reading a ticket's objects ahead of its handler: each object once per claim, GETs that overlap.

Apart from the ticket flow (worker.py) because it is the worker's one throughput knob and
touches no ticket: how many GETs are in flight, how far ahead of the handler they reach, and
which object a failed read leaves to be read again in its turn. Reading one ref is load.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from s3queue.common.concurrency import RunAll
from s3queue.contract.settings import QueueSettings
from s3queue.errors import S3QueueError
from s3queue.protocol.keys import QueueKeys
from s3queue.protocol.tickets import Ref
from s3queue.storage.base import Storage
from s3queue.working.load import Loaded, load_ref

__all__ = ["READ_AHEAD", "READ_AHEAD_BYTES", "READ_WINDOW", "Reader", "Source", "window"]

READ_AHEAD = 32
"""GETs of a ticket's objects in flight at once, at most (threads: one connection each)."""
READ_WINDOW = 4 * READ_AHEAD
"""Objects read ahead of the handler in one go, at most, by the `READ_AHEAD` threads: a thread
takes the next object as soon as its last GET returned, so a window costs about
``READ_WINDOW / READ_AHEAD`` GETs one after another plus one slow GET, where windows of
`READ_AHEAD` each waited for their slowest GET (~90 ms per 32 objects on AWS, most of a grown
ticket's time in its worker)."""
READ_AHEAD_BYTES = 8 * 1024 * 1024
"""...and at most this many bytes of them (by the sizes the LIST gave), at least one."""


class Source(Protocol):
    """What a reader needs of the worker it reads for (read when it reads, not copied)."""

    storage: Storage
    keys: QueueKeys
    settings: QueueSettings
    read_ahead: RunAll
    """How the next `READ_WINDOW` objects are read, `READ_AHEAD` at a time (concurrency.py)."""


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

    def ahead(self, refs: list[Ref]) -> None:
        """Read `refs`' objects at once, into the cache: a ticket's GETs overlap instead of
        adding up. One that fails is left out: the call for it reads it again in its turn, and
        its error surfaces there, where it did before."""
        cache, source = self.cache, self.source
        wanted = [ref for ref in refs if ref.key not in cache]
        max_bytes = source.settings.max_message_bytes

        def read(ref: Ref) -> tuple[str, Loaded | None] | None:
            try:
                return ref.key, load_ref(source.storage, source.keys, ref, max_bytes)
            except S3QueueError:
                return None

        jobs: list[Callable[[], Any]] = [partial(read, ref) for ref in wanted]
        for found in source.read_ahead(jobs):
            if found is not None:
                cache[found[0]] = found[1]


def window(refs: list[Ref], at: int) -> list[Ref]:
    """The refs to read at once from `at`: `READ_WINDOW` of them, within `READ_AHEAD_BYTES`."""
    found: list[Ref] = []
    total = 0
    for ref in refs[at : at + READ_WINDOW]:
        total += ref.size
        if found and total > READ_AHEAD_BYTES:
            break
        found.append(ref)
    return found
