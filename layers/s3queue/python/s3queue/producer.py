"""`Queue`: the producer's API (enqueue, enqueue_many) and the admin calls on one queue.

A grouped message's place in its group is its key time, the producer's clock when the enqueue
starts. The leader reads only a `straggler_margin` (2 s) behind its cursor, so a PUT that lands
later than that (retried 503s, a slow link) is behind the cursor, and the group's next message
could be read and sent first. So an enqueue whose grouped PUT took longer than `LANDING_MS`
puts a *late notice* (a small object keyed now, ``~p<target>``) before it returns: the leader
reads the notice ahead of anything enqueued after it and fetches its target first::

    producer   PUT m1 (key t0) .......(slow)....... lands --- PUT notice (key t1) --- return
    producer                                                                   PUT m2 (key >= t1)
    leader                    cursor passes t0 ............ LIST: notice, m2 -> LIST m1 first
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import numbers
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from s3queue import admin
from s3queue.clock import Clock, SystemClock
from s3queue.errors import Conflict, InvalidArgument, MalformedMessage
from s3queue.events import Emitter, Listener
from s3queue.keys import MsgKey, QueueKeys, check_message_id, check_queue_name, new_id
from s3queue.model import Marker, Record, encode_records, record_for
from s3queue.storage.base import Storage, new_token

if TYPE_CHECKING:
    from s3queue.batching import GroupCommit

_log = logging.getLogger(__name__)

LANDING_MS = 500
"""A grouped PUT that took longer than this gets a late notice; the coordinator's
`straggler_margin` (2 s) must exceed it by the producers' clock skew (so 1.5 s by default)."""
MAX_NOTICES = 10
PACK_BYTES = 4 * 1024 * 1024
"""`enqueue_many` starts a new object past this size."""
MAX_GROUP = 128
MAX_DELAY = timedelta(days=365)
"""The longest `delay`: a longer one is almost surely a mistake (milliseconds, or a timestamp
given as a delay), and a key's 13-digit time field would overflow past about 8.2e9 s."""

Delay = float | timedelta


