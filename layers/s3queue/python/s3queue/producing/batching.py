"""Group commit: concurrent single enqueues packed into one object, one PUT for many callers.

    with queue.batching(window=0.05) as batch:       # share `batch` between request threads
        batch.enqueue({"to": "ada@example.com"})     # returns the id once it is durable

The first caller to find no open batch *leads* it: it waits up to `window` seconds (less when
`max_messages` callers or `max_bytes` of bodies joined), closes it, writes its objects and
settles every member; the others wait for their own message's object. While a leader writes,
new callers open the next batch, so writes overlap::

    caller A  enqueue: opens batch 1 ..... window ..... close, PUT (A, B, C) --- returns
    caller B       enqueue: joins batch 1 ...................................... returns
    caller C            enqueue: joins batch 1 ................................. returns
    caller D                                    enqueue: opens batch 2 ... its leader's PUT

- A caller returns only once S3 acknowledged the PUT of the object holding its message; a PUT
  that fails raises its error in every caller that object carried, and in no other, so nothing
  acknowledged is lost (a failed enqueue may still have landed, as with `Queue.enqueue`).
- One object per partition, group and delay: an object has one key, so one folder, one place
  in one group's line and one visible time; a batch holding several writes one object for each.
  ``attributes`` are per message (in its record), so they never split an object.
- The key time of a batch's objects is its *close* time, not its opening: later than the start
  of every enqueue in it, so a group's enqueues that do not overlap keep their order, also
  against other producers (docs/protocol.md, "Group commit").
- An explicit ``id`` is not batched: its dedup marker names its message's own object, which a
  shared object cannot be; such a call is `Queue.enqueue` (two PUTs), in the caller's thread.
- Every wait (the leader's window, a member's wait for its object) is on a condition the
  queue's clock makes when it offers ``condition()`` (the AWS simulation's clock, whose waits
  pass in virtual time), else on a `threading.Condition`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from s3queue.common.clock import Clock
from s3queue.errors import InvalidArgument, S3QueueError
from s3queue.producing.arguments import Delay, check_message
from s3queue.producing.batch import PACK_BYTES
from s3queue.producing.producer import Queue
from s3queue.protocol.keys import MsgKey, QueueKeys, key_time, new_id
from s3queue.protocol.records import Record, record_for

MAX_WINDOW = 10.0
"""Seconds: a longer window holds every caller longer than any request should wait."""
DEFAULT_MAX_MESSAGES = 1000

_Lot = tuple[str | None, str | None, int]
"""What one object shares: its partition, group and delay (ms)."""


class _Durable:
    """One caller's acknowledgement: settled once, by its batch's leader; awaited by the caller."""

    def __init__(self, condition: threading.Condition) -> None:
        self._condition = condition
        self._settled = False
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self._settled

    def settle(self, error: BaseException | None = None) -> None:
        """The first settlement counts; a later one is ignored."""
        with self._condition:
            if not self._settled:
                self._settled, self._error = True, error
                self._condition.notify_all()

    def result(self) -> None:
        """Wait until settled; raise the error it was settled with, if any."""
        with self._condition:
            self._condition.wait_for(self.done)
        if self._error is not None:
            raise self._error


@dataclass(slots=True)
class _Entry:
    record: Record
    keys: QueueKeys
    """The keys of the message's partition."""
    delay_ms: int
    size: int
    durable: _Durable


@dataclass(slots=True)
class _Batch:
    entries: list[_Entry] = field(default_factory=list)
    size: int = 0
    full: bool = False


