"""What a user may name, checked where the name enters: queues, message ids, partitions and
priority lanes. A partition and a lane are folders' names (`s3queue.protocol.keys`), so the
checks here are what keeps every key parseable."""

from __future__ import annotations

import re

from s3queue.contract.names import QUEUE_NAME as QUEUE_NAME  # noqa: PLC0414 - its owner is names
from s3queue.errors import InvalidArgument, InvalidName
from s3queue.protocol.shards import split_shard

MESSAGE_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
PARTITION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""A partition's name: 1-64 of ``[A-Za-z0-9_.-]``, starting alnum (it is a folder's name)."""
LANE = re.compile(r"^((?:[A-Za-z0-9][A-Za-z0-9_.-]{0,63})?)~([1-9])$")
"""A priority lane's folder name: ``[<partition>]~<priority>``."""
MAX_PRIORITY = 9


def check_queue_name(name: str) -> str:
    # fullmatch: "$" alone would let a trailing newline through.
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
        raise InvalidName(f"invalid queue name {name!r}: use 1-64 of [a-z0-9_-], starting alnum")
    return name


def check_message_id(message_id: str) -> str:
    if not isinstance(message_id, str) or not MESSAGE_ID.fullmatch(message_id):
        raise InvalidName(f"invalid message id {message_id!r}: a str of 1-128 of [A-Za-z0-9_-]")
    return message_id


def check_partition(partition: str | None) -> str | None:
    if partition is not None and (
        not isinstance(partition, str) or not PARTITION.fullmatch(partition)
    ):
        raise InvalidName(
            f"invalid partition {partition!r}: use 1-64 of [A-Za-z0-9_.-], starting alnum"
        )
    return partition


def check_priority(priority: object) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidArgument(f"priority must be an int from 0 to {MAX_PRIORITY}, got {priority!r}")
    if not 0 <= priority <= MAX_PRIORITY:
        raise InvalidArgument(f"priority must be from 0 to {MAX_PRIORITY}, got {priority}")
    return priority


def lane_name(partition: str | None, priority: int) -> str | None:
    """The folder name of `partition`'s messages of `priority` (None: the default folder)."""
    return f"{partition or ''}~{priority}" if priority else partition


def split_lane(name: str | None) -> tuple[str | None, int]:
    """(partition, priority) of a folder name (`lane_name` undone; a shard's too, shards.py)."""
    name = split_shard(name)[0]
    match = LANE.fullmatch(name) if name is not None else None
    if match is None:
        return name, 0
    return match.group(1) or None, int(match.group(2))


def is_folder_name(name: str) -> bool:
    """A partition's or a priority lane's folder name, or a shard of one (shards.py)."""
    base, shard = split_shard(name)
    if shard:
        return base is None or (split_shard(base)[1] == 0 and is_folder_name(base))
    return bool(PARTITION.fullmatch(name) or LANE.fullmatch(name))