class Queue:
    """One named queue in a bucket.

    ``Queue("emails", bucket="my-bucket")`` uses a new boto3 client (`make_client`: its
    endpoint is ``S3QUEUE_ENDPOINT_URL`` if set, else AWS); pass ``s3=`` to share one, or
    ``storage=`` (e.g. ``MemoryStorage()``) to run without S3.
    """

    def __init__(
        self,
        name: str,
        *,
        bucket: str | None = None,
        s3: Any = None,
        prefix: str = "s3queue",
        storage: Storage | None = None,
        clock: Clock | None = None,
        max_message_bytes: int = 10 * 1024 * 1024,
        listener: Listener | None = None,
    ) -> None:
        if storage is None:
            if not bucket:
                raise InvalidArgument("Queue needs bucket= (or storage=)")
            from s3queue.storage.s3 import S3Storage, make_client  # noqa: PLC0415 - boto3 only on demand

            storage = S3Storage(s3 if s3 is not None else make_client(), bucket)
        self.name = check_queue_name(name)
        self.storage = storage
        self.keys = QueueKeys(prefix, name)
        self.clock = clock or SystemClock()
        self.max_message_bytes = max_message_bytes
        self.emit = Emitter(name, listener)
        self._tickets: admin.TicketCache = {}

    def enqueue(
        self, body: Any, *, id: str | None = None, delay: Delay = 0, group: str | None = None
    ) -> str:
        """Add one message (one PUT) and return its id.

        With an explicit ``id`` a repeated enqueue is a no-op, never a duplicate. ``delay`` is
        in seconds (or a ``timedelta``), from 0 to `MAX_DELAY`. Messages of one ``group`` are
        handled in enqueue order, one at a time. A bad argument raises `InvalidArgument` (a bad
        body `MalformedMessage`) before anything is written.
        """
        delay_ms = _delay_ms(delay)
        _check_group(group)
        if id is not None:
            check_message_id(id)
        now = self.clock.now_ms()
        visible = now + delay_ms
        message_id = id if id is not None else new_id(now)
        record = record_for(message_id, body, now, group)
        record.dedup = id is not None
        # The key's id is always a generated one: keys of one millisecond sort by it, and only
        # generated ids follow enqueue order (a group's FIFO); an explicit id is in the record.
        key_id = message_id if id is None else new_id(now)
        if group is not None:
            key = MsgKey(now, key_id, group, visible if visible > now else 0)
        else:
            key = MsgKey(visible, key_id)
        data = self._encode([record])
        if id is not None:
            key = self._enqueue_once(record, key, data)
        else:
            self._create(self.keys.msg_key(key), data)
        if group is not None:
            self._notice_if_late(key)
        self.emit("enqueue", now, message_id=message_id, key=self.keys.msg_key(key))
        return message_id

    def enqueue_many(self, bodies: Iterable[Any], *, delay: Delay = 0) -> list[str]:
        """Add many messages packed into as few objects as possible (one PUT per 4 MiB).

        Every body is checked before the first PUT: one bad body writes nothing.
        """
        delay_ms = _delay_ms(delay)
        if isinstance(bodies, str | bytes | bytearray | memoryview | Mapping):
            raise InvalidArgument(
                f"enqueue_many takes an iterable of bodies, not one {type(bodies).__name__} "
                "(use enqueue for one message)"
            )
        now = self.clock.now_ms()
        visible = now + delay_ms
        records = [record_for(new_id(now), body, now) for body in bodies]
        for chunk in _pack(records):
            object_id = chunk[0].id if len(chunk) == 1 else new_id(now)
            key = self.keys.msg_key(MsgKey(visible, object_id, count=len(chunk)))
            self._create(key, self._encode(chunk))
            self.emit("enqueue", now, message_ids=[r.id for r in chunk], key=key)
        return [r.id for r in records]

    def batching(self, *, window: float = 0.05, max_messages: int = 1000) -> GroupCommit:
        """A group-commit producer of this queue: concurrent `enqueue` calls arriving within
        `window` seconds share one PUT, each returning once its message is durable
        (`s3queue.batching`)."""
        # Imported on use: the Lambda functions import this module, and never batch.
        from s3queue.batching import GroupCommit  # noqa: PLC0415

        return GroupCommit(self, window=window, max_messages=max_messages)

    def stats(self) -> dict[str, Any]:
        """Counts of pending, delayed, in-flight and dead messages, and the oldest's age.

        Costs one LIST per 1,000 keys of the queue, and one GET per ticket that changed since
        this object's previous call (all of them the first time): poll one `Queue`, not new ones.
        """
        return admin.stats(self.storage, self.keys, self.clock.now_ms(), self._tickets)

    def dead_letters(
        self, limit: int | None = 100, *, after: str | None = None
    ) -> list[dict[str, Any]]:
        """At most `limit` (None: all) DLQ entries, oldest first, each with its error history.

        The next page starts ``after=`` the last entry's ``key``; the schema is in `admin`.
        """
        return admin.dead_letters(self.storage, self.keys, limit, after)

    def redrive(self) -> int:
        """Move every DLQ entry back to the queue as a fresh message; how many moved."""
        return admin.redrive(self.storage, self.keys, self.clock.now_ms())

    def purge(self, *, include_dlq: bool = False) -> int:
        """Delete every pending message (and the DLQ if asked); how many messages went."""
        return admin.purge(self.storage, self.keys, include_dlq=include_dlq)

    def delete(self) -> int:
        """Delete the queue: every object under its prefix."""
        return admin.delete(self.storage, self.keys)

    def _encode(self, records: list[Record]) -> tuple[bytes, str]:
        token = new_token()
        data = encode_records(records, token)
        if len(data) > self.max_message_bytes:
            raise MalformedMessage(
                f"message of {len(data)} bytes exceeds max_message_bytes={self.max_message_bytes}"
            )
        return data, token

    def _create(self, key: str, encoded: tuple[bytes, str]) -> None:
        self.storage.put(key, encoded[0], if_none_match=True, token=encoded[1])

    def _notice_if_late(self, key: MsgKey) -> None:
        """Put late notices until one lands within `LANDING_MS` of its key time (see module)."""
        landed_by, now = key.sort_ms, self.clock.now_ms()
        for _ in range(MAX_NOTICES):
            if now - landed_by <= LANDING_MS:
                return
            notice = self.keys.msg_key(key.notice(now, new_id(now)))
            token = new_token()
            body = json.dumps({"v": 1, "token": token, "notice": self.keys.msg_key(key)}).encode()
            self.storage.put(notice, body, if_none_match=True, token=token)
            self.emit("late_notice", now, key=self.keys.msg_key(key), notice=notice)
            landed_by, now = now, self.clock.now_ms()
        _log.warning("%s: every late notice for %s landed late", self.name, key.name())

    def _enqueue_once(self, record: Record, key: MsgKey, data: tuple[bytes, str]) -> MsgKey:
        """Marker first (If-None-Match), then the message: a retried enqueue finds the marker.

        A marker marked done means the message was handled: nothing to do. Otherwise the first
        call may have died between the two PUTs, so the message is put at the marker's key
        (If-None-Match: a no-op when it is there). Should it be handled and deleted between our
        read of the marker and that PUT, the worker finds the marker done and skips it.
        """
        marker = self.keys.marker(record.id)
        token = new_token()
        full = self.keys.msg_key(key)
        body = Marker("pending", full).encode(token)
        try:
            self.storage.put(marker, body, if_none_match=True, token=token)
        except Conflict:
            obj = self.storage.get(marker)
            existing = Marker.decode(obj.body) if obj is not None else Marker("pending")
            if existing.done:
                return key
            full = existing.key or full
            key = self.keys.parse_msg(full) or key
        with contextlib.suppress(Conflict):  # the first enqueue's message is there
            self._create(full, data)
        return key


def _delay_ms(delay: object) -> int:
    """`delay` in milliseconds; `InvalidArgument` unless a number or timedelta in [0, MAX]."""
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, numbers.Real) and not isinstance(delay, bool):
        try:
            seconds = float(delay)
        except OverflowError:  # an int beyond any float
            seconds = math.inf
    else:
        raise InvalidArgument(
            f"delay must be a number of seconds or a datetime.timedelta, got {delay!r}"
        )
    limit = MAX_DELAY.total_seconds()
    if not 0 <= seconds <= limit:  # NaN compares false
        raise InvalidArgument(
            f"delay must be finite, from 0 to {limit:.0f} seconds (MAX_DELAY), got {delay!r}"
        )
    return round(seconds * 1000)


def _check_group(group: str | None) -> None:
    if group is not None and (not isinstance(group, str) or not 0 < len(group) <= MAX_GROUP):
        raise InvalidArgument(f"group must be a string of 1-{MAX_GROUP} characters, got {group!r}")


def _pack(records: list[Record]) -> list[list[Record]]:
    chunks: list[list[Record]] = []
    size = PACK_BYTES
    for record in records:
        length = len(json.dumps(record.to_json(), separators=(",", ":")))
        if size + length > PACK_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(record)
        size += length + 1
    return chunks