class GroupCommit:
    """A batching producer on one `Queue`: `enqueue` calls within `window` share one PUT.

    Thread-safe: share one between the threads of a service. A context manager whose exit
    writes a waiting batch at once (`flush`); it stays usable afterwards.
    """

    def __init__(
        self,
        queue: Queue,
        *,
        window: float = 0.05,
        max_messages: int = DEFAULT_MAX_MESSAGES,
        max_bytes: int | None = None,
    ) -> None:
        if not isinstance(window, int | float) or not 0 <= window <= MAX_WINDOW:
            raise InvalidArgument(f"window must be 0 to {MAX_WINDOW} seconds, got {window!r}")
        if not isinstance(max_messages, int) or max_messages < 1:
            raise InvalidArgument(f"max_messages must be a positive int, got {max_messages!r}")
        self.queue = queue
        self.window = float(window)
        self.max_messages = max_messages
        limit = min(PACK_BYTES, queue.max_message_bytes)
        self.max_bytes = min(max_bytes, limit) if max_bytes is not None else limit
        """Bodies per batch, and per object: a larger batch is written as several objects."""
        self._condition = _conditions(queue.clock)
        self._lock = self._condition()
        self._open: _Batch | None = None
        self._pid = os.getpid()

    def enqueue(
        self,
        body: Any,
        *,
        id: str | None = None,
        delay: Delay = 0,
        group: str | None = None,
        partition: str | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> str:
        """Add one message and return its id once the object holding it is durable.

        The arguments and their checks are `Queue.enqueue`'s (a bad one raises before anything
        is written, and in this caller only); with ``id`` it is `Queue.enqueue` itself.
        """
        queue = self.queue
        if id is not None:
            return queue.enqueue(
                body, id=id, delay=delay, group=group, partition=partition, attributes=attributes
            )
        keys, delay_ms, attrs = check_message(queue.keys, None, delay, group, partition, attributes)
        now = key_time(queue.clock)
        record = record_for(new_id(now), body, now, group, attrs)
        size = len(queue.writer.encode([record])[0])  # MalformedMessage past max_message_bytes
        entry = _Entry(record, keys, delay_ms, size, _Durable(self._condition()))
        batch = self._join(entry)
        if batch is not None:
            self._write(batch)
        entry.durable.result()
        return record.id

    def flush(self) -> None:
        """Have the open batch's leader write it now instead of at the end of its window."""
        with self._lock:
            if self._open is not None:
                self._close(self._open)
                self._lock.notify_all()

    def __enter__(self) -> GroupCommit:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.flush()

    def _join(self, entry: _Entry) -> _Batch | None:
        """Add `entry` to the open batch; the batch to write if this caller leads it."""
        if self._pid != os.getpid():
            # Forked while a batch was open: its leader is a thread of the parent, absent here.
            self._pid, self._lock, self._open = os.getpid(), self._condition(), None
        with self._lock:
            batch = self._open
            leads = batch is None
            if batch is None:
                batch = self._open = _Batch()
            batch.entries.append(entry)
            batch.size += entry.size
            if len(batch.entries) >= self.max_messages or batch.size >= self.max_bytes:
                batch.full = True
                self._open = None  # the next caller opens the next batch
                self._lock.notify_all()
            if not leads:
                return None
            try:
                self._lock.wait_for(lambda: batch.full, timeout=self.window)
            except BaseException:  # interrupted (Ctrl-C in the main thread): nothing written
                self._close(batch)
                _fail(batch.entries, "its batch's leader was interrupted before writing it")
                raise
            self._close(batch)
            return batch

    def _close(self, batch: _Batch) -> None:
        """No caller joins `batch` any more (the lock is held)."""
        batch.full = True
        if self._open is batch:
            self._open = None

    def _write(self, batch: _Batch) -> None:
        """Write the batch's objects and settle every member; none is left waiting."""
        try:
            for chunk in self._objects(batch.entries):
                self._put(chunk)
        finally:  # the leader interrupted while writing: the rest was not (or may not be)
            _fail(batch.entries, "its batch's leader was interrupted while writing it")

    def _objects(self, entries: list[_Entry]) -> list[list[_Entry]]:
        """One object per (partition, group, delay), in arrival order, each at most
        `max_bytes`."""
        lots: dict[_Lot, list[list[_Entry]]] = {}
        used: dict[_Lot, int] = {}
        for entry in entries:
            lot = (entry.keys.partition, entry.record.group, entry.delay_ms)
            chunks = lots.setdefault(lot, [[]])
            if chunks[-1] and used.get(lot, 0) + entry.size > self.max_bytes:
                chunks.append([])
                used[lot] = 0
            chunks[-1].append(entry)
            used[lot] = used.get(lot, 0) + entry.size
        return [chunk for chunks in lots.values() for chunk in chunks]

    def _put(self, chunk: list[_Entry]) -> None:
        """One PUT If-None-Match of a packed object; its members learn how it went."""
        queue, writer = self.queue, self.queue.writer
        records = [entry.record for entry in chunk]
        group, delay_ms = records[0].group, chunk[0].delay_ms
        keys = chunk[0].keys.sharded(queue.spread.pick(group))  # one shard per object
        now = key_time(queue.clock)  # the close: after every member's enqueue started
        object_id = records[0].id if len(records) == 1 else new_id(now)
        if group is not None:
            now = writer.grouped_now()
            visible = now + delay_ms
            key = MsgKey(now, object_id, group, visible if delay_ms else 0, len(records))
        else:
            key = MsgKey(now + delay_ms, object_id, count=len(records))
        full = keys.msg_key(key)
        try:
            writer.create(full, writer.encode(records))
            if group is not None:
                writer.landed(keys, key)
        except Exception as exc:  # noqa: BLE001 - raised in every caller this object carried
            for entry in chunk:
                entry.durable.settle(exc)
            return
        queue.emit("enqueue", now, message_ids=[r.id for r in records], key=full, batched=True)
        for entry in chunk:
            entry.durable.settle()


def _conditions(clock: Clock) -> Callable[[], threading.Condition]:
    """What the batcher waits on: the clock's ``condition()`` if it offers one (a clock that runs
    its own time), else a real `threading.Condition`."""
    factory: Callable[[], threading.Condition] = getattr(clock, "condition", threading.Condition)
    return factory


def _fail(entries: list[_Entry], why: str) -> None:
    """Settle every member not settled yet with an error, so that none waits forever."""
    for entry in entries:
        if not entry.durable.done():
            entry.durable.settle(S3QueueError(f"message not acknowledged: {why}"))
