"""`Queue`: the producer's API (enqueue, enqueue_file, enqueue_many) on one queue. The arguments
are checked here; the objects are written by `writer.Writer`. The operator's calls on the same
`Queue` (stats, dead letters, redrive, purge, ...) come from `s3queue.operations.queue_calls`.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO

from s3queue.common.clock import Clock, SystemClock
from s3queue.common.events import Emitter, Listener
from s3queue.errors import InvalidArgument
from s3queue.operations.queue_calls import OperatorCalls
from s3queue.producing import batch
from s3queue.producing.arguments import (
    Delay,
    check_group,
    check_message,
    delay_ms_of,
    lane_of,
)
from s3queue.producing.pacing import Pacer
from s3queue.protocol.attributes import check_attributes
from s3queue.protocol.keys import (
    QueueKeys,
    check_queue_name,
    key_time,
    new_id,
)
from s3queue.protocol.payload import INLINE_BYTES, source_size
from s3queue.protocol.records import Payload, Record, record_for
from s3queue.protocol.shards import Spread
from s3queue.protocol.writer import Writer
from s3queue.storage.base import Storage
from s3queue.storage.servertime import server_time
from s3queue.storage.streams import Chained, Source

if TYPE_CHECKING:
    from s3queue.producing.batching import GroupCommit

_log = logging.getLogger(__name__)


class Queue(OperatorCalls):
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
        shards: int = 1,
    ) -> None:
        spread = Spread(shards)  # InvalidArgument before any client is made
        self.pacing: Pacer | None = None
        """The pacing of `Queue`'s own client (None with ``s3=`` or ``storage=``): its
        ``state()`` says whether S3 is throttling this queue's producers, and how fast they
        may send (`s3queue.producing.pacing`)."""
        if storage is None:
            if not bucket:
                raise InvalidArgument("Queue needs bucket= (or storage=)")
            from s3queue.storage.clients import make_client, pace  # noqa: PLC0415 - on demand
            from s3queue.storage.s3 import S3Storage  # noqa: PLC0415 - boto3 only on demand

            if s3 is None:  # producers slow down together when S3 throttles (pacing.py)
                s3 = make_client(lean=False)  # botocore's path: its answers reach the pacer
                self.pacing = pace(s3, Pacer())
            storage = S3Storage(s3, bucket)
        self.name = check_queue_name(name)
        self.storage = storage
        self.keys = QueueKeys(prefix, name)
        self.clock = clock or SystemClock()
        self.max_message_bytes = max_message_bytes
        self.emit = Emitter(name, listener)
        self._tickets = {}
        self.spread = spread
        """Which shard each ungrouped message goes to (``shards``: `s3queue.protocol.shards`);
        every producer of a queue should say the same, though any mix loses nothing."""
        self.writer = Writer(
            storage,
            self.keys,
            clock=self.clock,
            order=clock or server_time(storage),
            emit=self.emit,
            max_message_bytes=max_message_bytes,
        )

    def enqueue(
        self,
        body: Any,
        *,
        id: str | None = None,
        delay: Delay = 0,
        group: str | None = None,
        partition: str | None = None,
        attributes: Mapping[str, str] | None = None,
        priority: int = 0,
    ) -> str:
        """Add one message (one PUT) and return its id.

        With an explicit ``id`` a repeated enqueue is a no-op, never a duplicate (an id is
        unique in the queue, whatever the partition). ``delay`` is in seconds (or a
        ``timedelta``), from 0 to `MAX_DELAY`. Messages of one ``group`` are handled in enqueue
        order, one at a time. A ``partition`` (a tenant, a client: 1-64 of ``[A-Za-z0-9_.-]``)
        is served fairly beside the others, whatever their backlogs; a group lives inside its
        partition. ``attributes`` (str to str, see `s3queue.protocol.attributes`) reach the
        handler as ``message.attributes``. A ``priority`` from 0 (the default) to 9: higher
        ones start first (strictly, queue-wide; equal ones fairly across partitions); a grouped
        message takes none (its group runs in enqueue order). A bad argument raises
        `InvalidArgument` (a bad body `MalformedMessage`) before anything is written.
        """
        keys, delay_ms, attrs = check_message(
            self.keys, id, delay, group, partition, attributes, priority
        )
        keys = keys.sharded(self.spread.pick(group))
        return self._enqueue_body(keys, body, id, delay_ms, group, attrs)

    def enqueue_file(
        self,
        source: Source,
        *,
        id: str | None = None,
        delay: Delay = 0,
        group: str | None = None,
        partition: str | None = None,
        attributes: Mapping[str, str] | None = None,
        priority: int = 0,
    ) -> str:
        """Add one message whose payload is a file's bytes (a path, or a readable binary file
        object, read from its current position to its end) and return its id.

        The bytes are streamed to S3, never held in memory whole: one PUT (a multipart upload
        above 8 MiB) into ``blobs/``, then a small record in the queue that points at it. A
        file of up to `INLINE_BYTES` is sent as `enqueue(bytes)` would. The handler reads the
        payload with ``message.open()``, and as ``message.body`` when it is at most
        ``max_message_bytes``. Arguments as for `enqueue`; with an ``id`` already enqueued,
        nothing is uploaded.
        """
        keys, delay_ms, attrs = check_message(
            self.keys, id, delay, group, partition, attributes, priority
        )
        if isinstance(source, str | os.PathLike):
            if os.stat(source).st_size > self._inline_limit:
                return self._enqueue_payload(keys, source, id, delay_ms, group, attrs)
            with open(source, "rb") as stream:
                return self._enqueue_stream(keys, stream, id, delay_ms, group, attrs)
        return self._enqueue_stream(keys, source, id, delay_ms, group, attrs)

    @property
    def _inline_limit(self) -> int:
        return min(INLINE_BYTES, self.max_message_bytes // 2)

    def _enqueue_body(
        self,
        keys: QueueKeys,
        body: Any,
        id: str | None,
        delay_ms: int,
        group: str | None,
        attrs: dict[str, str],
    ) -> str:
        now = key_time(self.clock)
        record = record_for(id if id is not None else new_id(now), body, now, group, attrs)
        record.dedup = id is not None
        self.writer.send_one(keys, record, delay_ms, now)
        return record.id

    def _enqueue_stream(
        self,
        keys: QueueKeys,
        stream: BinaryIO,
        id: str | None,
        delay_ms: int,
        group: str | None,
        attrs: dict[str, str],
    ) -> str:
        """Inline `stream` if it turns out small, else upload it (with what was read of it)."""
        size = source_size(stream)
        if size is not None and size > self._inline_limit:
            return self._enqueue_payload(keys, stream, id, delay_ms, group, attrs)
        start = stream.read(self._inline_limit + 1)
        if len(start) <= self._inline_limit:
            return self._enqueue_body(keys, start, id, delay_ms, group, attrs)
        rest = io.BufferedReader(Chained(start, stream))
        return self._enqueue_payload(keys, rest, id, delay_ms, group, attrs)

    def _enqueue_payload(
        self,
        keys: QueueKeys,
        source: Source,
        id: str | None,
        delay_ms: int,
        group: str | None,
        attrs: dict[str, str],
    ) -> str:
        """Upload the payload to ``blobs/``, then put its record (payload.py). A producer that
        dies in between leaves an unreferenced blob behind, never a record without one."""
        if id is not None and self.writer.enqueued(id):
            return id
        now = key_time(self.clock)
        blob = keys.blob(new_id(now))
        head = self.storage.put_file(blob, source)
        message_id = id if id is not None else new_id(now)
        payload = Payload(blob, head.size)
        record = Record(message_id, None, now, group, attributes=attrs, payload=payload)
        record.dedup = id is not None
        if not self.writer.send_one(keys, record, delay_ms, now):
            self.storage.delete(blob)  # the id's first message is there, with its own payload
        return message_id

    def enqueue_many(
        self,
        items: Iterable[Any],
        *,
        delay: Delay = 0,
        partition: str | None = None,
        attributes: Mapping[str, str] | None = None,
        priority: int = 0,
    ) -> list[str]:
        """Add many messages, into ``partition`` (None: the default one) unless an item says
        otherwise; their ids, in the order given.

        Each item is a body, or a `batch.Item` (``s3queue.Item``) with its own ``id``,
        ``group``, ``partition``, ``priority`` and ``attributes`` (merged over
        ``attributes=``). Plain ones are packed into as few objects as possible (one PUT per
        4 MiB, one partition and priority per object); one with an id or a group is an object
        of its own, as `enqueue` writes it. Every item is checked before the first PUT: one
        bad item writes nothing. A PUT that fails stops the batch with `EnqueueIncomplete`,
        which says which messages are durable and which items to send again (see `batch`).
        """
        delay_ms = delay_ms_of(delay)
        lane_of(partition, priority, None)
        attrs = check_attributes(attributes)
        batch.check_items(items)
        now = key_time(self.clock)
        writes, ids = batch.plan(
            self.writer,
            items,
            now=now,
            delay_ms=delay_ms,
            attributes=attrs,
            check_group=check_group,
            partition=partition,
            priority=priority,
        )
        batch.send(self.writer, self.keys, writes, now, self.spread)
        return ids

    def batching(self, *, window: float = 0.05, max_messages: int = 1000) -> GroupCommit:
        """A group-commit producer of this queue: concurrent `enqueue` calls arriving within
        `window` seconds share one PUT, each returning once its message is durable
        (`s3queue.producing.batching`)."""
        # Imported on use: the Lambda functions import this module, and never batch.
        from s3queue.producing.batching import GroupCommit  # noqa: PLC0415

        return GroupCommit(self, window=window, max_messages=max_messages)
