"""The arguments of one message, checked before anything is written (`InvalidArgument`)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from datetime import timedelta

from s3queue.errors import InvalidArgument
from s3queue.protocol.attributes import check_attributes
from s3queue.protocol.keys import (
    QueueKeys,
    check_message_id,
    check_partition,
    check_priority,
    lane_name,
)

MAX_GROUP = 128
MAX_DELAY = timedelta(days=365)
"""The longest `delay`: a longer one is almost surely a mistake (milliseconds, or a timestamp
given as a delay), and a key's 13-digit time field would overflow past about 8.2e9 s."""

Delay = float | timedelta


def check_message(
    keys: QueueKeys,
    id: str | None,
    delay: Delay,
    group: str | None,
    partition: str | None,
    attributes: Mapping[str, str] | None,
    priority: int = 0,
) -> tuple[QueueKeys, int, dict[str, str]]:
    """Every argument of one message checked: its folder's keys (of the queue's `keys`: its
    partition's, or that partition's lane of `priority`), its delay in ms and its attributes."""
    delay_ms = delay_ms_of(delay)
    check_group(group)
    attrs = check_attributes(attributes)
    if id is not None:
        check_message_id(id)
    return keys.partitioned(lane_of(partition, priority, group)), delay_ms, attrs


def lane_of(partition: str | None, priority: int, group: str | None) -> str | None:
    """The folder of a message of `partition` and `priority` (keys.py: priority lanes).

    A group is one line in enqueue order whatever its messages' priorities, so a grouped
    message takes no priority: `InvalidArgument` (docs/protocol.md, "Priorities")."""
    check_partition(partition)
    if check_priority(priority) and group is not None:
        raise InvalidArgument(
            f"priority={priority} with group={group!r}: a group runs in enqueue order, so its "
            "messages take no priority"
        )
    return lane_name(partition, priority)


def delay_ms_of(delay: object) -> int:
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


def check_group(group: str | None) -> None:
    if group is not None and (not isinstance(group, str) or not 0 < len(group) <= MAX_GROUP):
        raise InvalidArgument(f"group must be a string of 1-{MAX_GROUP} characters, got {group!r}")
