"""`enqueue_many`: many messages, each with its own id, group and attributes if it likes, and a
clear account of what is stored when a PUT fails part of the way.

Every item is checked and encoded before the first PUT (one bad item writes nothing). Then:

- items with neither an ``id`` nor a ``group`` (plain bodies too) are packed, as many as fit
  in 4 MiB per object: one PUT for all of them;
- an item with an ``id`` (deduplicated: its marker first) or a ``group`` (FIFO needs its own
  key) is one object, as `enqueue` writes it.

The writes go one after the other, and the first that fails stops the batch. Its objects are
then checked with a HEAD (our token on it: it applied after all) and the batch raises
`EnqueueIncomplete`, which sorts every message into ``durable``, ``not_durable`` (never written,
or checked absent) and ``unknown`` (the check failed too), and lists in ``retry`` the items that
can be enqueued again without a duplicate: the not durable ones, and unknown ones with an id
(their marker deduplicates them). An item with an id is never ``unknown`` for long: its marker
tells.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from s3queue.errors import EnqueueIncomplete, InvalidArgument, S3QueueError
from s3queue.producing.arguments import lane_of
from s3queue.protocol.attributes import check_attributes
from s3queue.protocol.keys import MsgKey, QueueKeys, check_message_id, new_id
from s3queue.protocol.records import Record, record_for
from s3queue.protocol.shards import Spread
from s3queue.protocol.writer import Writer

PACK_BYTES = 4 * 1024 * 1024
"""`enqueue_many` starts a new packed object past this size."""

State = Literal["durable", "not_durable", "unknown"]


@dataclass(frozen=True, slots=True)
class Item:
    """One message of `Queue.enqueue_many` with what `enqueue` takes per message.

    ``Item(body, id="order-7", group="acme", attributes={"tenant": "acme"},
    partition="acme")``; attributes are merged over the call's ``attributes=`` (the item's
    win); ``partition`` (None: the call's ``partition=``) picks the item's partition, and
    ``priority`` (None: the call's ``priority=``) its priority, 0-9. A plain body is
    ``Item(body)``.
    """

    body: Any
    id: str | None = None
    group: str | None = None
    attributes: Mapping[str, str] | None = None
    partition: str | None = None
    priority: int | None = None


@dataclass(slots=True)
class _Write:
    """One object to put: a pack of records, or one record (`single`)."""

    items: list[Any]
    records: list[Record]
    key: MsgKey
    data: tuple[bytes, str]
    single: bool
    partition: str | None = None


def plan(
    writer: Writer,
    items: Iterable[Any],
    *,
    now: int,
    delay_ms: int,
    attributes: dict[str, str],
    check_group: Callable[[str | None], None],
    partition: str | None = None,
    priority: int = 0,
) -> tuple[list[_Write], list[str]]:
    """Every write of the batch, checked and encoded (`InvalidArgument` before any PUT), and
    the message ids in the order of `items`. Packs hold one folder's messages each (one
    partition's, of one priority)."""
    packable: dict[str | None, list[tuple[Any, Record]]] = {}
    writes: list[_Write] = []
    seen_ids: set[str] = set()
    ids: list[str] = []
    for given in items:
        item = given if isinstance(given, Item) else Item(given)
        record = _record(item, now, attributes, check_group, seen_ids)
        ids.append(record.id)
        home = lane_of(
            item.partition if item.partition is not None else partition,
            item.priority if item.priority is not None else priority,
            item.group,
        )
        if record.dedup or record.group is not None:
            key = writer.key_for(record, delay_ms, now)
            data = writer.encode([record])
            writes.append(_Write([given], [record], key, data, single=True, partition=home))
        else:
            packable.setdefault(home, []).append((given, record))
    packs = [
        _Write(
            [g for g, _ in chunk],
            [r for _, r in chunk],
            MsgKey(
                now + delay_ms, chunk[0][1].id if len(chunk) == 1 else new_id(now), count=len(chunk)
            ),
            writer.encode([r for _, r in chunk]),
            single=False,
            partition=home,
        )
        for home, pairs in packable.items()
        for chunk in _pack(pairs)
    ]
    return packs + writes, ids


def _record(
    item: Item,
    now: int,
    attributes: dict[str, str],
    check_group: Callable[[str | None], None],
    seen: set[str],
) -> Record:
    check_group(item.group)
    attrs = {**attributes, **check_attributes(item.attributes)}
    if item.id is not None:
        check_message_id(item.id)
        if item.id in seen:
            raise InvalidArgument(f"id {item.id!r} appears twice in one enqueue_many")
        seen.add(item.id)
    record = record_for(
        item.id if item.id is not None else new_id(now), item.body, now, item.group, attrs
    )
    record.dedup = item.id is not None
    return record


def send(
    writer: Writer, keys: QueueKeys, writes: list[_Write], now: int, spread: Spread | None = None
) -> None:
    """Put `writes` in order, each in a shard of its folder (`spread`); `EnqueueIncomplete` at
    the first that fails (module docstring)."""
    states: dict[str, State] = {}
    base = keys
    for index, write in enumerate(writes):
        keys = base.partitioned(write.partition)
        if spread is not None:
            keys = keys.sharded(spread.pick(write.records[0].group))
        try:
            if write.single:
                writer.put_one(keys, write.records[0], write.key, write.data, now)
            else:
                writer.create(keys.msg_key(write.key), write.data)
                writer.emit(
                    "enqueue",
                    now,
                    message_ids=[r.id for r in write.records],
                    key=keys.msg_key(write.key),
                )
        except S3QueueError as exc:
            state = _check(writer, keys, write)
            states.update((r.id, state) for r in write.records)
            raise _incomplete(writes, states, index, exc) from exc
        states.update((r.id, "durable") for r in write.records)


def _check(writer: Writer, keys: QueueKeys, write: _Write) -> State:
    """What became of a write that raised: its object carries our token, or is not there."""
    try:
        record = write.records[0]
        if write.single and record.dedup:
            return "durable" if writer.enqueued(record.id) else "not_durable"
        head = writer.storage.head(keys.msg_key(write.key))
    except S3QueueError:
        return "unknown"
    if head is not None and head.token == write.data[1]:
        return "durable"
    return "not_durable"


def _incomplete(
    writes: list[_Write], states: dict[str, State], failed: int, cause: S3QueueError
) -> EnqueueIncomplete:
    ids: dict[State, list[str]] = {"durable": [], "not_durable": [], "unknown": []}
    retry: list[Any] = []
    for write in writes:
        for given, record in zip(write.items, write.records, strict=True):
            state = states.get(record.id, "not_durable")
            ids[state].append(record.id)
            if state == "not_durable" or (state == "unknown" and record.dedup):
                retry.append(given)
    return EnqueueIncomplete(
        f"enqueue_many stopped at write {failed + 1} of {len(writes)}: {cause}; "
        f"{len(ids['durable'])} messages durable, {len(ids['not_durable'])} not, "
        f"{len(ids['unknown'])} unknown",
        durable=ids["durable"],
        not_durable=ids["not_durable"],
        unknown=ids["unknown"],
        retry=retry,
    )


def _pack(records: list[tuple[Any, Record]]) -> list[list[tuple[Any, Record]]]:
    chunks: list[list[tuple[Any, Record]]] = []
    size = PACK_BYTES
    for pair in records:
        length = len(json.dumps(pair[1].to_json(), separators=(",", ":")))
        if size + length > PACK_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(pair)
        size += length + 1
    return chunks


def check_items(items: object) -> None:
    """`InvalidArgument` for one body given where an iterable of items is expected."""
    if isinstance(items, str | bytes | bytearray | memoryview | Mapping | Item):
        raise InvalidArgument(
            f"enqueue_many takes an iterable of bodies or Items, not one {type(items).__name__} "
            "(use enqueue for one message)"
        )
